#!/usr/bin/env bash
# The main job, end to end on a fresh Debian 12 machine: install what is
# missing, build Kiln, export a bundled model (a GPT-2-style decoder) from
# PyTorch both as a TorchScript trace and as an FX dump, show what Kiln made of
# it, run its forward with Kiln and check the result against PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2_mini}
./scripts/install-deps.sh
./scripts/build.sh
KILN=${KILN_BUILD_DIR:-build}/kiln
OUT=${KILN_BUILD_DIR:-build}/demo
mkdir -p "$OUT/trace" "$OUT/fx"

echo "== exporting $MODEL from PyTorch"
/usr/bin/python3 models/export.py "$MODEL" --format trace --out-dir "$OUT/trace"
/usr/bin/python3 models/export.py "$MODEL" --format fx --out-dir "$OUT/fx"

echo "== kiln inspect (TorchScript trace)"
"$KILN" inspect "$OUT/trace/$MODEL.pt" --input-file "$OUT/trace/$MODEL.input.safetensors"

for kind in trace fx; do
  if [ $kind = trace ]; then src="$OUT/trace/$MODEL.pt"; else src="$OUT/fx/$MODEL.fx.json"; fi
  echo "== kiln run ($kind) and parity with PyTorch"
  "$KILN" run "$src" --input-file "$OUT/$kind/$MODEL.input.safetensors" --output-file "$OUT/$kind/$MODEL.kiln.safetensors"
  "$KILN" compare "$OUT/$kind/$MODEL.kiln.safetensors" "$OUT/$kind/$MODEL.expected.safetensors" --tol 1e-4
done
"$KILN" export "$OUT/trace/$MODEL.pt" --input-file "$OUT/trace/$MODEL.input.safetensors" --format text -o "$OUT/$MODEL.kir"
echo "== done: the text IR is in $OUT/$MODEL.kir"
