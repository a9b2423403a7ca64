#!/usr/bin/env bash
# Builds and runs Kiln's CUDA tests and GPU benchmarks on a machine that has
# an NVIDIA GPU, nvcc, CMake, ninja and PyTorch 2.x but no package manager
# (the device machine of docs/cuda.md). Two steps:
#
#   scripts/gpu_run.sh prepare       # here, with apt: downloads the Debian
#                                    # packages Kiln builds against into
#                                    # .gpu-deps/ (in .gitignore, ~20 MB;
#                                    # the device tool carries it)
#   scripts/gpu_run.sh run [OUTDIR]  # there, with .gpu-deps/ copied along:
#                                    # unpacks them, builds build-gpu/ with
#                                    # CUDA and PyTorch's libtorch and cuDNN,
#                                    # runs the CUDA tests, compute-sanitizer
#                                    # memcheck and racecheck over them,
#                                    # kiln train --device cuda against the
#                                    # CPU, benchmarks/gpu_zoo.py (skip it
#                                    # with KILN_GPU_BENCH=0), and
#                                    # writes every log and result to OUTDIR
#                                    # (default gpu-results/)
#
# Each step prints what it does; `run` exits non-zero when a test fails but
# still writes every result it got.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEPS=$ROOT/.gpu-deps
PACKAGES=(nlohmann-json3-dev libgtest-dev libcli11-dev libxxhash-dev libxxhash0 libzstd-dev libopenblas-dev
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libdnnl-dev libdnnl2
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200)

prepare() {
  mkdir -p "$DEPS"
  (cd "$DEPS" && apt-get download "${PACKAGES[@]}") || { echo "gpu_run: apt-get download failed"; exit 1; }
  du -sh "$DEPS"
}

run() {
  local out=${1:-$ROOT/gpu-results}
  mkdir -p "$out"
  local sysroot=$DEPS/root
  [ -d "$DEPS" ] || { echo "gpu_run: no .gpu-deps/ (run 'scripts/gpu_run.sh prepare' where apt works)"; exit 1; }
  rm -rf "$sysroot" && mkdir -p "$sysroot"
  for f in "$DEPS"/*.deb; do dpkg -x "$f" "$sysroot"; done
  local multiarch=$sysroot/usr/lib/x86_64-linux-gnu
  # Debian's openblas lives in an alternatives directory; give it its usual names.
  ln -sf openblas-pthread/libblas.so.3 "$multiarch/libblas.so.3"
  ln -sf openblas-pthread/libblas.so "$multiarch/libblas.so"
  ln -sf openblas-pthread/libopenblas.so.0 "$multiarch/libopenblas.so.0"
  export LD_LIBRARY_PATH=$multiarch:$multiarch/openblas-pthread:${LD_LIBRARY_PATH:-}
  local py=python3
  local torch_prefix cudnn_root nccl_root
  torch_prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
  cudnn_root=$($py -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__) if nvidia.cudnn.__file__ else list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
  nccl_root=$($py -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  export LD_LIBRARY_PATH=$cudnn_root/lib:$nccl_root/lib:$LD_LIBRARY_PATH
  { nvidia-smi; nvcc --version; cmake --version; $py -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    echo "cudnn: $cudnn_root"; echo "nccl: $nccl_root"; } >"$out/machine.txt" 2>&1
  cat "$out/machine.txt"

  echo "== configure and build (build-gpu/)"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_WITH_GUI=OFF \
    -DKILN_CUDA_ARCHITECTURES=90 -DCUDNN_ROOT="$cudnn_root" -DNCCL_ROOT="$nccl_root" \
    -DCMAKE_PREFIX_PATH="$sysroot/usr;$multiarch/cmake;$torch_prefix" \
    -DCMAKE_INCLUDE_PATH="$sysroot/usr/include;$sysroot/usr/include/x86_64-linux-gnu/openblas-pthread" \
    -DCMAKE_LIBRARY_PATH="$multiarch;$multiarch/openblas-pthread" >"$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -B2 -A8 "error" "$out/build.log" | head -60; exit 1; }
  echo "built"

  local status=0
  echo "== CUDA tests"
  build-gpu/tests/kiln_cuda_tests --gtest_output=xml:"$out/cuda_tests.xml" >"$out/cuda_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran" "$out/cuda_tests.log" | tail -40
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer --tool $tool"
      compute-sanitizer --tool "$tool" --error-exitcode 3 build-gpu/tests/kiln_cuda_tests \
        --gtest_filter='-*Timing*' >"$out/sanitizer_$tool.log" 2>&1 || status=1
      tail -3 "$out/sanitizer_$tool.log"
    done
  else
    echo "compute-sanitizer: not on this machine" | tee "$out/sanitizer.txt"
  fi
  echo "== kiln train --device cuda (tests/cli/device_cli.sh)"
  bash tests/cli/device_cli.sh build-gpu/kiln "$ROOT/build-gpu/test-work/device_cli" >"$out/device_cli.log" 2>&1 || status=1
  tail -3 "$out/device_cli.log"
  if [ "${KILN_GPU_BENCH:-1}" = 1 ]; then
    echo "== benchmarks/gpu_zoo.py (Kiln vs PyTorch eager and torch.compile, bf16 AMP)"
    $py benchmarks/gpu_zoo.py --kiln build-gpu/kiln --out-dir "$out/gpu_zoo" >"$out/gpu_zoo.log" 2>&1 || status=1
    cat "$out/gpu_zoo/gpu_zoo.md" 2>/dev/null || tail -20 "$out/gpu_zoo.log"
  fi
  return $status
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/gpu_run.sh prepare | run [OUTDIR]"; exit 2 ;;
esac
