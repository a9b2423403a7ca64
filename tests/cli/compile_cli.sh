#!/usr/bin/env bash
# kiln compile and the report (docs/report-schema.md) on zoo models: the
# pass table, the report's fields and versions, the passes it lists equal
# the default pipeline, flops > 0, --freeze removes nodes and flops (and a
# frozen parameter keeps its value through kiln train), kiln train --report
# adds the steps, --dump-dir, and one-line errors with no file left behind
# for bad input, the model imported once. kiln memory prints the peak, the arena and the tensors at
# the peak, the peak by category, and its JSON is the report's memory object.
# usage: compile_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

for m in mlp resnet_mini; do
  export_model $m --format trace --train || { echo "FAIL export $m"; exit 1; }
done
M="$W/resnet_mini.pt"

# The default pipeline of kiln train, as kiln passes lists it.
"$KILN" passes | awk '/^default pipeline of kiln train:/ { on = 1; next } on && NF == 0 { on = 0 } on { print $2 }' \
  >"$W/pipeline.txt"
[ -s "$W/pipeline.txt" ] || fail "could not read the default pipeline from kiln passes"

out=$("$KILN" compile "$M" --report "$W/full.json" 2>&1) || fail "kiln compile exited $?: $out"
for want in "pass" "changed" "flops" "est. peak" "total compile" "peak RSS" "freeze" "wrote report to"; do
  [[ "$out" == *"$want"* ]] || fail "kiln compile output lacks '$want': $out"
done
ok "kiln compile prints the pass table"

# The model is imported once, with the final shapes: the input types it
# records are read from the archive without importing it, also when --batch
# or the ranks change them.
"$KILN" compile "$M" --no-cache --report "$W/once.json" >/dev/null 2>&1 || fail "kiln compile --no-cache exited $?"
"$KILN" compile "$M" --no-cache --batch 4 --report "$W/batch4.json" >/dev/null 2>&1 || fail "kiln compile --batch 4 exited $?"
"$KILN" compile "$M" --no-cache --nproc 2 --report "$W/ranks2.json" >/dev/null 2>&1 || fail "kiln compile --nproc 2 exited $?"
imports() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['compile']['imports'])" "$1"; }
batch() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['training']['batch'][0]['type'])" "$1"; }
for r in once batch4 ranks2; do
  [ "$(imports "$W/$r.json")" = 1 ] || fail "$r: kiln compile imported the model $(imports "$W/$r.json") times, want 1"
done
[ "$(batch "$W/batch4.json")" = "f32[4,3,32,32]" ] || fail "--batch 4: input0 is $(batch "$W/batch4.json")"
[ "$(batch "$W/ranks2.json")" = "f32[1,3,32,32]" ] || fail "--nproc 2: input0 is $(batch "$W/ranks2.json")"
ok "the model is imported once, also with --batch 4 and --nproc 2"

"$KILN" compile "$M" --freeze layer1 --freeze conv1 --report "$W/frozen.json" >/dev/null 2>&1 ||
  fail "kiln compile --freeze exited $?"

"$PY" - "$W" "$M" <<'EOF' || fail "report checks"
import json, re, sys
w, model = sys.argv[1], sys.argv[2]
pipeline = [l.strip() for l in open(f"{w}/pipeline.txt") if l.strip()]
bad = []
def check(cond, what):
    if not cond:
        bad.append(what)
def validate(r, name):
    check(r.get("schema") == "kiln-report", f"{name}: schema")
    check(r.get("version") == 1, f"{name}: version")
    check(isinstance(r.get("kiln_version"), str) and r["kiln_version"], f"{name}: kiln_version")
    m = r["model"]
    check(m["path"] == model and m["format"] == "torchscript", f"{name}: model path/format {m}")
    check(m["params"] > 0 and m["param_bytes"] == 4 * m["params"], f"{name}: params {m}")
    t = r["training"]
    for k in ("loss", "optimizer", "lr", "freeze", "frozen", "batch"):
        check(k in t, f"{name}: training.{k}")
    names = [p["name"] for p in r["passes"]]
    check(names == pipeline, f"{name}: passes {names} != pipeline {pipeline}")
    for p in r["passes"]:
        for k in ("millis", "changed", "nodes", "flops", "peak_bytes", "hash", "statistics"):
            check(k in p, f"{name}: pass {p.get('name')} lacks {k}")
        check(re.fullmatch(r"[0-9a-f]{16}", p["hash"]) is not None, f"{name}: hash {p['hash']}")
        check(p["flops"] > 0 and p["peak_bytes"] > 0 and p["nodes"] > 0, f"{name}: pass {p['name']} sizes")
    check(r["graph"]["nodes"] == r["passes"][-1]["nodes"], f"{name}: graph.nodes")
    check(r["graph"]["flops"] > 0, f"{name}: graph.flops")
    check(len(r["kernels"]) == r["graph"]["nodes"], f"{name}: a kernel per node")
    check(all(k["node"] and k["kernel"] for k in r["kernels"]), f"{name}: kernel entries")
    ex = r["execution"]
    stages = [k["stage"] for k in r["kernels"]]
    check(stages == sorted(stages) and stages[0] == 0 and stages[-1] == ex["stages"] - 1, f"{name}: stages {ex}")
    check(ex["threads"] >= 1 and ex["concurrent_nodes"] is True, f"{name}: execution {ex}")
    check(max(stages.count(k) for k in set(stages)) == ex["widest_stage"], f"{name}: widest stage {ex}")
    check(sum(stages.count(k) for k in set(stages) if stages.count(k) > 1) == ex["nodes_in_shared_stages"],
          f"{name}: nodes in shared stages {ex}")
    c = r["compile"]
    check(c["millis"] > 0 and c["peak_rss_bytes"] > 0, f"{name}: compile {c}")
    mem = r["memory"]
    check(mem["peak_bytes"] >= r["graph"]["peak_bytes"], f"{name}: executor's peak below the estimate")
    check(len(mem["timeline"]) == r["graph"]["nodes"] and max(mem["timeline"]) == mem["peak_bytes"],
          f"{name}: memory timeline")
    check(mem["arena_lower_bound"] <= mem["arena_bytes"] <= mem["unshared_bytes"], f"{name}: arena sizes")
    ts = mem["tensors"]
    check(sum(t["bytes"] for t in ts if t["kind"] == "input") == mem["input_bytes"], f"{name}: input bytes")
    check(sum(t["bytes"] for t in ts if t["kind"] == "returned") == mem["returned_bytes"], f"{name}: returned")
    live = sum(t["bytes"] for t in ts if t["kind"] == "input" or t["first"] <= mem["peak_node"] <= t["last"])
    check(live == mem["peak_bytes"], f"{name}: tensors alive at the peak add up to {live}, not the peak")
    placed = [t for t in ts if t["kind"] == "intermediate"]
    check(all(t["offset"] is not None and t["offset"] % 64 == 0 for t in placed), f"{name}: offsets")
    check(all(t["offset"] is None for t in ts if t["kind"] != "intermediate"), f"{name}: unplaced offsets")
    for i, a in enumerate(placed):  # alive together -> disjoint in the arena
        for b in placed[i + 1:]:
            if a["first"] <= b["last"] and b["first"] <= a["last"]:
                sa, sb = (a["bytes"] + 63) // 64 * 64, (b["bytes"] + 63) // 64 * 64
                check(a["offset"] + sa <= b["offset"] or b["offset"] + sb <= a["offset"],
                      f"{name}: {a['value']} and {b['value']} overlap")
full = json.load(open(f"{w}/full.json"))
frozen = json.load(open(f"{w}/frozen.json"))
validate(full, "full")
validate(frozen, "frozen")
check("steps" not in full, "compile report has steps")
f = [p for p in frozen["passes"] if p["name"] == "freeze"][0]
s = f["statistics"]
check(s["nodes_removed"] > 0 and s["flops_removed"] > 0 and s["params_frozen"] > 0, f"freeze statistics {s}")
check(f["changed"], "freeze did not change the graph")
check(frozen["graph"]["nodes"] < full["graph"]["nodes"], "freeze did not reduce the nodes")
check(frozen["graph"]["flops"] < full["graph"]["flops"], "freeze did not reduce the flops")
fr = frozen["training"]["frozen"]
check(fr and all(n.startswith("layer1.") or n.startswith("conv1.") for n in fr), f"frozen {fr}")
check(frozen["training"]["freeze"] == ["layer1", "conv1"], "freeze patterns")
check(frozen["model"]["trainable_params"] < full["model"]["trainable_params"], "trainable params")
g = full["graph"]
print(f"full {g['nodes']} nodes {g['flops']:.3g} flops; frozen {frozen['graph']['nodes']} nodes "
      f"{frozen['graph']['flops']:.3g} flops (freeze: {s})")
if bad:
    print("\n".join(bad))
    sys.exit(1)
EOF
ok "report fields, pipeline, flops; --freeze removes nodes and flops"

# kiln train --report: the same report plus the steps; frozen weights unchanged.
"$KILN" train "$M" --steps 0 --save-weights "$W/w0.safetensors" >/dev/null 2>&1 || fail "train --steps 0 exited $?"
"$KILN" train "$M" --steps 3 --freeze 'layer1.*' --report "$W/train.json" --save-weights "$W/w3.safetensors" \
  >/dev/null 2>&1 || fail "train --report exited $?"
PYTHONPATH="$SRC/models" "$PY" - "$W" <<'EOF' || fail "train report / frozen weights"
import json, sys
import st_io
w = sys.argv[1]
r = json.load(open(f"{w}/train.json"))
assert r["schema"] == "kiln-report" and r["command"] == "train", r["command"]
steps = r["steps"]
assert [s["step"] for s in steps] == [0, 1, 2], steps
assert all(s["loss"] > 0 and s["millis"] > 0 for s in steps), steps
a, b = st_io.load(f"{w}/w0.safetensors"), st_io.load(f"{w}/w3.safetensors")
frozen = set(r["training"]["frozen"])
assert frozen and all(k.startswith("layer1.") for k in frozen), frozen
for k in frozen:
    assert (a[k] == b[k]).all(), f"frozen {k} changed"
assert not (a["fc.weight"] == b["fc.weight"]).all(), "fc.weight did not train"
# Every node timed in the steps after the first, per step: together no more
# than the threads could spend in the slowest step.
assert r["execution"]["profiled_steps"] == 2, r["execution"]
ms = [k["measured_ms"] for k in r["kernels"]]
assert len(ms) == r["graph"]["nodes"] and all(t >= 0 for t in ms), ms
assert 0 < sum(ms) <= 1.5 * r["execution"]["threads"] * max(s["millis"] for s in steps), (sum(ms), steps)
c = json.load(open(f"{w}/full.json"))
assert all("measured_ms" not in k for k in c["kernels"]), "kiln compile measured nothing"
EOF
ok "kiln train --report (steps, measured node times) and --freeze keeps frozen weights"

out=$("$KILN" memory "$M" --top 3 --json "$W/mem.json" 2>&1) || fail "kiln memory exited $?: $out"
for want in "peak " "inputs (weights" "arena" "timeline (" "largest tensors alive at the peak" "wrote $W/mem.json"; do
  [[ "$out" == *"$want"* ]] || fail "kiln memory output lacks '$want': $out"
done
"$PY" - "$W" <<'EOF' || fail "kiln memory --json is not the report's memory object"
import json, sys
w = sys.argv[1]
m, r = json.load(open(f"{w}/mem.json")), json.load(open(f"{w}/full.json"))["memory"]
assert m == r, "differs"
EOF
# The peak by category: the categories add up to the peak, each is the sum
# of its tensors alive there, and with Adam the state and gradients show.
out=$("$KILN" memory "$M" --optimizer adam --json "$W/adam.json" 2>&1) || fail "kiln memory --optimizer adam: $out"
[[ "$out" == *"at the peak: parameters "*"optimizer state "*"activations "* ]] ||
  fail "kiln memory does not split the peak by category: $out"
"$PY" - "$W" <<'EOF' || fail "memory categories"
import json, sys
w = sys.argv[1]
names = ["parameters", "optimizer state", "gradients", "activations", "temporaries", "communication", "batch", "outputs"]
report = json.load(open(f"{w}/full.json"))
for f in ("mem.json", "adam.json"):
    m = json.load(open(f"{w}/{f}"))
    cats = {c["name"]: c["bytes"] for c in m["categories"]}
    assert [c["name"] for c in m["categories"]] == names, m["categories"]
    assert sum(cats.values()) == m["peak_bytes"], (f, cats, m["peak_bytes"])
    p = m["peak_node"]
    alive = {n: 0 for n in names}
    for t in m["tensors"]:
        assert t["category"] in names, t
        if t["kind"] == "input" or t["first"] <= p <= t["last"]:
            alive[t["category"]] += t["bytes"]
    assert alive == cats, (f, alive, cats)
    assert cats["parameters"] >= report["model"]["param_bytes"], (cats, report["model"])
    assert cats["activations"] > 0 and cats["batch"] > 0, (f, cats)
adam = {c["name"]: c["bytes"] for c in json.load(open(f"{w}/adam.json"))["categories"]}
assert adam["optimizer state"] >= 2 * report["model"]["param_bytes"], adam  # Adam's two moments
EOF
out=$("$KILN" memory "$M" --json "$W/missing/m.json" 2>&1 >/dev/null) && fail "memory --json into a missing dir exit 0"
[[ "$out" == "kiln: error: "*"no such directory"* ]] || fail "memory --json missing dir: $out"
ok "kiln memory (text and --json)"

"$KILN" compile "$W/mlp.pt" --dump-dir "$W/dump" >/dev/null 2>&1 || fail "--dump-dir exited $?"
[ "$(ls "$W/dump" | wc -l)" = $(($(wc -l <"$W/pipeline.txt") + 1)) ] || fail "--dump-dir: $(ls "$W/dump")"
ok "kiln compile --dump-dir"

# --report-pass-ir: the IR before the pipeline and after every pass that
# changed the graph; each parses (kiln opt) and has the pass's node count.
"$KILN" compile "$W/mlp.pt" --report "$W/pass_ir.json" --report-pass-ir >/dev/null 2>&1 ||
  fail "--report-pass-ir exited $?"
"$PY" - "$W" "$KILN" <<'EOF' || fail "--report-pass-ir"
import json, subprocess, sys
w, kiln = sys.argv[1], sys.argv[2]
passes = json.load(open(f"{w}/pass_ir.json"))["passes"]
assert "ir_before" in passes[0], "no ir_before on the first pass"
assert all(("ir" in p) == p["changed"] for p in passes), [(p["name"], p["changed"], "ir" in p) for p in passes]
assert all("ir_before" not in p for p in passes[1:])
for p in passes:
    if "ir" not in p:
        continue
    nodes = sum(1 for l in p["ir"].splitlines()[1:] if l.startswith("  %") or (l.startswith("  ") and "(" in l and not l.startswith("  return")))
    assert nodes == p["nodes"], (p["name"], nodes, p["nodes"])
    open(f"{w}/p.kir", "w").write(p["ir"])
    out = subprocess.run([kiln, "opt", f"{w}/p.kir", "--passes", "dce"], capture_output=True, text=True)
    assert out.returncode == 0, (p["name"], out.stderr)
plain = json.load(open(f"{w}/full.json"))["passes"]
assert all("ir" not in p and "ir_before" not in p for p in plain), "IR without --report-pass-ir"
print(f"{sum('ir' in p for p in passes)} passes kept their IR")
EOF
out=$("$KILN" compile "$W/mlp.pt" --report-pass-ir 2>&1 >/dev/null) && fail "--report-pass-ir without --report: exit 0"
[[ "$out" == *"--report-pass-ir requires --report"* ]] || fail "--report-pass-ir without --report: $out"
ok "kiln compile --report-pass-ir"

mkdir -p "$W/adir"
for args in "$W/nope.pt|no such file" \
            "$M --passes loss,autodif|unknown pass 'autodif'" \
            "$M --report $W/missing/r.json|--report $W/missing/r.json: no such directory" \
            "$M --report $W/adir|is a directory" \
            "$M --freeze layer9|--freeze 'layer9' matches no parameter" \
            "$M --passes loss,autodiff,optimizer --freeze layer1|--freeze needs the freeze pass"; do
  a=${args%%|*}
  want=${args#*|}
  rm -f "$W/bad.json"
  # shellcheck disable=SC2086
  out=$("$KILN" compile $a --report "$W/bad.json" 2>&1 >/dev/null)
  rc=$?
  [[ "$a" == *--report* ]] && { out=$("$KILN" compile $a 2>&1 >/dev/null); rc=$?; }
  if [ $rc -eq 0 ]; then fail "$a: exit 0"
  elif [ "$(grep -c '' <<<"$out")" != 1 ] || [[ "$out" != "kiln: error: "*"$want"* ]]; then fail "$a: got '$out'"
  elif [ -e "$W/bad.json" ] || [ -e "$W/missing" ] || ls "$W"/*.tmp* >/dev/null 2>&1; then fail "$a: left a file"
  else ok "$a: $out"; fi
done

[ $fails -eq 0 ] && echo "all kiln compile checks passed" || { echo "$fails failed"; exit 1; }
