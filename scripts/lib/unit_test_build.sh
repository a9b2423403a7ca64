# Sourced by the sanitizer scripts (sanitize.sh, tsan.sh): configure and build
# kiln_unit_tests in a build directory of its own with one sanitizer switch,
# without libtorch, the GUI or CUDA (the suites they run need none of them).
#   build_unit_tests BUILD_DIR -DKILN_SANITIZE=ON [OPT] [CXX]
# OPT (default -O1): the optimization level. -g1 gives line tables for the
# sanitizers' stack traces without full debug info. CXX (default g++): the
# compiler; CI pays this build on every run, and clang++-14 compiles these
# sources at -O0 in 60% of GCC's time (kiln_unit_tests with ASan+UBSan:
# 340 against 570 s of CPU). kernels_elementwise.cpp takes 71 s at -O2 -g
# (GCC), 34 s at -O1 -g1, 13 s at -O0 -g1, 7 s with clang at -O0 -g1.
build_unit_tests() {
  local root build="$1" flag="$2" opt="${3:--O1}" cxx="${4:-g++}" cc
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  case "$cxx" in
    clang++*) cc="clang${cxx#clang++}" ;;
    *) cc="gcc${cxx#g++}" ;;
  esac
  # CMake cannot switch the compiler of an existing build directory.
  if [[ -f "$build/CMakeCache.txt" ]] &&
     ! grep -qE "^CMAKE_CXX_COMPILER:[A-Z]*=(.*/)?${cxx//+/\\+}\$" "$build/CMakeCache.txt"; then
    echo "build_unit_tests: $build was configured with another compiler; starting it afresh with $cxx"
    rm -rf "$build"
  fi
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$flag" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt -g1 -DNDEBUG" \
    -DKILN_WITH_TORCH=OFF -DKILN_WITH_GUI=OFF -DKILN_WITH_CUDA=OFF
  cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target kiln_unit_tests
}
