#!/usr/bin/env bash
# kiln train --trace: a Chrome trace-event file of the first --trace-steps
# steps with a row per thread (the executor's, the data prefetch thread's,
# the pool threads that run nodes side by side), a slice per node
# carrying its op, kernel and bytes, a slice per step and
# per batch read; bad paths and counts are one-line errors that leave no file.
# usage: trace_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model gpt2_mini --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/gpt2_mini.pt"

out=$("$KILN" train "$M" --steps 5 --trace "$W/t.json" --trace-steps 2 2>&1) || fail "train --trace exited $?: $out"
grep -q "wrote a trace of 2 steps" <<<"$out" || fail "no trace line: $out"
"$PY" - "$W/t.json" <<'PYEOF' || fail "trace checks"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
rows = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
assert "main (executor)" in rows.values() and "data prefetch" in rows.values(), rows
slices = [e for e in events if e["ph"] == "X"]
steps = [e for e in slices if e["cat"] == "step"]
assert [e["name"] for e in steps] == ["step 0", "step 1"], [e["name"] for e in steps]
nodes = [e for e in slices if e["cat"] == "node"]
assert nodes and all({"node", "kernel", "bytes"} <= set(e["args"]) for e in nodes), nodes[:1]
# Nodes run on the executor's thread, or beside others on a thread of the pool.
assert all(rows[e["tid"]] == "main (executor)" or rows[e["tid"]].startswith("cpu pool ") for e in nodes), \
    {rows[e["tid"]] for e in nodes}
data = [e for e in slices if e["cat"] == "data" and e["name"].startswith("batch ")]
assert data and all(rows[e["tid"]] == "data prefetch" for e in data), data[:2]
# Every node slice lies inside a step slice, and each step ran every node once.
per_step = len(nodes) // 2
assert len(nodes) == 2 * per_step and per_step > 50, len(nodes)
for e in nodes:
    assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1 for s in steps), e
PYEOF
ok "trace: rows, steps, node slices with op/kernel/bytes, data loading on its own row"

out=$("$KILN" train "$M" --steps 2 --prefetch 0 --trace "$W/t0.json" 2>&1) || fail "--prefetch 0 exited $?: $out"
"$PY" -c "
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
assert not [e for e in ev if e['ph'] == 'M' and e['name'] == 'thread_name' and e['args']['name'] == 'data prefetch']
" "$W/t0.json" || fail "--prefetch 0 still has a prefetch thread"
ok "--prefetch 0 reads in the step's thread"

for bad in "--trace $W/missing/t.json" "--trace $W" "--trace $W/x.json --trace-steps 0" "--prefetch -1"; do
  out=$("$KILN" train "$M" --steps 1 $bad 2>&1) && fail "$bad exited 0"
  [ "$(wc -l <<<"$out")" = 1 ] || fail "$bad: not one line: $out"
  ls "$W"/missing "$W"/x.json >/dev/null 2>&1 && fail "$bad left a file"
done
ok "bad --trace paths, --trace-steps and --prefetch are one-line errors"

[ $fails = 0 ] && echo "all trace checks passed" || { echo "$fails failed"; exit 1; }
