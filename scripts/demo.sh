#!/usr/bin/env bash
# The main job, end to end on a fresh Debian 12 machine: install what is
# missing, build Kiln, export a bundled model (a GPT-2-style decoder with a
# tied embedding) from PyTorch, check Kiln's forward against PyTorch, then
# let Kiln generate the whole training step (loss, backward, AdamW) and train
# the model on a generated next-token task, and finally load Kiln's trained
# weights back into PyTorch and measure the accuracy there.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=gpt2_mini
STEPS=${KILN_DEMO_STEPS:-300}
./scripts/install-deps.sh
./scripts/build.sh --target kiln  # the CLI and the libtorch plugin it loads; test.sh builds the rest
KILN=${KILN_BUILD_DIR:-build}/kiln
OUT=${KILN_BUILD_DIR:-build}/demo
rm -rf "$OUT" && mkdir -p "$OUT/eval" "$OUT/train"

echo "== exporting $MODEL from PyTorch (TorchScript trace; eval mode, and train mode for training)"
/usr/bin/python3 models/export.py "$MODEL" --format trace --out-dir "$OUT/eval"
/usr/bin/python3 models/export.py "$MODEL" --format trace --train --out-dir "$OUT/train"

echo "== kiln inspect"
"$KILN" inspect "$OUT/eval/$MODEL.pt"

echo "== kiln run: forward parity with PyTorch"
"$KILN" run "$OUT/eval/$MODEL.pt" --input-file "$OUT/eval/$MODEL.input.safetensors" \
  --output-file "$OUT/eval/$MODEL.kiln.safetensors"
"$KILN" compare "$OUT/eval/$MODEL.kiln.safetensors" "$OUT/eval/$MODEL.expected.safetensors" --tol 1e-4

echo "== generating the task: sequences that follow a hidden rule, token i+1 = perm[token i]"
/usr/bin/python3 models/task.py make --out "$OUT/tokens.bin"

echo "== kiln train: forward + cross-entropy + backward + AdamW as one graph, $STEPS steps"
"$KILN" train "$OUT/train/$MODEL.pt" --data "$OUT/tokens.bin" --batch 32 --loss cross_entropy \
  --optimizer adamw --lr 1e-2 --weight-decay 0.01 --lr-schedule warmup_cosine --warmup-steps 20 \
  --clip-grad-norm 1.0 --steps "$STEPS" --log-file "$OUT/train/log.jsonl" --log-every 1 \
  --save-weights "$OUT/train/trained.safetensors" --checkpoint "$OUT/train/ckpt" --verbose
/usr/bin/python3 - "$OUT/train/log.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("step   loss     accuracy  (from the log, every %d steps)" % max(1, len(rows) // 8))
for r in rows[:: max(1, len(rows) // 8)] + [rows[-1]]:
    print("%5d  %7.4f  %6.3f" % (r["step"], r["loss"], r["accuracy"]))
PY

echo "== PyTorch with Kiln's weights"
/usr/bin/python3 models/task.py eval --weights "$OUT/train/trained.safetensors"
"$KILN" export "$OUT/eval/$MODEL.pt" --format text -o "$OUT/$MODEL.kir"
echo "== done: log in $OUT/train/log.jsonl, weights in $OUT/train/trained.safetensors, text IR in $OUT/$MODEL.kir"
