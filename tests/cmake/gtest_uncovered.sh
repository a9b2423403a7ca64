#!/usr/bin/env bash
# gtest_uncovered.sh BINARY FILTER: fails, naming them, when BINARY holds tests
# that FILTER (the union of the ctest entries' gtest filters) does not select.
set -euo pipefail
bin=$1 filter=$2
left=$("$bin" --gtest_list_tests --gtest_filter="-$filter" | sed -n 's/^  \([^ ]*\).*/\1/p')
if [ -n "$left" ]; then
  echo "$(basename "$bin"): tests no ctest entry runs (re-run cmake: suites are read at configure time):" >&2
  "$bin" --gtest_list_tests --gtest_filter="-$filter" >&2
  exit 1
fi
echo "$(basename "$bin"): every test is in a ctest entry"
