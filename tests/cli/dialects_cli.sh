#!/usr/bin/env bash
# Kernel selection from the command line (backend/kernel_table.h,
# backend/cpu/cpu_autotune.h): --dialects restricts and orders the kernels a
# step binds, and a restriction that leaves ops without a kernel is one
# error line naming them and the dialects that would have one; an unknown
# dialect is an error listing the known ones; --autotune times every
# candidate, records the times in the report, and a compile-cache hit binds
# the same choices with the same times without timing again; the losses of
# a restricted or autotuned step match the default's.
# usage: dialects_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"
export KILN_CACHE_DIR="$W/cache"

export_model resnet_mini --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/resnet_mini.pt"
field() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# --dialects blas,cpu: no oneDNN kernel anywhere, blas preferred over cpu.
"$KILN" train "$M" --steps 3 --no-cache --dialects blas,cpu --report "$W/blas.json" >/dev/null 2>&1 ||
  fail "--dialects blas,cpu exited $?"
"$KILN" train "$M" --steps 3 --no-cache --report "$W/default.json" >/dev/null 2>&1 || fail "default exited $?"
"$PY" - "$W/blas.json" "$W/default.json" <<'PYEOF' || fail "--dialects blas,cpu bound the wrong kernels or diverged"
import json, sys
b, d = (json.load(open(p)) for p in sys.argv[1:])
kinds = {k["dialect"] for k in b["kernels"]}
assert kinds <= {"blas", "cpu"}, kinds
assert any(k["kernel"] == "blas.conv2d" for k in b["kernels"]), "no blas.conv2d"
assert any(k["dialect"] == "onednn" for k in d["kernels"]), "the default binds no oneDNN kernel"
assert b["kernel_selection"]["dialects"] == "blas,cpu", b["kernel_selection"]
lb, ld = ([s["loss"] for s in r["steps"]] for r in (b, d))
assert all(abs(x - y) <= 1e-4 * max(1, abs(y)) for x, y in zip(lb, ld)), (lb, ld)
PYEOF
ok "--dialects blas,cpu binds only blas and cpu kernels, blas first, with the default's losses"

out=$("$KILN" train "$M" --steps 1 --no-cache --dialects blas 2>&1) && fail "--dialects blas (no elementwise kernels) succeeded"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "--dialects blas: more than one line: $out"
grep -q "no CPU kernel for .* nodes: .*adam_update x.*(dialects blas have none; cpu would)" <<<"$out" ||
  fail "--dialects blas: unclear error: $out"
out=$("$KILN" train "$M" --steps 1 --no-cache --dialects cpu,cudnn 2>&1) && fail "--dialects cudnn succeeded on the CPU"
grep -q "unknown dialect 'cudnn' (known: blas, cpu, gloo, onednn)" <<<"$out" || fail "unknown dialect: unclear error: $out"
out=$("$KILN" train "$M" --steps 1 --no-cache --dialects cpu,cpu 2>&1) && fail "--dialects cpu,cpu succeeded"
grep -q "'cpu' named twice" <<<"$out" || fail "duplicate dialect: unclear error: $out"
ok "an incomplete, unknown or repeated --dialects is one clear error"

# --autotune: every multi-candidate node timed, the fastest bound.
"$KILN" train "$M" --steps 3 --autotune --report "$W/at1.json" >/dev/null 2>&1 || fail "--autotune exited $?"
"$KILN" train "$M" --steps 3 --autotune --report "$W/at2.json" >/dev/null 2>&1 || fail "--autotune (hit) exited $?"
"$PY" - "$W/at1.json" "$W/at2.json" "$W/default.json" <<'PYEOF' || fail "--autotune choices or the cache hit are wrong"
import json, sys
a, h, d = (json.load(open(p)) for p in sys.argv[1:])
assert a["cache"]["status"] == "miss" and h["cache"]["status"] == "hit", (a["cache"], h["cache"])
timed = [k for k in a["kernels"] if "autotune" in k]
assert timed, "no node was autotuned"
for k in timed:
    t = k["autotune"]
    assert len(t) >= 2, k
    ok = [c for c in t if c["millis"] >= 0]
    best = min(ok, key=lambda c: c["millis"])
    assert k["kernel"] == best["kernel"], (k["node"], k["kernel"], t)
assert {k["node"].split(" ")[0] for k in timed} >= {"conv2d", "conv2d_input_backward"}, timed
# The hit binds and reports exactly what was measured, without measuring
# again (measured_ms is each run's own training profile).
def chosen(r):
    return [{k: v for k, v in e.items() if k != "measured_ms"} for e in r["kernels"]]
assert chosen(a) == chosen(h), "a cache hit chose or reported differently"
la, ld = ([s["loss"] for s in r["steps"]] for r in (a, d))
assert all(abs(x - y) <= 1e-4 * max(1, abs(y)) for x, y in zip(la, ld)), (la, ld)
PYEOF
"$KILN" train "$M" --steps 1 --report "$W/plain.json" >/dev/null 2>&1 || fail "train without --autotune exited $?"
[ "$(field "$W/plain.json" "j['cache']['status']")" = miss ] || fail "--autotune and the default share a cache entry"
ok "--autotune binds the fastest candidate, reports every time, and a cache hit keeps them"

[ $fails = 0 ] && echo "all dialect checks passed" || { echo "$fails failed"; exit 1; }
