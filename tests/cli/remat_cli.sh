#!/usr/bin/env bash
# --memory-budget end to end (passes/remat.h): kiln train under a budget
# between the weights and the unbudgeted peak fits it (kiln memory's
# executor plan) and computes the same losses bit for bit; an impossible
# budget and a malformed size are one-line errors.
# usage: remat_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model gpt2_mini --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/gpt2_mini.pt"
opts=(--batch 32 --steps 3 --no-cache)

"$KILN" memory "$M" "${opts[@]}" --json "$W/plain.json" >/dev/null 2>&1 || fail "kiln memory exited $?"
budget=$("$PY" -c "
import json, sys
m = json.load(open(sys.argv[1]))
print(m['input_bytes'] + (m['peak_bytes'] - m['input_bytes']) * 7 // 10)" "$W/plain.json")
"$KILN" memory "$M" "${opts[@]}" --memory-budget "$budget" --json "$W/remat.json" >/dev/null 2>&1 ||
  fail "kiln memory --memory-budget $budget exited $?"
"$PY" - "$W/plain.json" "$W/remat.json" "$budget" <<'PYEOF' || fail "the executor's plan does not fit the budget"
import json, sys
plain, remat, budget = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
assert remat["peak_bytes"] <= budget < plain["peak_bytes"], (remat["peak_bytes"], budget, plain["peak_bytes"])
# The tensors the remat pass recomputes are flagged (kiln-studio hatches them).
flagged = [t for t in remat["tensors"] if t["rematerialized"]]
assert flagged and not any(t["rematerialized"] for t in plain["tensors"]), len(flagged)
assert all(t["kind"] == "intermediate" for t in flagged), flagged
PYEOF
ok "kiln memory --memory-budget $budget: the planned peak fits"

"$KILN" train "$M" "${opts[@]}" --report "$W/t_plain.json" >/dev/null 2>&1 || fail "train exited $?"
"$KILN" train "$M" "${opts[@]}" --memory-budget "$budget" --report "$W/t_remat.json" >/dev/null 2>&1 ||
  fail "train --memory-budget exited $?"
"$PY" - "$W/t_plain.json" "$W/t_remat.json" <<'PYEOF' || fail "remat changed the losses"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
la, lb = [s["loss"] for s in a["steps"]], [s["loss"] for s in b["steps"]]
assert len(la) == 3 and la == lb, (la, lb)
r = [p for p in b["passes"] if p["name"] == "remat"][0]["statistics"]
assert r["values_recomputed"] > 0 and r["peak_after"] < r["peak_before"], r
PYEOF
ok "kiln train under the budget: the same losses bit for bit"

out=$("$KILN" train "$M" "${opts[@]}" --memory-budget 64KiB 2>&1) && fail "an impossible budget exited 0"
[ "$(wc -l <<<"$out")" = 1 ] && grep -q "budget of 64.0 KiB cannot be met: the smallest peak remat reached is" <<<"$out" ||
  fail "impossible budget: $out"
ok "impossible budget: $out"
for bad in 2XB -5MiB lots 0; do
  out=$("$KILN" train "$M" "${opts[@]}" --memory-budget "$bad" 2>&1) && fail "--memory-budget '$bad' exited 0"
  grep -q "memory-budget" <<<"$out" || fail "--memory-budget '$bad': $out"
done
ok "malformed sizes are refused"

[ $fails = 0 ] && echo "all remat checks passed" || { echo "$fails failed"; exit 1; }
