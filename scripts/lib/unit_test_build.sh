# Sourced by the sanitizer scripts (sanitize.sh, tsan.sh): configure and build
# kiln_unit_tests in a build directory of its own with one sanitizer switch,
# without libtorch, the GUI or CUDA (the suites they run need none of them).
#   build_unit_tests BUILD_DIR -DKILN_SANITIZE=ON
build_unit_tests() {
  local root build="$1" flag="$2"
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$flag" \
    -DKILN_WITH_TORCH=OFF -DKILN_WITH_GUI=OFF -DKILN_WITH_CUDA=OFF
  cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target kiln_unit_tests
}
