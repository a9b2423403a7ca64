#!/usr/bin/env bash
# Runs every test: installs what is missing, builds, runs the CTest suite
# (unit tests, PyTorch parity tests, CLI tests), the parser tests under
# ASan+UBSan, and a short bounded libFuzzer run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
./scripts/install-deps.sh
./scripts/build.sh
echo "== ctest"
(cd "${KILN_BUILD_DIR:-build}" && ctest --output-on-failure -j "$(nproc)")
echo "== sanitizers"
./scripts/sanitize.sh
echo "== fuzzers"
KILN_FUZZ_SECONDS=${KILN_FUZZ_SECONDS:-20} ./scripts/fuzz.sh
echo "== all tests passed in $(( $(date +%s) - start )) s"
