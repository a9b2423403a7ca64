#!/usr/bin/env bash
# Installs the Debian 12 packages Kiln needs. Idempotent: does nothing (and
# needs no network or root) when everything is already installed.
#   install-deps.sh [--bench]   --bench: also the data of benchmarks/time_to_quality.py
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache  # ccache: every build compiles through it (CMakeLists.txt)
  nlohmann-json3-dev libxxhash-dev libzstd-dev libcli11-dev libgtest-dev libbenchmark-dev
  libopenblas-dev libdnnl-dev libgloo-dev libssl-dev ocl-icd-opencl-dev  # dnnl-config.cmake finds OpenCL (a Recommends, which --no-install-recommends skips)
  libtorch-dev python3-torch python3-torchvision
  python3-dev pybind11-dev python3-pytest  # the Python module (python/) and its tests
  clang-14 libclang-rt-14-dev libomp-14-dev llvm-14-tools  # clang: fuzzers and the ASan+UBSan build (OpenMP from libomp)
  qt6-base-dev qt6-charts-dev qt6-svg-dev libgraphviz-dev xvfb xauth python3-pil  # kiln-studio; Pillow grabs the Xvfb screen
)
if [ "${1:-}" = --bench ]; then
  PACKAGES+=(python3-sklearn dataset-fashion-mnist python3-doc)  # the digits, Fashion-MNIST, Python's documentation
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install packages" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
