# Sourced by the CLI tests (tests/cli/*.sh, usage: TEST.sh KILN WORKDIR):
# the kiln binary, a fresh work directory, Debian's Python (torch 1.13), the
# source root, and ok/fail reporting; `finish NAME` prints the summary and
# sets the exit status.
set -u
KILN=$1
W=$2
PY=/usr/bin/python3
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
rm -rf "$W" && mkdir -p "$W"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
