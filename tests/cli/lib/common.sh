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

# export_model MODEL [models/export.py arguments...]: what
#   models/export.py MODEL ARGS --out-dir "$W"
# writes, copied into $W from one export per build that every CLI test shares
# ($KILN_TEST_EXPORTS, set by ctest: one directory per model and arguments,
# made again when anything in models/ changes; a lock lets parallel tests wait
# for the first). Without KILN_TEST_EXPORTS (a script run by hand) it exports.
export_model() {
  if [ -z "${KILN_TEST_EXPORTS:-}" ]; then
    "$PY" "$SRC/models/export.py" "$@" --out-dir "$W" >/dev/null
    return
  fi
  local key dir
  key=$({ printf '%s\n' "$@" "$PY"; cat "$SRC"/models/*.py; } | sha256sum | cut -c1-16)
  dir=$KILN_TEST_EXPORTS/$1.$key
  mkdir -p "$KILN_TEST_EXPORTS"
  (
    flock 9
    if [ ! -f "$dir/.complete" ]; then
      rm -rf "$dir.partial" && mkdir -p "$dir.partial" &&
        "$PY" "$SRC/models/export.py" "$@" --out-dir "$dir.partial" >/dev/null &&
        touch "$dir.partial/.complete" && rm -rf "$dir" && mv "$dir.partial" "$dir"
    fi
  ) 9>"$KILN_TEST_EXPORTS/$1.lock" || return 1
  cp -R "$dir"/. "$W"/ && rm -f "$W/.complete"
}
