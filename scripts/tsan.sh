#!/usr/bin/env bash
# ThreadSanitizer run of the tests that exercise Kiln's own threads: the
# data prefetch thread, the trace recorder, the compile cache (files shared
# between processes), the executor and the training session. Builds
# build-tsan/ (about as long as the main build) and fails on any report.
#
#   scripts/tsan.sh
#   KILN_TSAN_FILTER='*' scripts/tsan.sh     # every unit test
#
# OpenMP's runtime (libgomp) is not built with TSan, so its worker threads
# would show as false races; the kernels run on one thread here
# (OMP_NUM_THREADS=1) and the races under test are Kiln's own. The executor's
# stages of nodes side by side do run on two pool threads
# (ConcurrentNodes.*): it marks their fork and join for TSan
# (core/tsan_sync.h), so what the nodes of a stage touch is checked.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${KILN_TSAN_BUILD_DIR:-$root/build-tsan}"
filter="${KILN_TSAN_FILTER:-Prefetch*:Trace*:CompileCache*:ExecutorArena*:TrainingSession*:Schedule*:RematStep*:ConcurrentNodes*}"

source "$root/scripts/lib/unit_test_build.sh"
build_unit_tests "$build" -DKILN_TSAN=ON

export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}"
OMP_NUM_THREADS=1 "$build/tests/kiln_unit_tests" --gtest_filter="$filter" --gtest_brief=1
echo "tsan: kiln_unit_tests ($filter) passed under ThreadSanitizer"
