#!/usr/bin/env bash
# kiln train --device cuda (backend/device_step.h, the CUDA plugin). Without
# a GPU: one clear error line and a non-zero exit, after the plugin loaded
# (an unresolved symbol would say "cannot load the CUDA plugin"), and
# --dialects is checked against the CUDA dialects. With a GPU: 5 AdamW steps
# of the MLP give the CPU's losses within 1e-3 relative and the same
# weights within 1e-3.
# usage: device_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"
has_gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU && has_gpu=1

out=$("$KILN" train "$M" --steps 1 --no-cache --device cuda --dialects cuda,onednn 2>&1) &&
  fail "--dialects onednn on cuda succeeded"
grep -q "unknown dialect 'onednn' (known: .*cublaslt.*cuda.*)" <<<"$out" || fail "--dialects on cuda: unclear error: $out"
ok "--dialects is checked against the CUDA plugin's dialects"

if [ $has_gpu = 0 ]; then
  out=$("$KILN" train "$M" --steps 1 --no-cache --device cuda 2>&1) && fail "--device cuda succeeded without a GPU"
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "--device cuda without a GPU: more than one line: $out"
  grep -q "kiln: error: .*--device cuda: no usable CUDA" <<<"$out" || fail "--device cuda without a GPU: $out"
  ok "--device cuda without a GPU is one clear line (skipped: the GPU half of this test)"
else
  "$KILN" train "$M" --steps 5 --no-cache --device cuda --save-weights "$W/gpu.safetensors" --report "$W/gpu.json" \
    >"$W/gpu.out" 2>&1 || fail "--device cuda exited $?: $(tail -3 "$W/gpu.out")"
  "$KILN" train "$M" --steps 5 --no-cache --save-weights "$W/cpu.safetensors" --report "$W/cpu.json" >/dev/null 2>&1 ||
    fail "cpu run exited $?"
  "$PY" - "$W/gpu.json" "$W/cpu.json" <<'PYEOF' || fail "--device cuda losses differ from the CPU's"
import json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:])
lg, lc = ([s["loss"] for s in r["steps"]] for r in (g, c))
assert all(abs(x - y) <= 1e-3 * max(1, abs(y)) for x, y in zip(lg, lc)), (lg, lc)
assert all(k["dialect"] in ("cuda", "cublas", "cublaslt", "cudnn", "nvrtc") for k in g["kernels"]), g["kernels"][:3]
PYEOF
  "$KILN" compare "$W/gpu.safetensors" "$W/cpu.safetensors" --tol 1e-3 >/dev/null || fail "weights after 5 steps differ"
  ok "--device cuda trains the MLP like the CPU"
fi

[ $fails = 0 ] && echo "all device checks passed" || { echo "$fails failed"; exit 1; }
