# Sourced by the sanitizer scripts (sanitize.sh, tsan.sh): configure and build
# kiln_unit_tests in a build directory of its own with one sanitizer switch,
# without libtorch, the GUI or CUDA (the suites they run need none of them).
#   build_unit_tests BUILD_DIR -DKILN_SANITIZE=ON
build_unit_tests() {
  local root build="$1" flag="$2"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  # -O1 -g1: the sanitizers' recommended optimization, and line tables for
  # their stack traces without full debug info; this halves the build's
  # compile time against -O2 -g (71 s -> 34 s for kernels_elementwise.cpp,
  # 53 s -> 22 s for fx_import_test.cpp), which CI pays on every run.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$flag" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DKILN_WITH_TORCH=OFF -DKILN_WITH_GUI=OFF -DKILN_WITH_CUDA=OFF
  cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target kiln_unit_tests
}
