#!/usr/bin/env bash
# kiln bench on the bundled MLP: Kiln alone, then --compare torch (libtorch
# eager in the same process) with --json: the JSON has both sides' step
# times and peak memory, a speedup that is their ratio, and equal losses
# (same weights, batches, loss and optimizer: the sides must train the same
# thing). Bad options give one-line errors and write no JSON.
# Timings are reported, never asserted.
# usage: bench_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --format fx --train 2>/dev/null ||
  export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"

out=$("$KILN" bench "$M" --steps 3 --warmup 1 --batch 16 2>&1) || fail "kiln bench exited $?: $out"
grep -q "kiln .*[0-9]" <<<"$out" || fail "kiln bench printed no timing row: $out"
ok "kiln bench (Kiln alone)"

if "$KILN" bench "$M" --steps 1 --warmup 0 --compare torch 2>&1 | grep -q "built without libtorch"; then
  echo "SKIP --compare torch: this kiln was built without libtorch"
else
  out=$("$KILN" bench "$M" --steps 4 --warmup 1 --batch 16 --optimizer sgd --momentum 0.9 --compare torch \
        --profile 5 --json "$W/b.json" 2>&1) || fail "--compare torch exited $?: $out"
  grep -q "speedup" <<<"$out" || fail "--compare torch printed no speedup: $out"
  grep -q "step profile" <<<"$out" || fail "--profile printed no profile: $out"
  "$PY" - "$W/b.json" <<'PY' || fail "bench JSON"
import json, math, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "kiln-bench" and j["version"] == 1, j
for side in ("kiln", "torch"):
    s = j[side]
    assert len(s["step_ms"]) == 4, s
    assert all(t > 0 for t in s["step_ms"]), s
    assert s["median_ms"] > 0 and s["peak_bytes"] > 0, s
assert math.isclose(j["speedup"], j["torch"]["median_ms"] / j["kiln"]["median_ms"], rel_tol=1e-9), j
# Same model, weights, batches, loss and optimizer: the losses agree.
assert j["first_loss_rel_diff"] < 1e-5, j["first_loss_rel_diff"]
assert j["threads"] >= 1
print(f"kiln {j['kiln']['median_ms']:.3f} ms, torch {j['torch']['median_ms']:.3f} ms, speedup {j['speedup']:.2f}x")
PY
  ok "--compare torch --json"
fi

expect_error() {  # expect_error WHAT PATTERN ARGS...: exit 1, one line matching PATTERN, no JSON
  local what=$1 pat=$2
  shift 2
  rm -f "$W/bad.json"
  out=$("$KILN" bench "$@" --json "$W/bad.json" 2>&1)
  rc=$?
  [ $rc -ne 0 ] || fail "$what: exit 0"
  grep -q "$pat" <<<"$out" || fail "$what: message '$out' lacks '$pat'"
  [ ! -e "$W/bad.json" ] || fail "$what: wrote a JSON file"
  ok "$what"
}
expect_error "unknown baseline" "the only baseline is 'torch'" "$M" --compare xla
expect_error "no measured steps" "at least 1" "$M" --steps 0
expect_error "missing model" "no-such.pt" "$W/no-such.pt"
if [ -f "$W/mlp.fx.json" ]; then
  expect_error "FX dump as torch baseline" "TorchScript" "$W/mlp.fx.json" --compare torch --steps 1
fi

[ $fails -eq 0 ] && echo "all bench checks passed" || { echo "$fails failure(s)"; exit 1; }
