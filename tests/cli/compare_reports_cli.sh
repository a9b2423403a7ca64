#!/usr/bin/env bash
# kiln compare-reports A.json B.json on two real training reports of one
# model made with different options (B without the fusion passes): the
# summary's numbers and the first rows of the tables are checked against
# what Python computes from the two JSON files; bad input is one line.
# usage: compare_reports_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model gpt2_mini --format trace || { echo "FAIL export"; exit 1; }
M="$W/gpt2_mini.pt"
"$KILN" train "$M" --no-cache --steps 6 --report "$W/a.json" >/dev/null 2>&1 || fail "report A"
"$KILN" train "$M" --no-cache --steps 6 --passes loss,autodiff,optimizer,dce --report "$W/b.json" >/dev/null 2>&1 ||
  fail "report B"
"$KILN" compare-reports "$W/a.json" "$W/b.json" --top 5 >"$W/out.txt" 2>"$W/err.txt" || fail "compare-reports exited $?"
[ -s "$W/err.txt" ] && fail "compare-reports wrote to stderr: $(cat "$W/err.txt")"

# What the two reports say, computed here.
"$PY" - "$W/a.json" "$W/b.json" "$W/out.txt" <<'PY' && ok "the summary and the largest differences match the reports" || fail "see above"
import json, statistics, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
out = open(sys.argv[3]).read()
lines = out.splitlines()
def row(name):
    return next(l for l in lines if l.startswith(name))
bad = 0
def check(cond, what):
    global bad
    if not cond:
        print("FAIL", what); bad += 1
med = lambda r: statistics.median(s["millis"] for s in r["steps"][1:])
ratio = med(b) / med(a)
check(row("step time (median)").endswith(f"{ratio:.2f}x"), f"step time ratio {ratio:.2f}x: {row('step time (median)')}")
nodes = row("graph nodes").split()
check(nodes[2:4] == [str(a["graph"]["nodes"]), str(b["graph"]["nodes"])], f"graph nodes: {nodes}")
peak = b["memory"]["peak_bytes"] / a["memory"]["peak_bytes"]
check(row("peak memory").endswith(f"{peak:.2f}x"), f"peak ratio {peak:.2f}: {row('peak memory')}")
# The op whose summed measured time changed most comes first.
def by_op(r):
    t = {}
    for k in r["kernels"]:
        t[k["op"]] = t.get(k["op"], 0) + k["measured_ms"]
    return t
ta, tb = by_op(a), by_op(b)
first = max(set(ta) | set(tb), key=lambda o: abs(tb.get(o, 0) - ta.get(o, 0)))
i = lines.index(next(l for l in lines if l.startswith("Ops, by the change in measured time")))
check(lines[i + 2].split()[0] == first, f"first op {first!r}: {lines[i + 2]}")
nodes_a = sum(1 for k in a["kernels"] if k["op"] == first)
nodes_b = sum(1 for k in b["kernels"] if k["op"] == first)
check(lines[i + 2].split()[-2:] == [str(nodes_a), str(nodes_b)], f"{first} nodes {nodes_a} {nodes_b}: {lines[i + 2]}")
check("(the 5 largest of" in lines[i], lines[i])
check(any(l.strip().startswith("fuse ") and l.split()[2] == "-" for l in lines), "the fuse pass of A alone")
sys.exit(bad)
PY

# Bad input: one line each, exit 1.
expect_error() {  # expect_error WHAT PATTERN ARGS...
  local what=$1 pat=$2 out
  shift 2
  out=$("$@" 2>&1) && { fail "$what: succeeded"; return; }
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [[ "$out" == *"$pat"* ]] && ok "$what: $out" || fail "$what: $out"
}
printf '{"schema": "kiln-report", "version": 1' >"$W/cut.json"
expect_error truncated "cut.json: not JSON" "$KILN" compare-reports "$W/a.json" "$W/cut.json"
"$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); del r['memory']['peak_bytes']; json.dump(r, open(sys.argv[2], 'w'))" \
  "$W/a.json" "$W/nopeak.json"
expect_error missing_key "nopeak.json: report version 1: memory.peak_bytes: missing" \
  "$KILN" compare-reports "$W/nopeak.json" "$W/b.json"
expect_error no_file "nosuch.json" "$KILN" compare-reports "$W/a.json" "$W/nosuch.json"
expect_error top_zero "--top must be at least 1" "$KILN" compare-reports "$W/a.json" "$W/b.json" --top 0

[ $fails -eq 0 ] && echo "all compare-reports checks passed" || { echo "$fails failed"; exit 1; }
