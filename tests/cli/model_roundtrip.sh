#!/usr/bin/env bash
# End to end through the CLI on bundled models: export from PyTorch (trace and
# FX), inspect, run, compare with PyTorch, and export the graph as text, JSON
# and DOT — the text and JSON must verify and hash the same; then the
# optimized training step as text, JSON (the same graph again) and SVG.
# usage: model_roundtrip.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"
set -euo pipefail
for model in cnn_bn_train gpt2_mini; do
  for fmt in trace fx; do
    d="$W/$model-$fmt"
    mkdir -p "$d"
    W="$d" export_model "$model" --format "$fmt"
    if [ $fmt = trace ]; then src="$d/$model.pt"; else src="$d/$model.fx.json"; fi
    echo "== $model ($fmt)"
    # Archives from export.py carry their input shapes: inspect needs no inputs.
    # (Into a file first: kiln's stdout is line-buffered, so `| head` would
    # stop it with SIGPIPE, which pipefail reports.)
    "$KILN" inspect "$src" >"$d/inspect.txt"
    head -20 "$d/inspect.txt"
    "$KILN" run "$src" --input-file "$d/$model.input.safetensors" --output-file "$d/out.safetensors"
    "$KILN" compare "$d/out.safetensors" "$d/$model.expected.safetensors" --tol 1e-4
    "$KILN" export "$src" --format text -o "$d/g.kir"
    "$KILN" export "$src" --format json -o "$d/g.json"
    "$KILN" export "$src" --format dot -o "$d/g.dot"
    h1=$("$KILN" verify "$d/g.kir" | awk '{print $NF}')
    h2=$("$KILN" verify "$d/g.json" | awk '{print $NF}')
    [ "$h1" = "$h2" ] || { echo "FAIL: text and JSON exports hash differently ($h1 vs $h2)"; exit 1; }
    grep -q '^digraph' "$d/g.dot" || { echo "FAIL: DOT export is not a digraph"; exit 1; }
  done
done
# The optimized training step (and the gradient graph), as kiln compile
# builds it: text and JSON load back to the same graph, SVG is Graphviz's.
for model in cnn_bn_train gpt2_mini; do
  d="$W/$model-trace"
  src="$d/$model.pt"
  echo "== $model: step export"
  "$KILN" export "$src" --graph step --optimizer sgd --momentum 0.9 --format text -o "$d/step.kir"
  "$KILN" export "$src" --graph step --optimizer sgd --momentum 0.9 --format json -o "$d/step.json"
  "$KILN" export "$src" --graph step --optimizer sgd --momentum 0.9 --format svg -o "$d/step.svg"
  "$KILN" export "$src" --graph gradients --format text -o "$d/grad.kir"
  h1=$("$KILN" verify "$d/step.kir" | awk '{print $NF}')
  h2=$("$KILN" verify "$d/step.json" | awk '{print $NF}')
  [ "$h1" = "$h2" ] || { echo "FAIL: step text and JSON exports hash differently ($h1 vs $h2)"; exit 1; }
  grep -q 'sgd_update' "$d/step.kir" || { echo "FAIL: the step export holds no optimizer update"; exit 1; }
  grep -q 'param_update' "$d/step.kir" || { echo "FAIL: the step export returns no parameter update"; exit 1; }
  grep -q ' gradient' "$d/grad.kir" || { echo "FAIL: the gradient export returns no gradient"; exit 1; }
  grep -q '<svg' "$d/step.svg" || { echo "FAIL: the SVG export is not SVG"; exit 1; }
  [ "$(grep -c '<g id="node' "$d/step.svg")" -gt 20 ] || { echo "FAIL: the SVG export has too few nodes"; exit 1; }
done
# Train-mode BatchNorm: the running stats Kiln computes match PyTorch's.
"$KILN" compare "$W/cnn_bn_train-trace/out.safetensors" "$W/cnn_bn_train-trace/cnn_bn_train.expected.safetensors" \
  --only buffer: --tol 1e-5
echo "model_roundtrip: ok"
