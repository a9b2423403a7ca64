#!/usr/bin/env bash
# What kiln-studio's timeline and roofline read: kiln bench --machine keeps
# the machine's roofs (f32/bf16 GEMM rate, bandwidth) per CPU and thread
# count in the cache directory's machine.json, and kiln train --report
# copies them into the report with the timeline of the first steps (a row
# per thread, every node once per step, collectives on their own row on 2
# ranks, each row's time adding up). A broken machine file is a warning
# and the report is still written; a bad --gemm-size is one line.
# usage: profile_report_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model gpt2_mini --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/gpt2_mini.pt"
C="$W/cache"

out=$("$KILN" bench --machine --gemm-size 256 --threads 2 --cache-dir "$C" 2>&1) || fail "bench --machine exited $?: $out"
grep -q "f32 GEMM" <<<"$out" && grep -q "wrote $C/machine.json" <<<"$out" || fail "bench --machine output: $out"
"$PY" - "$C/machine.json" <<'PYEOF' || fail "machine.json"
import json, sys
m = json.load(open(sys.argv[1]))["machines"]
assert len(m) == 1 and m[0]["threads"] == 2 and m[0]["gemm_size"] == 256, m
assert m[0]["fp32_gemm_flops"] > 1e8 and m[0]["bandwidth_bytes"] > 1e8, m
PYEOF
ok "bench --machine: roofs kept in the cache directory"

out=$("$KILN" train "$M" --steps 4 --threads 2 --cache-dir "$C" --report "$W/r.json" 2>&1) || fail "train exited $?: $out"
"$PY" - "$W/r.json" "$C/machine.json" <<'PYEOF' || fail "report timeline and machine"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["machine"] == json.load(open(sys.argv[2]))["machines"][0], r.get("machine")
t = r["timeline"]
rows = [x["name"] for x in t["rows"]]
assert rows[0] == "main (executor)" and "cpu pool 1" in rows and "data prefetch" in rows, rows
assert [s["step"] for s in t["steps"]] == [0, 1, 2], t["steps"]  # --trace-steps' default
kernels = r["kernels"]
# An f32 model: its kernels compute in f32 (a few scalar updates in f64), none in bf16.
dtypes = [k["dtype"] for k in kernels]
assert set(dtypes) <= {"f32", "f64", ""} and dtypes.count("f32") > len(dtypes) // 2, set(dtypes)
for s in t["steps"]:
    nodes = [x for x in t["slices"] if x["category"] == "node" and s["start_ms"] <= x["start_ms"] <= s["end_ms"]]
    # Every node ran once in each step, on the executor or beside others on a pool thread.
    assert sorted(x["node"] for x in nodes) == list(range(len(kernels))), (len(nodes), len(kernels))
    for x in nodes:
        assert x["name"] == kernels[x["node"]]["op"], (x, kernels[x["node"]])
        assert t["rows"][x["row"]]["kind"] in ("executor", "pool"), x
        assert x["start_ms"] + x["dur_ms"] <= s["end_ms"] + 1e-3, (x, s)
batches = [x for x in t["slices"] if x["category"] == "data"]
assert batches and all(t["rows"][x["row"]]["kind"] == "prefetch" for x in batches), batches[:2]
PYEOF
ok "train --report: the machine's roofs and a timeline of every node per step"

out=$("$KILN" train "$M" --steps 3 --nproc 2 --bucket-size 64KB --cache-dir "$C" --report "$W/dp.json" 2>&1) ||
  fail "train --nproc 2 exited $?: $out"
"$PY" - "$W/dp.json" <<'PYEOF' || fail "data-parallel timeline"
import json, sys
r = json.load(open(sys.argv[1]))
t = r["timeline"]
comm_rows = [i for i, x in enumerate(t["rows"]) if x["kind"] == "comm"]
assert len(comm_rows) == 1, t["rows"]
comm = [x for x in t["slices"] if x["row"] == comm_rows[0]]
# Every collective of the recorded steps, by bucket, as the communication records have them.
recorded = [c for s in r["communication"]["steps"][:3] for c in s["collectives"]]
assert len(comm) == len(recorded), (len(comm), len(recorded))
names = {("loss" if c["bucket"] < 0 else "bucket %d" % c["bucket"]) for c in recorded}
assert {x["name"] for x in comm} == names, ({x["name"] for x in comm}, names)
assert all(x["category"] == "comm" and "sent" in x["detail"] for x in comm), comm[:1]
for x, c in zip(comm, recorded):
    assert abs(x["dur_ms"] - (c["end_ms"] - c["begin_ms"])) < 0.01, (x, c)
PYEOF
# Each of the 2 ranks runs 1 thread here; the roofs were measured with 2: none copied, and a note says why.
grep -q "note: the report has no machine roofs: .* this run uses 1 (kiln bench --machine --threads 1)" <<<"$out" ||
  fail "no note on the thread count: $out"
"$PY" -c "import json,sys; assert 'machine' not in json.load(open(sys.argv[1]))" "$W/dp.json" || fail "roofs of other threads"
ok "train --nproc 2 --report: the collectives on the communication row; roofs only for the same threads"

echo '{"machines": [{"cpu": 3}]}' >"$C/machine.json"
out=$("$KILN" train "$M" --steps 2 --threads 2 --cache-dir "$C" --report "$W/r2.json" 2>&1) ||
  fail "train with a broken machine file exited $?: $out"
grep -q "warning: the report has no machine roofs: $C/machine.json: machines\[0\].cpu" <<<"$out" || fail "no warning: $out"
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); assert 'machine' not in r and r['timeline']" "$W/r2.json" ||
  fail "report with a broken machine file"
ok "a broken machine file: a warning naming it, the report without roofs"

for bad in "--gemm-size 8" "--gemm-size 100000"; do
  out=$("$KILN" bench --machine $bad --cache-dir "$W/c2" 2>&1) && fail "$bad exited 0"
  [ "$(wc -l <<<"$out")" = 1 ] || fail "$bad: not one line: $out"
  [ -e "$W/c2/machine.json" ] && fail "$bad wrote a machine file"
done
out=$("$KILN" bench 2>&1) && fail "bench without a model exited 0"
grep -q "a MODEL to time, or --machine" <<<"$out" || fail "bench without a model: $out"
ok "bad --gemm-size and a missing MODEL are one-line errors"

[ $fails = 0 ] && echo "all profile report checks passed" || { echo "$fails failed"; exit 1; }
