# Sourced by the CLI tests (tests/cli/*.sh, usage: TEST.sh KILN WORKDIR):
# the kiln binary, a fresh work directory, Debian's Python (torch 1.13; KILN_PYTHON overrides), the
# source root, and ok/fail reporting; the caller prints the summary and
# sets the exit status.
set -u
KILN=$1
W=$2
PY=${KILN_PYTHON:-/usr/bin/python3}  # the GPU machine: its PyTorch 2.x python (scripts/gpu_run.sh)
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
rm -rf "$W" && mkdir -p "$W"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
