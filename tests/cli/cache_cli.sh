#!/usr/bin/env bash
# The compile cache end to end (backend/cache/compile_cache.h, driver/step_cache.h):
# a second kiln compile is a hit that binds the same graph, kernels and
# memory plan; kiln train from a hit computes the same losses bit for bit as
# --no-cache; a corrupt, truncated or foreign entry is reported once,
# removed and rebuilt, never used; the key follows the model's structure
# (not its path, mtime or weights' values: another file's hit is checked
# against its import) and the options that change the step (not the
# learning rate) and the libtorch plugin's build; kiln cache list / stats /
# clear; a hit never loads libtorch.
# usage: cache_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"
export KILN_CACHE_DIR="$W/cache"

export_model gpt2_mini --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/gpt2_mini.pt"
status() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['cache']['status'])" "$1"; }

"$KILN" compile "$M" --report "$W/c1.json" >"$W/c1.out" 2>&1 || fail "first compile exited $?"
"$KILN" compile "$M" --report "$W/c2.json" >"$W/c2.out" 2>&1 || fail "second compile exited $?"
[ "$(status "$W/c1.json")" = miss ] || fail "first compile: cache $(status "$W/c1.json"), want miss"
[ "$(status "$W/c2.json")" = hit ] || fail "second compile: cache $(status "$W/c2.json"), want hit"
grep -q "compile cache: hit" "$W/c2.out" || fail "kiln compile does not print the hit: $(cat "$W/c2.out")"
"$PY" - "$W/c1.json" "$W/c2.json" <<'PYEOF' || fail "a hit differs from the compile it cached"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for k in ("graph", "kernels", "memory", "passes", "model", "training"):
    assert a[k] == b[k], k
assert b["compile"]["passes_millis"] == 0, b["compile"]
PYEOF
ok "second compile is a hit with the same graph, kernels, memory plan and pass trace"

# Same content under another path and mtime: a hit. Another option: a miss;
# the learning rate is an input of the step, not part of it: a hit.
cp "$M" "$W/copy.pt" && touch -d "2001-01-01" "$W/copy.pt"
"$KILN" compile "$W/copy.pt" --report "$W/c3.json" >/dev/null 2>&1
[ "$(status "$W/c3.json")" = hit ] || fail "a copy of the model: cache $(status "$W/c3.json"), want hit"
"$KILN" compile "$M" --weight-decay 0.05 --report "$W/c4.json" >/dev/null 2>&1
[ "$(status "$W/c4.json")" = miss ] || fail "--weight-decay 0.05: cache $(status "$W/c4.json"), want miss"
"$KILN" compile "$M" --lr 0.5 --report "$W/c5.json" >/dev/null 2>&1
[ "$(status "$W/c5.json")" = hit ] || fail "--lr 0.5: cache $(status "$W/c5.json"), want hit"
# One weight changed (the archive's CRC of that entry changes): a miss.
"$PY" - "$M" "$W/changed.pt" <<'PYEOF'
import sys, zipfile
zin, zout = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_STORED)
done = False
for info in zin.infolist():
    data = zin.read(info.filename)
    if not done and "/data/" in info.filename and len(data) >= 4:
        data, done = data[:-4] + b"\0\0\0\0", True
    zout.writestr(info, data)
zout.close()
PYEOF
ok "the key follows the model's structure and the step options, not paths, mtimes or the learning rate"

# Other weights in the same structure: a hit, once the import of the new file
# makes the entry's graph (kiln compile imports to check it: 1 import).
"$KILN" compile "$W/changed.pt" --report "$W/c6.json" >/dev/null 2>&1
[ "$(status "$W/c6.json")" = hit ] || fail "a changed weight: cache $(status "$W/c6.json"), want hit"
imports=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['compile']['imports'])" "$W/c6.json")
[ "$imports" = 1 ] || fail "a hit from another file: $imports imports, want 1 (the check)"
ok "a model with other weights hits the entry of its structure"

# Another build of the libtorch plugin (which holds the TorchScript importer): a miss, then a hit.
PLUGIN="$(dirname "$KILN")/libkiln_torch.so"
if [ -f "$PLUGIN" ]; then
  mkdir -p "$W/plugin" && cp "$PLUGIN" "$W/plugin/" && touch -d "2001-01-01" "$W/plugin/libkiln_torch.so"
  KILN_TORCH_PLUGIN="$W/plugin/libkiln_torch.so" "$KILN" compile "$M" --report "$W/p1.json" >/dev/null 2>&1
  KILN_TORCH_PLUGIN="$W/plugin/libkiln_torch.so" "$KILN" compile "$M" --report "$W/p2.json" >/dev/null 2>&1
  [ "$(status "$W/p1.json")" = miss ] || fail "another plugin build: cache $(status "$W/p1.json"), want miss"
  [ "$(status "$W/p2.json")" = hit ] || fail "the same plugin again: cache $(status "$W/p2.json"), want hit"
  ok "a rebuilt TorchScript importer (libkiln_torch.so) does not read the old build's entries"
else
  echo "SKIP: no libkiln_torch.so beside $KILN (the plugin check needs it)"
fi

# kiln train from a hit: the same losses, bit for bit, as without the cache.
"$KILN" train "$M" --steps 4 --report "$W/t1.json" >/dev/null 2>&1 || fail "train (cache) exited $?"
"$KILN" train "$M" --steps 4 --no-cache --report "$W/t2.json" >/dev/null 2>&1 || fail "train --no-cache exited $?"
[ "$(status "$W/t1.json")" = hit ] || fail "train: cache $(status "$W/t1.json"), want hit"
[ "$(status "$W/t2.json")" = off ] || fail "train --no-cache: cache $(status "$W/t2.json"), want off"
"$PY" - "$W/t1.json" "$W/t2.json" <<'PYEOF' || fail "losses from a cached step differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
la, lb = [s["loss"] for s in a["steps"]], [s["loss"] for s in b["steps"]]
assert len(la) == 4 and la == lb, (la, lb)
PYEOF
ok "kiln train from a cached step: the same losses as --no-cache"

# kiln train of the changed weights from that hit: their losses (not the
# entry's model's), as --no-cache computes them.
"$KILN" train "$W/changed.pt" --steps 4 --report "$W/t3.json" >/dev/null 2>&1 || fail "train changed (cache) exited $?"
"$KILN" train "$W/changed.pt" --steps 4 --no-cache --report "$W/t4.json" >/dev/null 2>&1 ||
  fail "train changed --no-cache exited $?"
[ "$(status "$W/t3.json")" = hit ] || fail "train changed: cache $(status "$W/t3.json"), want hit"
"$PY" - "$W/t3.json" "$W/t4.json" "$W/t1.json" <<'PYEOF' || fail "losses of other weights from a cached step differ"
import json, sys
a, b, first = ([s["loss"] for s in json.load(open(p))["steps"]] for p in sys.argv[1:])
assert len(a) == 4 and a == b, (a, b)
assert a != first, "the changed weights trained like the original ones"
PYEOF
ok "kiln train of other weights from a hit: their own losses, as --no-cache"

# A module whose import reads a tensor's value into the graph (a scripted
# 0-d tensor attribute becomes a scalar): the same structure with another
# value is rebuilt, and trains as --no-cache does; another weight still hits.
cat >"$W/scaled.py" <<'PYEOF'  # a file: torch.jit.script reads the class's source
import sys, torch
class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.k = torch.tensor(2.0)  # an attribute, neither parameter nor buffer
    def forward(self, x):
        return self.lin(x) * self.k
torch.manual_seed(0)
m = torch.jit.script(Scaled())
m.save(sys.argv[1] + "/scaled2.pt")
with torch.no_grad():
    m.lin.weight[0].add_(0.5)  # one row: a shift of every logit would not change the loss
m.save(sys.argv[1] + "/scaled2w.pt")
with torch.no_grad():
    m.k.fill_(3.0)
m.save(sys.argv[1] + "/scaled3.pt")
PYEOF
"$PY" "$W/scaled.py" "$W" || fail "export of the scripted models"
for f in scaled2 scaled2w scaled3; do
  "$KILN" train "$W/$f.pt" --input-shape 4x8 --steps 3 --report "$W/$f.json" >/dev/null 2>&1 || fail "train $f exited $?"
  "$KILN" train "$W/$f.pt" --input-shape 4x8 --steps 3 --no-cache --report "$W/$f.off.json" >/dev/null 2>&1 ||
    fail "train $f --no-cache exited $?"
done
for want in scaled2:miss scaled2w:hit scaled3:rebuilt; do
  f=${want%%:*}
  [ "$(status "$W/$f.json")" = "${want#*:}" ] || fail "$f: cache $(status "$W/$f.json"), want ${want#*:}"
done
"$PY" - "$W" <<'PYEOF' || fail "the scripted models' losses from the cache differ"
import json, sys
losses = lambda f: [s["loss"] for s in json.load(open(f"{sys.argv[1]}/{f}.json"))["steps"]]
for f in ("scaled2", "scaled2w", "scaled3"):
    assert losses(f) == losses(f + ".off"), (f, losses(f), losses(f + ".off"))
assert losses("scaled2w") != losses("scaled2"), "the changed weight changed nothing"
assert losses("scaled3") != losses("scaled2w"), "the attribute's value changed nothing"
problem = json.load(open(f"{sys.argv[1]}/scaled3.json"))["cache"]["problem"]
assert "another graph" in problem, problem
PYEOF
ok "an import that reads a value into the graph rebuilds the entry of another value"

# Corrupt entries: reported once, removed, rebuilt; the next run hits.
entry=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['cache']['entry'])" "$W/c2.json")
[ -f "$entry" ] || fail "no entry at $entry"
for how in flip truncate foreign empty; do
  case $how in
    flip) "$PY" -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=1; open(p,'wb').write(b)" "$entry" ;;
    truncate) truncate -s -100 "$entry" ;;
    foreign) echo "not a cache entry" >"$entry" ;;
    empty) : >"$entry" ;;
  esac
  out=$("$KILN" compile "$M" --report "$W/k.json" 2>&1) || fail "$how: compile exited $?"
  [ "$(grep -c "warning: cache entry" <<<"$out")" = 1 ] || fail "$how: want one warning, got: $out"
  [ "$(status "$W/k.json")" = rebuilt ] || fail "$how: cache $(status "$W/k.json"), want rebuilt"
  "$KILN" compile "$M" --report "$W/k2.json" >/dev/null 2>&1
  [ "$(status "$W/k2.json")" = hit ] || fail "$how: the rebuilt entry is not a hit"
done
ok "corrupt, truncated, foreign and empty entries are reported once and rebuilt"

# --no-cache writes nothing; kiln cache list / stats / clear.
before=$(ls "$KILN_CACHE_DIR"/*.kce | wc -l)
"$KILN" compile "$M" --no-cache --amp bf16 >/dev/null 2>&1 || fail "compile --no-cache exited $?"
[ "$(ls "$KILN_CACHE_DIR"/*.kce | wc -l)" = "$before" ] || fail "--no-cache wrote an entry"
out=$("$KILN" cache list) || fail "cache list exited $?"
[[ "$out" == "$before entries in $KILN_CACHE_DIR"* ]] || fail "cache list: $out"
grep -q "gpt2_mini.pt" <<<"$out" || fail "cache list does not name the model: $out"
out=$("$KILN" cache stats) || fail "cache stats exited $?"
grep -Eq "^hits +[1-9]" <<<"$out" || fail "cache stats counts no hit: $out"
grep -Eq "^corrupt or stale entries replaced 4" <<<"$out" || fail "cache stats: want 4 replaced: $out"
out=$("$KILN" cache clear) || fail "cache clear exited $?"
[ "$out" = "removed $before entries from $KILN_CACHE_DIR" ] || fail "cache clear: $out"
[ -z "$(ls -A "$KILN_CACHE_DIR")" ] || fail "cache clear left: $(ls -A "$KILN_CACHE_DIR")"
"$KILN" cache >/dev/null 2>&1 && fail "kiln cache without a subcommand exited 0"
ok "kiln cache list, stats, clear; --no-cache writes nothing"

# A hit needs no libtorch (the dynamic loader opens neither the plugin nor
# libtorch), and an import with a broken plugin fails with one line that
# names it (another plugin file is another build: a miss, so an import).
"$KILN" compile "$M" >/dev/null 2>&1
out=$(LD_DEBUG=files "$KILN" compile "$M" 2>&1) || fail "hit exited $?"
grep -q "compile cache: hit" <<<"$out" || fail "no hit: $(grep -v '^ *[0-9]*:' <<<"$out")"
! grep -q "file=.*libkiln_torch.so\|file=.*libtorch" <<<"$out" || fail "a hit loaded libtorch"
echo "not a shared library" >"$W/bad_plugin.so"
for flags in "" "--no-cache"; do
  out=$(KILN_TORCH_PLUGIN="$W/bad_plugin.so" "$KILN" compile "$M" $flags 2>&1) && fail "import with a broken plugin exited 0"
  [ "$(wc -l <<<"$out")" = 1 ] && grep -q "cannot load the libtorch plugin $W/bad_plugin.so" <<<"$out" ||
    fail "import with a broken plugin ($flags): $out"
done
ok "a cache hit loads no libtorch; a broken plugin is one clear error"

# An unwritable cache directory: a warning, the compile still succeeds.
out=$(KILN_CACHE_DIR=/proc/kiln-cache "$KILN" compile "$M" 2>&1) || fail "unwritable cache dir: exited $?"
grep -q "warning: could not write the compile cache" <<<"$out" || fail "unwritable cache dir: no warning: $out"
ok "an unwritable cache directory is a warning"

[ $fails = 0 ] && echo "all cache checks passed" || { echo "$fails failed"; exit 1; }
