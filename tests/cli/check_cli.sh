#!/usr/bin/env bash
# kiln check: a model with three unsupported ops (one of them twice, inside a
# submodule; another followed by ops that depend on it) lists all three at
# once with counts, source lines and scopes, and exits 1, from the
# TorchScript trace and from the FX dump alike; a model that imports says
# so and exits 0; a file that is no model is one clear error line.
# usage: check_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

# The model in a file of its own, so the traces record its source lines.
cat >"$W/unsupported_model.py" <<'PYEOF'
import json, os, sys
import torch
import torch.nn as nn
out, models = sys.argv[1], sys.argv[2]
sys.path.insert(0, models)
import fx_dump


class Special(nn.Module):
    def forward(self, y):
        return torch.digamma(y.abs() + 1) + torch.digamma(y.abs() + 2)


class Unsupported(nn.Module):
    """lgamma (and exp, relu after it: not reported), digamma twice in a submodule, erfinv."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.special = Special()

    def forward(self, x):
        y = self.lin(x)
        a = torch.lgamma(y.abs() + 1).exp().relu()
        c = torch.erfinv(torch.tanh(y) * 0.5)
        return a + self.special(y) + c + y.relu()


torch.manual_seed(0)
m = Unsupported().eval()
x = torch.randn(2, 4)
torch.jit.trace(m, (x,)).save(os.path.join(out, "unsupported.pt"))
fx_dump.dump_fx(m, [x], os.path.join(out, "unsupported"))
PYEOF
"$PY" "$W/unsupported_model.py" "$W" "$SRC/models" || { echo "FAIL export"; exit 1; }
export_model mlp --format trace || { echo "FAIL export mlp"; exit 1; }

for M in "$W/unsupported.pt" "$W/unsupported.fx.json"; do
  before=$fails
  shape=()
  [[ $M == *.pt ]] && shape=(--input-shape 2x4)
  out=$("$KILN" check "$M" "${shape[@]}" 2>&1)
  rc=$?
  [ $rc = 1 ] || fail "check $M exited $rc: $out"
  grep -q "3 unsupported ops (4 nodes" <<<"$out" || fail "check $M: no summary line: $out"
  for op in lgamma digamma erfinv; do
    grep -q "$op" <<<"$out" || fail "check $M does not name $op: $out"
  done
  grep -E "digamma.* x2 " <<<"$out" >/dev/null || fail "check $M: digamma not counted twice: $out"
  grep -q "scope special" <<<"$out" || fail "check $M: no scope for digamma: $out"
  grep -q "at .*unsupported_model.py:[0-9]" <<<"$out" || fail "check $M: no source line: $out"
  grep -qE "aten[:.]+(exp|relu)" <<<"$out" && fail "check $M reports ops that only depend on an unsupported one: $out"
  [ $fails = "$before" ] && ok "check $(basename "$M"): lgamma, digamma x2 (scope special), erfinv, exit 1"
done

out=$("$KILN" train "$W/unsupported.pt" --input-shape 2x4 --steps 1 --no-cache 2>&1) && fail "train on an unsupported model succeeded"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "train still stops with one line: $out"
grep -q "lgamma" <<<"$out" || fail "train's one line names the first unsupported op: $out"
ok "train stops at the first unsupported op with one line"

out=$("$KILN" check "$W/mlp.pt" 2>&1) || fail "check mlp exited $?: $out"
grep -q "every op imports" <<<"$out" || fail "check mlp: $out"
ok "check on a supported model: every op imports, exit 0"

head -c 100 "$W/mlp.pt" >"$W/truncated.pt"
out=$("$KILN" check "$W/truncated.pt" 2>&1) && fail "check on a truncated archive succeeded"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "truncated archive: more than one line: $out"
grep -q "kiln: error: .*truncated.pt" <<<"$out" || fail "truncated archive: $out"
ok "check on a truncated archive: one error line"

[ $fails = 0 ] && echo "all check tests passed" || { echo "$fails failed"; exit 1; }
