#!/usr/bin/env bash
# Configures and builds Kiln into build/ (Release, Ninja; through ccache when
# installed, see CMakeLists.txt).
#   build.sh [--target T]... [cmake configure arguments]
# --target (repeatable) builds only those targets and what they need (the
# demo builds `kiln`: the CLI and its libtorch plugin); without it, everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${KILN_BUILD_DIR:-build}
targets=()
configure=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      [ $# -ge 2 ] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
      targets+=(--target "$2")
      shift 2
      ;;
    *)
      configure+=("$1")
      shift
      ;;
  esac
done
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${configure[@]}"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
