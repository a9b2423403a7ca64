#!/usr/bin/env bash
# Data-parallel runs from the command line (driver/ranks.h): ranks started by an
# external launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) train like
# `--nproc 2`; a rank that never arrives and a rank that dies make the
# others fail with a clear error within the timeout instead of hanging; bad
# combinations are one clear line; ranks holding different models fail at
# start-up; a checkpoint only rank 0 can read resumes every rank. (Numerical parity: tests/dist/dp_parity.py.)
# usage: dist_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"
B="$W/batch.safetensors"  # input0: [8, 32], target: [8]
"$PY" "$SRC/tests/train/make_batch.py" mlp --out "$B" --from-export "$W" >/dev/null || { echo "FAIL batch"; exit 1; }
passed() { [ $fails = "$before" ] && ok "$1"; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

before=$fails
# 1. Two ranks started by hand train as --nproc 2 does; only rank 0 writes.
port=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$KILN" train "$M" --input-file "$B" --steps 3 --no-cache \
    --save-weights "$W/ext.$r.safetensors" >"$W/ext.$r.out" 2>&1 &
done
wait %1 || fail "external rank 0 exited $?: $(tail -2 "$W/ext.0.out")"
wait %2 || fail "external rank 1 exited $?: $(tail -2 "$W/ext.1.out")"
[ -f "$W/ext.0.safetensors" ] || fail "rank 0 wrote no weights"
[ -f "$W/ext.1.safetensors" ] && fail "rank 1 wrote weights (only rank 0 writes)"
"$KILN" train "$M" --input-file "$B" --steps 3 --no-cache --nproc 2 --save-weights "$W/nproc.safetensors" >"$W/nproc.out" 2>&1 ||
  fail "--nproc 2 exited $?: $(tail -2 "$W/nproc.out")"
"$KILN" compare "$W/ext.0.safetensors" "$W/nproc.safetensors" --tol 0 >/dev/null || fail "external ranks != --nproc 2"
# Without KILN_STORE_TOKEN the store admits anyone: rank 0 says so.
grep -q "warning: KILN_STORE_TOKEN is not set: the TCP store on 127.0.0.1:$port lets any client" "$W/ext.0.out" ||
  fail "no warning about the store without a secret: $(cat "$W/ext.0.out")"
grep -q "KILN_STORE_TOKEN" "$W/nproc.out" && fail "--nproc warned about a secret it makes itself: $(cat "$W/nproc.out")"
passed "ranks from an external launcher (RANK, WORLD_SIZE, MASTER_PORT) train like --nproc 2; only rank 0 writes"

before=$fails
# 1b. A rank that does not know the job's secret is refused by rank 0's
# store, and says so; rank 0 names the rank that never got in.
port=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port KILN_STORE_TOKEN=secret-$r timeout 60 "$KILN" train "$M" \
    --input-file "$B" --steps 1 --no-cache --rendezvous-timeout 3 >"$W/tok.$r.out" 2>&1 &
done
wait %1 && fail "rank 0 succeeded with a rank of another secret"
wait %2 && fail "rank 1 succeeded with another secret"
grep -q "kiln: error: rank 1: .*rank 0's store refused this rank: KILN_STORE_TOKEN differs" "$W/tok.1.out" ||
  fail "another secret: rank 1 unclear: $(cat "$W/tok.1.out")"
grep -q "kiln: error: rank 0: .*rank 1 did not arrive within 3 s" "$W/tok.0.out" ||
  fail "another secret: rank 0 unclear: $(cat "$W/tok.0.out")"
grep -q "refused the client at 127.0.0.1:[0-9]*: a client that does not know this job's secret" "$W/tok.0.out" ||
  fail "another secret: rank 0's store did not log the refusal: $(cat "$W/tok.0.out")"
passed "a rank with another KILN_STORE_TOKEN is refused by the store, and both sides say why"

before=$fails
# 2. A rank that never arrives: rank 0 alone fails within the timeout.
port=$(free_port)
t0=$(date +%s)
out=$(RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port KILN_STORE_TOKEN=s timeout 60 "$KILN" train "$M" \
  --input-file "$B" --steps 1 --no-cache --rendezvous-timeout 2 2>&1) && fail "rank 0 without rank 1 succeeded"
took=$(($(date +%s) - t0))
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "missing rank: more than one line: $out"
grep -q "kiln: error: rank 0: .*rank 1 did not arrive within 2 s" <<<"$out" || fail "missing rank: unclear error: $out"
[ $took -le 10 ] || fail "missing rank: took $took s for a 2 s timeout"
passed "a rank that never arrives: the others fail in ${took} s with one clear line"

before=$fails
# 3. A rank that dies mid-run: the launcher reports it, rank 0 fails fast.
"$KILN" train "$M" --input-file "$B" --steps 100000000 --no-cache --nproc 2 --comm-timeout 20 >"$W/die.out" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 100); do  # wait until both ranks are training
  for p in $(pgrep -P $launcher); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=1 && victim=$p
  done
  [ -n "$victim" ] && grep -q "step\|data parallel" "$W/die.out" 2>/dev/null && break
  sleep 0.2
done
sleep 1
t0=$(date +%s)
if [ -z "$victim" ]; then
  fail "no rank 1 process found under the launcher"
  kill $launcher
else
  kill -9 "$victim"
fi
wait $launcher && fail "the run succeeded after rank 1 was killed"
took=$(($(date +%s) - t0))
grep -q "kiln: error: rank 1 was killed by signal" "$W/die.out" || fail "launcher did not name the dead rank: $(cat "$W/die.out")"
grep -q "kiln: error: rank 0: .*closed its connection" "$W/die.out" || fail "rank 0's error unclear: $(cat "$W/die.out")"
[ $took -le 15 ] || fail "a dead rank took $took s to end the run"
passed "a rank that dies: the run ends in ${took} s, naming it"

before=$fails
# 4. Bad combinations: one clear line each.
expect_error() {  # expect_error WHAT PATTERN ARGS...
  local what=$1 pat=$2
  shift 2
  local out
  out=$("$KILN" "$@" 2>&1) && { fail "$what succeeded"; return; }
  grep -q -- "$pat" <<<"$out" || fail "$what: unclear error: $out"
}
expect_error "a batch 3 ranks cannot split" "8 rows along its first dimension, which 3 ranks cannot split evenly" \
  train "$M" --input-file "$B" --steps 1 --no-cache --nproc 3
expect_error "--nproc for bench" "--nproc starts ranks for kiln train and kiln grad only" \
  bench "$M" --input-file "$B" --steps 1 --no-cache --nproc 2
expect_error "--passes without data_parallel" "--nproc needs the data_parallel pass" \
  train "$M" --input-file "$B" --steps 1 --no-cache --nproc 2 --passes loss,autodiff,optimizer
expect_error "a --sparse-grads pattern that selects nothing" "--sparse-grads nothing_here: selects no" \
  train "$M" --input-file "$B" --steps 1 --no-cache --nproc 2 --sparse-grads nothing_here
expect_error "a bad --bucket-size" "--bucket-size: 'lots' is not a size" \
  train "$M" --input-file "$B" --steps 1 --no-cache --nproc 2 --bucket-size lots
expect_error "--zero 2" "--zero must be 0 or 1" \
  train "$M" --input-file "$B" --steps 1 --no-cache --nproc 2 --zero 2
expect_error "--zero 1 with fp16 loss scaling" "--zero 1 with --amp fp16 is not supported" \
  train "$M" --input-file "$B" --steps 1 --no-cache --nproc 2 --zero 1 --amp fp16
expect_error "--zero for kiln grad (no optimizer)" "--zero" \
  grad "$M" --input-file "$B" --no-cache --nproc 2 --zero 1 --output "$W/grads.safetensors"
passed "bad data-parallel combinations are clear errors"

before=$fails
# 5. Ranks holding different models (here: another batch size) fail before
# any weight moves, each with one line; the rank that differs names how.
port=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$KILN" train "$M" --steps 1 --no-cache \
    --comm-timeout 20 --batch $((8 * (r + 1))) >"$W/differ.$r.out" 2>&1 &
  pid[$r]=$!
done
wait "${pid[0]}" && fail "rank 0 trained with a rank holding another model"
wait "${pid[1]}" && fail "rank 1 trained with another model than rank 0's"
grep -q "kiln: error: rank 1: .*this rank's model is not rank 0's: the model graphs differ" "$W/differ.1.out" ||
  fail "rank 1's error does not name the difference: $(cat "$W/differ.1.out")"
grep -q "kiln: error: rank 0: .*another rank holds a different model" "$W/differ.0.out" ||
  fail "rank 0's error unclear: $(cat "$W/differ.0.out")"
passed "ranks holding different models fail at start-up, naming the difference"

before=$fails
# 6. Resume from a checkpoint only rank 0 can see (no shared disk): rank 0
# reads it and sends it; the run continues exactly as an uninterrupted one.
"$KILN" train "$M" --input-file "$B" --steps 3 --no-cache --nproc 2 --checkpoint "$W/ckpt" >/dev/null 2>&1 ||
  fail "--nproc 2 --checkpoint exited $?"
"$KILN" train "$M" --input-file "$B" --steps 5 --no-cache --nproc 2 --save-weights "$W/straight.safetensors" \
  >/dev/null 2>&1 || fail "--nproc 2 --steps 5 exited $?"
port=$(free_port)
for r in 0 1; do
  resume="$W/ckpt"
  [ $r = 1 ] && resume="$W/not-on-this-machine"
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$KILN" train "$M" --input-file "$B" --steps 5 \
    --no-cache --resume "$resume" --save-weights "$W/resumed.safetensors" >"$W/resume.$r.out" 2>&1 &
  pid[$r]=$!
done
wait "${pid[0]}" || fail "resumed rank 0 exited $?: $(tail -2 "$W/resume.0.out")"
wait "${pid[1]}" || fail "resumed rank 1 exited $?: $(tail -2 "$W/resume.1.out")"
grep -q "resumed from .* at step 3" "$W/resume.0.out" || fail "rank 0 did not resume at step 3: $(cat "$W/resume.0.out")"
"$KILN" compare "$W/resumed.safetensors" "$W/straight.safetensors" --tol 0 >/dev/null ||
  fail "resumed from rank 0's checkpoint != an uninterrupted run"
passed "a checkpoint only rank 0 can read: the ranks resume from it, as an uninterrupted run"

[ $fails = 0 ] && echo "all data-parallel CLI checks passed" || { echo "$fails failed"; exit 1; }
