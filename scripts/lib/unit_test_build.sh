# Sourced by the sanitizer scripts (sanitize.sh, tsan.sh): configure and build
# kiln_unit_tests in a build directory of its own with one sanitizer switch,
# without libtorch, the GUI or CUDA (the suites they run need none of them).
#   build_unit_tests BUILD_DIR -DKILN_SANITIZE=ON [OPT]
# OPT (default -O1): the optimization level. -g1 gives line tables for the
# sanitizers' stack traces without full debug info. CI pays this build on
# every run: kernels_elementwise.cpp takes 71 s at -O2 -g, 34 s at -O1 -g1,
# 13 s at -O0 -g1.
build_unit_tests() {
  local root build="$1" flag="$2" opt="${3:--O1}"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$flag" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" \
    -DKILN_WITH_TORCH=OFF -DKILN_WITH_GUI=OFF -DKILN_WITH_CUDA=OFF
  cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target kiln_unit_tests
}
