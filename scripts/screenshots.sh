#!/usr/bin/env bash
# Regenerates kiln-studio's pictures in docs/studio.md (docs/studio-*.png): exports
# gpt2_mini, compiles it (keeping every pass's IR) and trains it 8 steps on
# 2 ranks with --report, and has kiln-studio save each view headless: the
# graph folded by scope, the fuse pass before and after, the memory
# timeline by category, the kernels with their measured times, the
# communication, the timeline of the 2-rank run's steps, the roofline of a
# 1-rank run under this machine's roofs (kiln bench --machine, measured
# into a temporary cache directory), and two 1-rank runs compared (B
# without the fusion passes).
#   scripts/screenshots.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 models/export.py gpt2_mini --format trace --out-dir "$work" >/dev/null
"$build/kiln" compile "$work/gpt2_mini.pt" --no-cache --report "$work/compile.json" --report-pass-ir >/dev/null
"$build/kiln" train "$work/gpt2_mini.pt" --nproc 2 --steps 8 --no-cache --optimizer sgd --report "$work/train.json" >/dev/null
"$build/kiln" bench --machine --cache-dir "$work/cache" >/dev/null
"$build/kiln" train "$work/gpt2_mini.pt" --steps 8 --no-cache --cache-dir "$work/cache" --report "$work/one.json" >/dev/null
"$build/kiln" train "$work/gpt2_mini.pt" --steps 8 --no-cache --passes loss,autodiff,optimizer,schedule,memory_plan \
  --report "$work/unfused.json" >/dev/null
mkdir -p -m 700 "$work/xdg"
export QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR=$work/xdg
shoot() {  # VIEW REPORT [SECOND REPORT] [kiln-studio options]
  local view=$1
  shift
  "$build/gui/kiln-studio" "$@" --view "$view" --screenshot "docs/studio-$view.png" 2>/dev/null
}
shoot graph "$work/compile.json"
shoot passes "$work/compile.json" --pass fuse
shoot memory "$work/compile.json"
shoot kernels "$work/train.json"
shoot comm "$work/train.json"
shoot timeline "$work/train.json"
shoot roofline "$work/one.json"
shoot compare "$work/one.json" "$work/unfused.json"
