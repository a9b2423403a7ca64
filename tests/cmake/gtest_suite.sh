#!/usr/bin/env bash
# gtest_suite.sh BINARY FILTER: runs one ctest entry's tests (a gtest suite):
# a failure fails the entry; otherwise, when any test skipped (a CUDA suite on
# a machine without a GPU, each test saying why), it exits 77, which ctest
# reports as skipped: a suite is never counted as passed with tests left out.
# (The tests of such a suite that need no GPU still run, and can still fail.)
set -uo pipefail
bin=$1 filter=$2
out=$("$bin" --gtest_filter="$filter" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -ne 0 ] && exit "$rc"
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\},.*/\1/p' <<<"$out" | tail -1)
if [ "${skipped:-0}" != 0 ]; then exit 77; fi
exit 0
