#!/usr/bin/env bash
# Build the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer in
# build-asan/ and run the parser suites (safetensors, text IR, FX import,
# JSON) and the executor's memory suites (arena, plan, fused kernels) under
# them, then the sparse allreduce suites of the communication tests. Any
# sanitizer report fails the run.
#
#   scripts/sanitize.sh                       # parser suites
#   KILN_SANITIZE_FILTER='*' scripts/sanitize.sh   # every unit test
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_ASAN_BUILD_DIR:-$root/build-asan}"
filter="${KILN_SANITIZE_FILTER:-*Safetensors*:*TextIr*:*FxImport*:*Json*:*Verifier*:*Hash*:*Ir*:Autodiff*:Training*:ZeroDim*:ExecutorArena*:MemoryPlan*:FusedKernel*:Schedule*:SplitUpdates*:CompileCache*:FileFingerprint*:TileGemm*:RecordedInputs*}"

source "$root/scripts/lib/unit_test_build.sh"
# -O0: ASan and UBSan see every access as written (nothing optimized away),
# the build takes less than half of -O1's compile time, and these suites
# run in seconds either way. clang: its -O0 builds are faster still, and a
# second compiler's view of the code (the main build is GCC's).
build_unit_tests "$build" -DKILN_SANITIZE=ON -O0 clang++-14

# halt_on_error makes the first report fatal; leaks are errors too.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
"$build/tests/kiln_unit_tests" --gtest_filter="$filter" --gtest_brief=1
echo "sanitize: kiln_unit_tests ($filter) passed under ASan+UBSan"
# The sparse allreduces pack and unpack rows and blocks at byte offsets:
# under the sanitizers too, over threads and Gloo rank processes.
comm_filter="${KILN_SANITIZE_COMM_FILTER:-Sparse*}"
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target kiln_comm_tests
"$build/tests/kiln_comm_tests" --gtest_filter="$comm_filter" --gtest_brief=1
echo "sanitize: kiln_comm_tests ($comm_filter) passed under ASan+UBSan"
