#!/usr/bin/env bash
# Builds and runs Kiln's CUDA tests and GPU benchmarks on a machine that has
# an NVIDIA GPU, nvcc, CMake, ninja and PyTorch 2.x but no package manager
# (the device machine of docs/cuda.md). Two steps:
#
#   scripts/gpu_run.sh prepare       # here, with apt: downloads the Debian
#                                    # packages Kiln builds against into
#                                    # .gpu-deps/ (in .gitignore, ~20 MB;
#                                    # the device tool carries it)
#   scripts/gpu_run.sh pack BUILD_DIR # optional, here: kiln, libkiln_cuda.so
#                                    # and kiln_cuda_tests of a local build
#                                    # for the GPU's arch (-DKILN_CUDA_
#                                    # ARCHITECTURES=90, -DKILN_WITH_TORCH=OFF)
#                                    # into .gpu-bin/ (~20 MB), so the
#                                    # device's lease is not spent building
#   scripts/gpu_run.sh run OUTDIR [PHASE...]
#                                    # there, with .gpu-deps/ copied along:
#                                    # the phases in order (default: all),
#                                    # every log and result into OUTDIR
#                                    # (default gpu-results/)
# Phases:
#   build      unpack .gpu-deps, build build-gpu/ (kiln, the plugin,
#              kiln_cuda_tests) with CUDA and PyTorch's libtorch and cuDNN
#   unpack     instead of build: build-gpu/ from .gpu-bin/ (carried with
#              .gpu-deps); without the libtorch plugin, the bench reads FX dumps
#   tests      kiln_cuda_tests (kernels, executor, NCCL at one rank)
#   sanitizer  compute-sanitizer memcheck and racecheck over them
#   train      kiln train --device cuda against the CPU (tests/cli/device_cli.sh)
#   parity     tests/train/parity.py --device cuda over the zoo: Kiln's
#              gradients and 5 AdamW steps on the GPU against PyTorch on the
#              CPU (float64 by default: the exact check; KILN_GPU_PARITY_DTYPE,
#              KILN_GPU_PARITY_MODELS, KILN_GPU_PARITY_JOBS)
#   bench      benchmarks/gpu_zoo.py: Kiln vs PyTorch eager and torch.compile
#   dp         benchmarks/dp_bench.py at 4 and 2 CPU ranks (Gloo): a core per
#              rank there, where the 2-core CI machine time-shares them
# A phase after `build` needs build-gpu/ from an earlier call on the same
# machine (the device tool keeps it while the machine stays warm), so a
# session can split the work into calls that each end inside the tool's
# 10-minute limit, e.g. `run OUT build tests`, then `run OUT sanitizer`,
# then `run OUT train bench dp`.
#
# Each step prints what it does; `run` exits non-zero when a test fails but
# still writes every result it got.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEPS=$ROOT/.gpu-deps
PACKAGES=(nlohmann-json3-dev libgtest-dev libcli11-dev libxxhash-dev libxxhash0 libzstd-dev libopenblas-dev
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libdnnl-dev libdnnl2
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers  # dnnl-config.cmake needs OpenCL
  libgraphviz-dev libgvc6 libcgraph6 libcdt5 libpathplan4 libxdot4 libltdl7 libgvpr2 liblab-gamut1
  pkgconf-bin libpkgconf3)  # pkg-config finds Graphviz

prepare() {
  mkdir -p "$DEPS"
  (cd "$DEPS" && apt-get download "${PACKAGES[@]}") || { echo "gpu_run: apt-get download failed"; exit 1; }
  du -sh "$DEPS"
}

# The unpacked packages, PyTorch's CMake prefix, cuDNN and NCCL, on every
# phase's paths.
setup_env() {
  local sysroot=$DEPS/root
  [ -d "$DEPS" ] || { echo "gpu_run: no .gpu-deps/ (run 'scripts/gpu_run.sh prepare' where apt works)"; exit 1; }
  if [ ! -d "$sysroot" ]; then
    mkdir -p "$sysroot"
    for f in "$DEPS"/*.deb; do dpkg -x "$f" "$sysroot"; done
    # Gloo's CMake targets name /usr/lib/libgloo.so.0.5.0 by absolute path.
    sed -i "s#\"/usr/lib/libgloo#\"$sysroot/usr/lib/libgloo#g" "$sysroot"/usr/share/cmake/Gloo/GlooTargets-*.cmake
  fi
  MULTIARCH=$sysroot/usr/lib/x86_64-linux-gnu
  # Debian's openblas lives in an alternatives directory; give it its usual names.
  ln -sf openblas-pthread/libblas.so.3 "$MULTIARCH/libblas.so.3"
  ln -sf openblas-pthread/libblas.so "$MULTIARCH/libblas.so"
  ln -sf openblas-pthread/libopenblas.so.0 "$MULTIARCH/libopenblas.so.0"
  export LD_LIBRARY_PATH=$MULTIARCH:$MULTIARCH/openblas-pthread:$sysroot/usr/lib:${LD_LIBRARY_PATH:-}
  # Graphviz through pkg-config, its .pc files rebased onto the unpacked root.
  export PKG_CONFIG_PATH=$MULTIARCH/pkgconfig:$sysroot/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$sysroot
  command -v pkg-config >/dev/null || export PKG_CONFIG=$sysroot/usr/bin/pkgconf
  PY=${KILN_PYTHON:-python3}
  KILN_PYTHON=$(command -v "$PY"); export KILN_PYTHON  # the CLI tests' Python (tests/cli/lib/common.sh)
  TORCH_PREFIX=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
  # cuDNN and NCCL from PyTorch's wheels (nvidia/cudnn, nvidia/nccl, or nested
  # as nvidia/cu13/... in CUDA 13 wheels): the folder above the library's lib/.
  local site
  site=$($PY -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  wheel_root() { local so; so=$(find "$site/nvidia" -name "$1" 2>/dev/null | head -1); [ -n "$so" ] && dirname "$(dirname "$so")"; }
  CUDNN_ROOT_DIR=$(wheel_root 'libcudnn.so.9')
  NCCL_ROOT_DIR=$(wheel_root 'libnccl.so.2')
  export LD_LIBRARY_PATH=$CUDNN_ROOT_DIR/lib:$NCCL_ROOT_DIR/lib:$LD_LIBRARY_PATH
  # Binaries built elsewhere (pack) find the CUDA runtime, cuBLAS and NVRTC here.
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
}

# Here: a local CUDA build's binaries into .gpu-bin/ for the unpack phase.
pack() {
  local dir=${1:-}
  [ -n "$dir" ] || { echo "usage: scripts/gpu_run.sh pack BUILD_DIR"; exit 2; }
  local f
  for f in kiln libkiln_cuda.so tests/kiln_cuda_tests; do
    [ -f "$dir/$f" ] || { echo "gpu_run: $dir/$f is missing (ninja -C $dir kiln kiln_cuda_tests)"; exit 1; }
  done
  local arch
  arch=$(sed -n 's/^KILN_CUDA_ARCHITECTURES:[A-Z]*=//p' "$dir/CMakeCache.txt")
  case $arch in
    *virtual*|"") echo "gpu_run: $dir builds PTX only ($arch): configure it with -DKILN_CUDA_ARCHITECTURES=90"; exit 1 ;;
  esac
  mkdir -p "$ROOT/.gpu-bin"
  tar czf "$ROOT/.gpu-bin/kiln-bin.tgz" -C "$dir" kiln libkiln_cuda.so tests/kiln_cuda_tests
  git -C "$ROOT" rev-parse HEAD >"$ROOT/.gpu-bin/commit"
  echo "packed $dir (sm $arch, commit $(cut -c1-12 "$ROOT/.gpu-bin/commit")): $(du -h "$ROOT/.gpu-bin/kiln-bin.tgz" | cut -f1)"
}

phase_build() {
  { nvidia-smi; nvcc --version; cmake --version; nproc; $PY -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    echo "cudnn: $CUDNN_ROOT_DIR"; echo "nccl: $NCCL_ROOT_DIR"; } >"$OUTDIR/machine.txt" 2>&1
  cat "$OUTDIR/machine.txt"
  echo "== configure and build (build-gpu/)"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_WITH_GUI=OFF -DKILN_WITH_PYTHON=OFF \
    -DKILN_CUDA_ARCHITECTURES=90 -DCUDNN_ROOT="$CUDNN_ROOT_DIR" -DNCCL_ROOT="$NCCL_ROOT_DIR" \
    -DCMAKE_PREFIX_PATH="$DEPS/root/usr;$MULTIARCH/cmake;$TORCH_PREFIX" \
    -DCMAKE_INCLUDE_PATH="$DEPS/root/usr/include;$DEPS/root/usr/include/x86_64-linux-gnu/openblas-pthread" \
    -DCMAKE_LIBRARY_PATH="$MULTIARCH;$MULTIARCH/openblas-pthread" >"$OUTDIR/configure.log" 2>&1 ||
    { tail -30 "$OUTDIR/configure.log"; return 1; }
  # Only what the phases run (kiln pulls in the libtorch plugin): the
  # libtorch-built test suites are CI's.
  local targets=(kiln kiln_cuda_tests)
  local t0=$SECONDS
  grep -E "^KILN_WITH_(TORCH|CUDA):" build-gpu/CMakeCache.txt
  # -k 0: the CUDA tests still get built when the libtorch plugin does not.
  local rc=0
  cmake --build build-gpu -j "$(nproc)" --target "${targets[@]}" -- -k 0 >"$OUTDIR/build.log" 2>&1 || rc=1
  [ $rc = 0 ] || grep -B2 -A8 "error" "$OUTDIR/build.log" | head -60
  echo "built ${targets[*]} in $((SECONDS - t0)) s (exit $rc)"
  [ -x build-gpu/tests/kiln_cuda_tests ] || return 1
  return $rc
}

phase_unpack() {
  local tgz=$ROOT/.gpu-bin/kiln-bin.tgz
  [ -f "$tgz" ] || { echo "gpu_run: no $tgz (scripts/gpu_run.sh pack BUILD_DIR, then carry .gpu-bin)"; return 1; }
  { nvidia-smi; echo "binaries of commit $(cat "$ROOT/.gpu-bin/commit" 2>/dev/null)"; } >"$OUTDIR/machine.txt" 2>&1
  mkdir -p build-gpu && tar xzf "$tgz" -C build-gpu || return 1
  if ldd build-gpu/kiln build-gpu/libkiln_cuda.so build-gpu/tests/kiln_cuda_tests | grep "not found"; then
    echo "gpu_run: libraries missing for the packed binaries"; return 1
  fi
  echo "unpacked the binaries of commit $(cut -c1-12 "$ROOT/.gpu-bin/commit" 2>/dev/null)"
}

phase_tests() {
  echo "== CUDA tests"
  local rc=0
  timeout "${KILN_GPU_TEST_TIMEOUT:-300}" build-gpu/tests/kiln_cuda_tests --gtest_output=xml:"$OUTDIR/cuda_tests.xml" \
    >"$OUTDIR/cuda_tests.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran" "$OUTDIR/cuda_tests.log" | tail -40
  return $rc
}

phase_sanitizer() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer: not on this machine" | tee "$OUTDIR/sanitizer.txt"; return 0; }
  local rc=0
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 3 build-gpu/tests/kiln_cuda_tests \
      --gtest_filter='-*Timing*' >"$OUTDIR/sanitizer_$tool.log" 2>&1 || rc=1
    tail -3 "$OUTDIR/sanitizer_$tool.log"
  done
  return $rc
}

phase_train() {
  echo "== kiln train --device cuda (tests/cli/device_cli.sh)"
  local rc=0
  bash tests/cli/device_cli.sh build-gpu/kiln "$ROOT/build-gpu/test-work/device_cli" >"$OUTDIR/device_cli.log" 2>&1 || rc=1
  tail -3 "$OUTDIR/device_cli.log"
  return $rc
}

phase_parity() {
  local dtype=${KILN_GPU_PARITY_DTYPE:-float64} models
  # The ctest suite's model list (tests/CMakeLists.txt), unless given.
  models=${KILN_GPU_PARITY_MODELS:-$(sed -n '/set(KILN_TRAIN_PARITY_MODELS/,/)/p' tests/CMakeLists.txt |
    sed 's/set(KILN_TRAIN_PARITY_MODELS//; s/)//')}
  local dir=$OUTDIR/parity_$dtype
  mkdir -p "$dir"
  echo "== tests/train/parity.py --device cuda --dtype $dtype (grad, adamw) over $(wc -w <<<"$models") models"
  # One model per job, two threads each (PyTorch's reference runs on the CPU).
  export PY KILN_BIN=$ROOT/build-gpu/kiln PARITY_DIR=$dir PARITY_DTYPE=$dtype
  # shellcheck disable=SC2016  # expanded by the job's shell
  printf '%s\n' $models | xargs -P "${KILN_GPU_PARITY_JOBS:-6}" -I{} bash -c \
    'timeout ${KILN_GPU_PARITY_TIMEOUT:-300} $PY tests/train/parity.py {} --mode grad,adamw --dtype $PARITY_DTYPE \
       --device cuda --threads 2 --kiln $KILN_BIN --work-dir $PARITY_DIR/{} --cache-dir $PARITY_DIR/cache >$PARITY_DIR/{}.log 2>&1;
     echo "{} exit $?" >>$PARITY_DIR/summary.txt'
  grep -h -E ": (PASS|FAIL)|^kiln: error|^Traceback|Error:" "$dir"/*.log | cut -c1-240
  local failed
  failed=$(grep -v " exit 0$" "$dir/summary.txt")
  [ -z "$failed" ] || { echo "failed or did not run:"; echo "$failed"; return 1; }
}

phase_bench() {
  echo "== benchmarks/gpu_zoo.py (Kiln vs PyTorch eager and torch.compile, bf16 AMP)"
  local rc=0
  # Without the libtorch plugin (PyTorch's headers failed to build it) Kiln reads FX dumps instead.
  local fmt=trace
  [ -e build-gpu/libkiln_torch.so ] || { fmt=fx; echo "(no libkiln_torch.so: FX dumps)"; }
  # shellcheck disable=SC2086  # KILN_GPU_BENCH_ARGS: extra options, e.g. "--steps 10 --warmup 3"
  $PY benchmarks/gpu_zoo.py --kiln build-gpu/kiln --format $fmt --out-dir "$OUTDIR/gpu_zoo" ${KILN_GPU_BENCH_ARGS:-} \
    >"$OUTDIR/gpu_zoo.log" 2>&1 || rc=1
  cat "$OUTDIR/gpu_zoo/gpu_zoo.md" 2>/dev/null || tail -20 "$OUTDIR/gpu_zoo.log"
  return $rc
}

phase_dp() {
  local rc=0 n
  for n in 4 2; do
    echo "== benchmarks/dp_bench.py --nproc $n (CPU ranks on Gloo, $(nproc) cores)"
    $PY benchmarks/dp_bench.py --kiln build-gpu/kiln --nproc "$n" --out-dir "$OUTDIR/dp_bench$n" \
      >"$OUTDIR/dp_bench$n.log" 2>&1 || rc=1
    cat "$OUTDIR/dp_bench$n.log"
  done
  return $rc
}

run() {
  OUTDIR=${1:-$ROOT/gpu-results}
  shift || true
  local phases=("$@")
  [ ${#phases[@]} -gt 0 ] || phases=(build tests sanitizer train bench dp)
  local status=0 p
  for p in "${phases[@]}"; do
    declare -F "phase_$p" >/dev/null ||
      { echo "gpu_run: no phase '$p' (build unpack tests sanitizer train parity bench dp)"; exit 2; }
  done
  mkdir -p "$OUTDIR"
  setup_env
  for p in "${phases[@]}"; do
    local needs=build-gpu/kiln
    case $p in build|unpack) needs="" ;; tests|sanitizer) needs=build-gpu/tests/kiln_cuda_tests ;; esac
    if [ -n "$needs" ] && [ ! -x "$needs" ]; then
      echo "gpu_run: phase $p needs $needs (run the build phase first, on this machine)"; status=1; continue
    fi
    "phase_$p" || status=1
  done
  return $status
}

case "${1:-}" in
  prepare) prepare ;;
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/gpu_run.sh prepare | pack BUILD_DIR | run [OUTDIR] [build|unpack|tests|sanitizer|train|parity|bench|dp ...]"
     exit 2 ;;
esac
