#!/usr/bin/env bash
# Runs one FileCheck golden test: text IR in, FileCheck patterns out.
#   run.sh KILN FILECHECK TEST.kir
# TEST.kir starts with a line `// RUN: kiln opt --passes=a,b`; its cases are
# separated by lines `// -----` (as in mlir-opt --split-input-file). Every
# case goes through `kiln opt` with the RUN options on its own; the outputs,
# joined by `// -----`, are checked against the CHECK lines of the whole file.
set -euo pipefail
KILN=$1
FILECHECK=$2
TEST=$3
run=$(grep -m1 '^// RUN: kiln opt ' "$TEST" | sed 's|^// RUN: kiln opt ||') || {
  echo "$TEST: no '// RUN: kiln opt ...' line" >&2
  exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v dir="$tmp" 'BEGIN { n = 0; f = sprintf("%s/case%03d.kir", dir, n) }
  /^\/\/ -----/ { n++; f = sprintf("%s/case%03d.kir", dir, n); next }
  { print > f }' "$TEST"
for c in "$tmp"/case*.kir; do
  # shellcheck disable=SC2086
  "$KILN" opt "$c" $run || { echo "$TEST: kiln opt failed on case $(basename "$c")" >&2; exit 1; }
  echo "// -----"
done >"$tmp/out.kir"
"$FILECHECK" --input-file "$tmp/out.kir" "$TEST"
