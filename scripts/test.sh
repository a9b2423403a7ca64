#!/usr/bin/env bash
# Runs the tests: installs what is missing, builds, runs the CTest suite
# (unit tests, PyTorch parity tests, CLI tests), the parser tests under
# ASan+UBSan, and a short bounded libFuzzer run of every fuzz target.
#   test.sh           the whole suite: what CI (.ci/run) and the README run
#   test.sh --quick   the edit-test loop: unit, FileCheck and a parity slice
#                     (ctest -L quick; docs/building.md), no sanitizers or fuzzers
# It ends with the time of each stage, the compiler cache's hit rate and the
# 15 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "test.sh: unknown argument '$1' (use --quick, or nothing for the whole suite)" >&2; exit 2 ;;
esac
BUILD_DIR=${KILN_BUILD_DIR:-build}
CTEST_LOG=$BUILD_DIR/ctest-output.log
start=$(date +%s)
stages=()
current=""
current_start=0

report() {
  local rc=$?
  [ -n "$current" ] && stages+=("$(printf '%-11s %6d s  (failed)' "$current" $(( $(date +%s) - current_start )))")
  echo "== time per stage"
  local s
  for s in "${stages[@]}"; do echo "  $s"; done
  printf '  %-11s %6d s\n' total $(( $(date +%s) - start ))
  if [ -f "$CTEST_LOG" ]; then
    echo "== the 15 slowest tests"
    # ctest's lines: "  12/345 Test  #17: name ....   Passed   12.34 sec"
    sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$CTEST_LOG" |
      sort -rn | head -15 | awk '{ printf "  %8.1f s  %s\n", $1, $2 }'
  fi
  exit "$rc"
}
trap report EXIT

# stage NAME COMMAND...: runs COMMAND and records its time under NAME.
stage() {
  current=$1
  current_start=$(date +%s)
  echo "== $1"
  shift
  "$@"
  stages+=("$(printf '%-11s %6d s' "$current" $(( $(date +%s) - current_start )))")
  current=""
}

build() {
  command -v ccache >/dev/null && ccache --zero-stats >/dev/null
  ./scripts/build.sh
  if command -v ccache >/dev/null; then
    # "Hits: 812 / 840 (96.67 %)": this build's compiles answered from the
    # cache; no such line when the build compiled nothing.
    local hits
    hits=$(ccache --show-stats | sed -n 's/^ *Hits: *//p' | head -1)
    echo "  compiler cache hits: ${hits:-none needed (nothing was compiled: the build was up to date)}"
  else
    echo "  (no ccache: every object compiled; ./scripts/install-deps.sh installs it)"
  fi
}

run_ctest() {
  rm -f "$CTEST_LOG"
  local args=(--output-on-failure -j "$(nproc)")
  [ "$quick" = 1 ] && args+=(-L quick)
  # The log outlives the run for the slowest-tests table.
  (cd "$BUILD_DIR" && ctest "${args[@]}") 2>&1 | tee "$CTEST_LOG"
}

stage install ./scripts/install-deps.sh
stage build build
stage ctest run_ctest
if [ "$quick" = 0 ]; then
  stage sanitizers ./scripts/sanitize.sh
  stage fuzzers env KILN_FUZZ_SECONDS="${KILN_FUZZ_SECONDS:-20}" ./scripts/fuzz.sh
fi
current=""
echo "== all $([ "$quick" = 1 ] && echo "quick ")tests passed in $(( $(date +%s) - start )) s"
