#!/usr/bin/env bash
# A soak run: 4 ranks x 300 steps with every step started after a random
# pause of up to 20 ms on each rank (KILN_FAULT_STEP_DELAY_MS; a different
# sequence per rank, so the ranks drift apart and catch up all the time) and
# a checkpoint every 50 steps: no collective mismatches, no timeouts, and the
# weights equal the same run without pauses, bit for bit.
# usage: soak_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"
B="$W/batch.safetensors"
"$PY" "$SRC/tests/train/make_batch.py" mlp --out "$B" --from-export "$W" >/dev/null || { echo "FAIL batch"; exit 1; }
train() {
  timeout 600 "$KILN" train "$M" --input-file "$B" --no-cache --optimizer adam --lr 0.001 --steps 300 --nproc 4 \
    --comm-timeout 60 --rendezvous-timeout 60 "$@"
}

train --save-weights "$W/calm.safetensors" >"$W/calm.out" 2>&1 || fail "the calm run exited $?: $(tail -2 "$W/calm.out")"
t0=$(date +%s)
KILN_FAULT_STEP_DELAY_MS=20 train --checkpoint "$W/ck" --checkpoint-every 50 --keep-checkpoints 2 \
  --save-weights "$W/soak.safetensors" >"$W/soak.out" 2>&1 || fail "the soak run exited $?: $(tail -3 "$W/soak.out")"
took=$(($(date +%s) - t0))
if "$KILN" compare "$W/soak.safetensors" "$W/calm.safetensors" --tol 0 >/dev/null 2>&1; then
  ok "4 ranks x 300 steps with random pauses and a checkpoint every 50 steps (${took} s): weights equal the calm run's"
else
  fail "the soak run's weights differ from the calm run's"
fi
[ "$(ls -d "$W"/ck/step-* | wc -l)" = 2 ] || fail "--keep-checkpoints 2 kept: $(ls "$W/ck")"

[ $fails -eq 0 ] && echo "all soak checks passed" || { echo "$fails failed"; exit 1; }
