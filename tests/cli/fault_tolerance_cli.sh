#!/usr/bin/env bash
# Faults a long data-parallel run must survive, made on purpose (the
# KILN_FAULT_* variables of backend/fault_injection.h):
#  1. --max-restarts: rank 1 killed with SIGKILL mid-run; the launcher stops
#     rank 0, restarts both from the newest checkpoint, and the final weights
#     equal an uninterrupted run's, bit for bit. Without restarts left the
#     run fails naming the rank.
#  2. A checkpoint that takes longer to write than the collective timeout
#     does not end the run (the others wait with the checkpoint timeout);
#     a checkpoint timeout shorter than the write does, with one clear line.
#  3. A process killed while writing a checkpoint leaves the previous one
#     intact, and resuming from it reaches an uninterrupted run's weights.
# usage: fault_tolerance_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"
B="$W/batch.safetensors"  # input0: [8, 32], target: [8]
"$PY" "$SRC/tests/train/make_batch.py" mlp --out "$B" --from-export "$W" >/dev/null || { echo "FAIL batch"; exit 1; }
train() { timeout 300 "$KILN" train "$M" --input-file "$B" --no-cache --optimizer adam --lr 0.01 "$@"; }
passed() { [ $fails = "$before" ] && ok "$1"; }
same() { "$KILN" compare "$1" "$2" --tol 0 >/dev/null 2>&1; }

descendants() {
  local c
  for c in $(pgrep -P "$1"); do
    echo "$c"
    descendants "$c"
  done
}

# The process of rank $2 somewhere under $1 (a subshell, timeout, the
# launcher), once it exists ("" after 20 s).
rank_pid() {
  local p
  for _ in $(seq 100); do
    for p in $(descendants "$1"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$p"; return; }
    done
    sleep 0.2
  done
}

# Wait until checkpoint directory $1 names a step of at least $2 (20 s at most).
wait_checkpoint() {
  for _ in $(seq 200); do
    local l
    l=$(cat "$1/latest" 2>/dev/null) && [ "${l#step-}" ] && [ $((10#${l#step-})) -ge "$2" ] 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

train --steps 40 --nproc 2 --save-weights "$W/straight.safetensors" >"$W/straight.out" 2>&1 ||
  fail "the uninterrupted run exited $?: $(tail -2 "$W/straight.out")"

before=$fails
# 1. Rank 1 dies mid-run; the launcher restarts both from the checkpoint.
KILN_FAULT_STEP_DELAY_MS=100 train --steps 40 --nproc 2 --checkpoint "$W/ck1" --checkpoint-every 5 --max-restarts 2 \
  --save-weights "$W/restarted.safetensors" >"$W/restart.out" 2>&1 &
launcher=$!
victim=$(rank_pid $launcher 1)
if [ -z "$victim" ] || ! wait_checkpoint "$W/ck1" 10; then
  fail "no rank 1 or no checkpoint at step 10: $(cat "$W/restart.out")"
  kill $launcher
else
  kill -9 "$victim"
fi
wait $launcher || fail "the run with --max-restarts 2 exited $?: $(tail -3 "$W/restart.out")"
grep -q "kiln: rank 1 was killed by signal Killed (of 2 ranks); restarting the 2 ranks from checkpoint $W/ck1/step-000000[0-9][0-9] (restart 1 of 2)" \
  "$W/restart.out" || fail "the restart was not logged: $(cat "$W/restart.out")"
grep -q "resumed from $W/ck1 at step" "$W/restart.out" || fail "the restarted ranks did not resume: $(cat "$W/restart.out")"
same "$W/restarted.safetensors" "$W/straight.safetensors" ||
  fail "the restarted run's weights differ from the uninterrupted run's"
passed "rank 1 killed mid-run: restarted from $(grep -o 'checkpoint [^ ]*' "$W/restart.out" | head -1), weights equal an uninterrupted run"

before=$fails
# ... and without restarts left, the run ends naming the rank.
KILN_FAULT_STEP_DELAY_MS=100 train --steps 40 --nproc 2 --checkpoint "$W/ck2" --checkpoint-every 5 \
  >"$W/norestart.out" 2>&1 &
launcher=$!
victim=$(rank_pid $launcher 1)
wait_checkpoint "$W/ck2" 5
[ -n "$victim" ] && kill -9 "$victim"
wait $launcher && fail "the run without restarts succeeded after rank 1 was killed"
grep -q "kiln: error: rank 1 was killed by signal Killed (of 2 ranks)$" "$W/norestart.out" ||
  fail "without restarts: $(cat "$W/norestart.out")"
grep -q "restarting" "$W/norestart.out" && fail "restarted without --max-restarts"
passed "without --max-restarts a killed rank ends the run, named"

before=$fails
# 2. Rank 0 takes 2.5 s to write each checkpoint, the collective timeout is
# 1 s: the others wait at the checkpoint barrier, not in a collective.
KILN_FAULT_CHECKPOINT_PAUSE_MS=2500 train --steps 40 --nproc 2 --comm-timeout 1 --checkpoint "$W/ck3" \
  --checkpoint-every 20 --save-weights "$W/slow.safetensors" >"$W/slow.out" 2>&1 ||
  fail "a slow checkpoint ended the run: $(tail -3 "$W/slow.out")"
same "$W/slow.safetensors" "$W/straight.safetensors" || fail "slow checkpoints changed the weights"
out=$(KILN_FAULT_CHECKPOINT_PAUSE_MS=2500 train --steps 40 --nproc 2 --checkpoint-timeout 0.5 --checkpoint "$W/ck4" \
  --checkpoint-every 20 2>&1) && fail "a checkpoint write beyond --checkpoint-timeout succeeded"
grep -q "kiln: error: rank 1: waiting for rank 0 to write checkpoint $W/ck4: barrier (rank 1 of 2): timed out after 0.5 s" \
  <<<"$out" || fail "checkpoint timeout unclear: $out"
passed "a checkpoint write longer than --comm-timeout does not end the run; one beyond --checkpoint-timeout does, named"

before=$fails
# 3. Killed while writing the checkpoint of step 4: step 2's stays latest
# and complete, and resuming from it ends where an uninterrupted run does.
train --steps 6 --save-weights "$W/six.safetensors" >"$W/six.out" 2>&1 || fail "6 steps exited $?"
KILN_FAULT_CHECKPOINT_PAUSE_MS=1500 train --steps 6 --checkpoint "$W/ck5" --checkpoint-every 2 >"$W/killed.out" 2>&1 &
writer=$!
for _ in $(seq 200); do
  compgen -G "$W/ck5/step-00000004.tmp-*" >/dev/null && break
  sleep 0.05
done
if compgen -G "$W/ck5/step-00000004.tmp-*" >/dev/null; then
  kill -9 $writer
  wait $writer 2>/dev/null
  [ "$(cat "$W/ck5/latest")" = "step-00000002" ] || fail "latest after a killed write: $(cat "$W/ck5/latest")"
  for f in model.safetensors optimizer.safetensors trainer.json; do
    [ -s "$W/ck5/step-00000002/$f" ] || fail "step 2's $f is missing after the killed write"
  done
  train --steps 6 --resume "$W/ck5" --save-weights "$W/resumed.safetensors" >"$W/resumed.out" 2>&1 ||
    fail "resuming after a killed write exited $?: $(tail -2 "$W/resumed.out")"
  grep -q "resumed from $W/ck5 at step 2" "$W/resumed.out" || fail "resumed elsewhere: $(cat "$W/resumed.out")"
  same "$W/resumed.safetensors" "$W/six.safetensors" || fail "resumed weights differ from an uninterrupted run's"
else
  fail "never saw the checkpoint of step 4 being written: $(cat "$W/killed.out")"
  kill $writer
fi
passed "killed while writing a checkpoint: the previous one stays latest and intact, and resumes exactly"

[ $fails -eq 0 ] && echo "all fault-tolerance checks passed" || { echo "$fails failed"; exit 1; }
