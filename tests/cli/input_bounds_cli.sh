#!/usr/bin/env bash
# Out-of-range numbers on the command line: shapes whose element counts
# overflow or pass 2^40 (--input-shape, --batch), a step larger than this
# machine's memory (an error before anything is allocated, while kiln memory
# still plans it), and the bounds of --nproc, --threads, the timeouts, --max-restarts,
# and --nproc under a launcher's RANK. Each is one "kiln: error:" line and a
# clean non-zero exit: no SIGFPE, no std::bad_alloc.
# usage: input_bounds_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export mlp"; exit 1; }
M="$W/mlp.pt"  # input f32[8,32]

# expect_error NAME SUBSTRING CMD...
expect_error() {
  local name=$1 want=$2
  shift 2
  local out rc lines
  out=$(timeout 120 "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s' "$out" | grep -c '' || true)
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    fail "$name: exit code $rc (want a clean non-zero exit): $out"
  elif [ "$lines" != 1 ] || [[ "$out" != "kiln: error: "* ]]; then
    fail "$name: want one 'kiln: error:' line, got: $out"
  elif [[ "$out" != *"$want"* ]]; then
    fail "$name: message lacks '$want': $out"
  else
    ok "$name: $out"
  fi
}

expect_error overflowing_shape "more than 2^40 elements" \
  "$KILN" compile "$M" --no-cache --input-shape 4294967296x3x4294967296x4294967296
expect_error huge_shape "more than 2^40 elements" "$KILN" compile "$M" --no-cache --input-shape 100000x3x10000x10000
expect_error huge_typed_shape "more than 2^40 elements" "$KILN" compile "$M" --no-cache --input-shape "f32[9223372036854775807,2]"
expect_error huge_batch "more than 2^40 elements" "$KILN" compile "$M" --no-cache --batch 1099511627776

# 2^35 rows of 32 features: 2^40 elements, 4 TiB of batch alone. Training
# refuses before it allocates; kiln memory plans it without allocating.
expect_error step_beyond_memory "more than this machine's" "$KILN" train "$M" --no-cache --batch 34359738368 --steps 1
out=$(timeout 120 "$KILN" memory "$M" --no-cache --batch 34359738368 2>&1) || fail "kiln memory of a 4 TiB step exited $?: $out"
[[ "$out" == *"peak "*"TB"* ]] && ok "kiln memory plans a step larger than the machine: ${out%%$'\n'*}" ||
  fail "kiln memory of a 4 TiB step: $out"

expect_error nproc_zero "--nproc must be between 1 and 4096" "$KILN" train "$M" --no-cache --steps 1 --nproc 0
expect_error nproc_huge "--nproc must be between 1 and 4096" "$KILN" train "$M" --no-cache --steps 1 --nproc 100000
expect_error threads_negative "--threads must be between 0" "$KILN" train "$M" --no-cache --steps 1 --threads -3
expect_error comm_timeout_huge "--comm-timeout must be between" \
  "$KILN" train "$M" --no-cache --steps 1 --nproc 2 --comm-timeout 1e9
expect_error comm_timeout_negative "--comm-timeout must be between" \
  "$KILN" train "$M" --no-cache --steps 1 --comm-timeout -1
expect_error rendezvous_timeout_zero "--rendezvous-timeout must be between" \
  "$KILN" train "$M" --no-cache --steps 1 --nproc 2 --rendezvous-timeout -5
expect_error checkpoint_timeout_huge "--checkpoint-timeout must be between" \
  "$KILN" train "$M" --no-cache --steps 1 --checkpoint-timeout 1e12
expect_error max_restarts_negative "--max-restarts must be between 0 and 1000" \
  "$KILN" train "$M" --no-cache --steps 1 --nproc 2 --max-restarts -1
expect_error max_restarts_without_launcher "--max-restarts needs --nproc or --nnodes" \
  "$KILN" train "$M" --no-cache --steps 1 --max-restarts 2
expect_error nproc_under_rank "RANK is set" \
  env RANK=0 WORLD_SIZE=1 MASTER_PORT=29500 "$KILN" train "$M" --no-cache --steps 1 --nproc 2

[ $fails -eq 0 ] && echo "all input bound checks passed" || { echo "$fails failed"; exit 1; }
