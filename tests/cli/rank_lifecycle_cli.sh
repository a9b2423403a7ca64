#!/usr/bin/env bash
# The ranks of `kiln train --nproc 2` live and die with their launcher: a
# launcher killed with SIGKILL (kiln-studio's Cancel, an OOM kill) leaves no
# rank running 2 s later; SIGTERM and SIGINT are forwarded to the ranks and
# the launcher exits 128 + the signal once they are gone.
# usage: rank_lifecycle_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export mlp"; exit 1; }
M="$W/mlp.pt"

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# start_launcher: a long data-parallel run in the background; sets LAUNCHER
# and RANKS once both ranks are training (their first step logged).
start_launcher() {
  "$KILN" train "$M" --nproc 2 --steps 100000000 --no-cache --log-every 1 >"$W/out.txt" 2>&1 &
  LAUNCHER=$!
  RANKS=""
  for _ in $(seq 1 600); do
    RANKS=$(pgrep -P "$LAUNCHER" | tr '\n' ' ')
    if [ "$(echo $RANKS | wc -w)" = 2 ] && grep -q "step" "$W/out.txt" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# gone_within SECONDS PID...: none of the PIDs alive after SECONDS.
gone_within() {
  local secs=$1
  shift
  sleep "$secs"
  for p in "$@"; do alive "$p" && return 1; done
  return 0
}

# 1. SIGKILL: nothing can forward it; the ranks' parent-death signal ends them.
if start_launcher; then
  kill -KILL "$LAUNCHER"
  wait "$LAUNCHER" 2>/dev/null
  # shellcheck disable=SC2086
  if gone_within 2 $RANKS; then ok "launcher killed with SIGKILL: its ranks ($RANKS) are gone 2 s later"
  else fail "launcher killed with SIGKILL: ranks still running: $(for p in $RANKS; do alive $p && echo $p; done)"; fi
else
  fail "the ranks of kiln train --nproc 2 did not start: $(cat "$W/out.txt")"
fi

# 2. SIGTERM and SIGINT: forwarded, and the launcher says so and exits 128 + N.
for sig in TERM INT; do
  if start_launcher; then
    kill -"$sig" "$LAUNCHER"
    wait "$LAUNCHER"
    rc=$?
    want=$((128 + $(kill -l "$sig")))
    # shellcheck disable=SC2086
    if [ $rc -ne $want ]; then fail "SIG$sig: launcher exited $rc, want $want: $(tail -3 "$W/out.txt")"
    elif ! gone_within 0 $RANKS; then fail "SIG$sig: ranks still running after the launcher exited"
    elif ! grep -q "stopping 2 rank" "$W/out.txt"; then fail "SIG$sig: the launcher did not say it stopped the ranks"
    else ok "SIG$sig forwarded: launcher exited $rc with both ranks gone"; fi
  else
    fail "SIG$sig: the ranks did not start: $(cat "$W/out.txt")"
  fi
done

[ $fails -eq 0 ] && echo "all rank lifecycle checks passed" || { echo "$fails failed"; exit 1; }
