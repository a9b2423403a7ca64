#!/usr/bin/env bash
# Regenerates the README's kiln-studio pictures (docs/studio-*.png): exports
# gpt2_mini, compiles it and trains it 3 steps on 2 ranks with --report, and
# has kiln-studio save each view headless.
#   scripts/screenshots.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 models/export.py gpt2_mini --format trace --out-dir "$work" >/dev/null
"$build/kiln" compile "$work/gpt2_mini.pt" --no-cache --report "$work/compile.json" >/dev/null
"$build/kiln" train "$work/gpt2_mini.pt" --nproc 2 --steps 8 --no-cache --optimizer sgd --report "$work/train.json" >/dev/null
export QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR=$work
for view in graph passes memory kernels comm; do
  report=$work/compile.json
  [ "$view" = comm ] && report=$work/train.json
  "$build/gui/kiln-studio" "$report" --view "$view" --screenshot "docs/studio-$view.png" 2>/dev/null
done
