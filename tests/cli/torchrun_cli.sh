#!/usr/bin/env bash
# kiln train under torchrun (driver/ranks.h, backend/comm/c10d_store.h):
# started by torchrun's own elastic agent, which serves a c10d TCPStore on
# MASTER_PORT, the ranks meet through that store and train exactly as
# `--nproc 2` does; two jobs with different run ids on one agent store train
# side by side without joining each other (their keys are namespaced by
# TORCHELASTIC_RUN_ID). The agent is PyTorch's (torch.distributed.launcher,
# see tests/dist/torchrun_launch.py for why not the torchrun script).
# usage: torchrun_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"
B="$W/batch.safetensors"
"$PY" "$SRC/tests/train/make_batch.py" mlp --out "$B" --from-export "$W" >/dev/null || { echo "FAIL batch"; exit 1; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
train() { "$KILN" train "$M" --input-file "$B" --steps 3 --no-cache --comm-timeout 30 --rendezvous-timeout 30 "$@"; }

train --nproc 2 --save-weights "$W/nproc.safetensors" >"$W/nproc.out" 2>&1 ||
  { echo "FAIL --nproc 2 exited $?: $(tail -2 "$W/nproc.out")"; exit 1; }

# 1. torchrun's agent starts the ranks.
port=$(free_port)
if timeout 120 "$PY" "$SRC/tests/dist/torchrun_launch.py" --nproc 2 --master-port "$port" --run-id job-a -- \
  "$KILN" train "$M" --input-file "$B" --steps 3 --no-cache --comm-timeout 30 --rendezvous-timeout 30 \
  --save-weights "$W/torchrun.safetensors" >"$W/torchrun.out" 2>&1; then
  if "$KILN" compare "$W/torchrun.safetensors" "$W/nproc.safetensors" --tol 0 >/dev/null; then
    ok "under torchrun's agent (its c10d store on MASTER_PORT) the ranks train exactly as --nproc 2"
  else
    fail "under torchrun: weights differ from --nproc 2"
  fi
else
  fail "under torchrun: $(tail -5 "$W/torchrun.out")"
fi

# 2. Two jobs on one agent store, started together, with their own run ids.
port=$(free_port)
coproc AGENT { "$PY" "$SRC/tests/dist/agent_store.py" "$port" 2>&1; }
read -r -t 60 line <&"${AGENT[0]}"
[ "$line" = ready ] || fail "the agent store did not start: $line"
pids=()
for job in a b; do
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=job-$job TORCHELASTIC_RESTART_COUNT=0 \
      train --save-weights "$W/shared-$job.safetensors" >"$W/shared-$job.$r.out" 2>&1 &
    pids+=($!)
  done
done
for p in "${pids[@]}"; do wait "$p" || fail "a rank of the two shared-store jobs exited $?"; done
exec {AGENT[1]}>&-  # the agent prints its key count and exits
read -r -t 30 keys <&"${AGENT[0]}"
for job in a b; do
  if "$KILN" compare "$W/shared-$job.safetensors" "$W/nproc.safetensors" --tol 0 >/dev/null 2>&1; then
    ok "job-$job on the shared agent store trained exactly as --nproc 2"
  else
    fail "job-$job on the shared agent store: $(tail -2 "$W/shared-$job.0.out")"
  fi
done
[[ "$keys" == "keys "* && ${keys#keys } -gt 4 ]] && ok "the jobs' rendezvous keys are in the agent's store ($keys)" ||
  fail "the agent store saw no keys: $keys"

[ $fails -eq 0 ] && echo "all torchrun checks passed" || { echo "$fails failed"; exit 1; }
