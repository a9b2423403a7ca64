#!/usr/bin/env bash
# Data parallel over machines (kiln train --nnodes M --node-rank K
# --master-addr A --master-port P --nproc N, torchrun's static form): two
# "machines" made as network namespaces with their own addresses, joined by
# a veth pair, each running one launcher with 2 ranks; the 4 ranks train
# exactly as --nproc 4 on one machine, with KILN_SOCKET_IFNAME choosing the
# interface on one of them. Skipped (exit 77, CTest's skip), saying so,
# where network namespaces cannot be made (no root, no ip, a sandbox
# without CAP_SYS_ADMIN).
# usage: multihost_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

NS0=kiln-mh0-$$ NS1=kiln-mh1-$$
cleanup() { ip netns del "$NS0" 2>/dev/null; ip netns del "$NS1" 2>/dev/null; }
trap cleanup EXIT
if ! { command -v ip >/dev/null && ip netns add "$NS0" 2>/dev/null && ip netns add "$NS1" 2>/dev/null; }; then
  echo "SKIP multihost_cli: cannot create network namespaces here (needs root and ip netns)"
  exit 77  # CTest: skipped
fi
ip link add kmh0 netns "$NS0" type veth peer name kmh1 netns "$NS1" || { fail "cannot create a veth pair"; exit 1; }
ip -n "$NS0" addr add 10.231.0.1/24 dev kmh0 && ip -n "$NS1" addr add 10.231.0.2/24 dev kmh1 &&
  ip -n "$NS0" link set kmh0 up && ip -n "$NS1" link set kmh1 up &&
  ip -n "$NS0" link set lo up && ip -n "$NS1" link set lo up || { fail "cannot configure the namespaces"; exit 1; }

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"
B="$W/batch.safetensors"  # input0: [8, 32], target: [8]
"$PY" "$SRC/tests/train/make_batch.py" mlp --out "$B" --from-export "$W" >/dev/null || { echo "FAIL batch"; exit 1; }
train() { "$KILN" train "$M" --input-file "$B" --steps 3 --no-cache --comm-timeout 30 --rendezvous-timeout 30 "$@"; }

train --nproc 4 --save-weights "$W/one.safetensors" >"$W/one.out" 2>&1 || fail "--nproc 4 exited $?: $(tail -2 "$W/one.out")"

hosts=(--nnodes 2 --nproc 2 --master-addr 10.231.0.1 --master-port 29611)
export KILN_STORE_TOKEN=multihost-test-secret  # several machines share the store's secret
ip netns exec "$NS0" "$KILN" train "$M" --input-file "$B" --steps 3 --no-cache --comm-timeout 30 --rendezvous-timeout 30 "${hosts[@]}" \
  --node-rank 0 --save-weights "$W/two.safetensors" >"$W/node0.out" 2>&1 &
n0=$!
ip netns exec "$NS1" env KILN_SOCKET_IFNAME=kmh1 "$KILN" train "$M" --input-file "$B" --steps 3 --no-cache \
  --comm-timeout 30 --rendezvous-timeout 30 "${hosts[@]}" --node-rank 1 --save-weights "$W/node1.safetensors" >"$W/node1.out" 2>&1 &
n1=$!
wait $n0 || fail "node 0 exited $?: $(tail -3 "$W/node0.out")"
wait $n1 || fail "node 1 exited $?: $(tail -3 "$W/node1.out")"
[ -f "$W/node1.safetensors" ] && fail "node 1 wrote weights (only rank 0 writes)"
if "$KILN" compare "$W/two.safetensors" "$W/one.safetensors" --tol 0 >/dev/null 2>&1; then
  ok "2 machines x 2 ranks (network namespaces 10.231.0.1 and .2, KILN_SOCKET_IFNAME on one) train exactly as --nproc 4"
else
  fail "2 machines x 2 ranks differ from --nproc 4: $(tail -2 "$W/node0.out")"
fi

out=$("$KILN" train "$M" --input-file "$B" --steps 1 --no-cache --nnodes 2 --node-rank 0 2>&1) &&
  fail "--nnodes without --master-addr succeeded"
grep -q "needs --master-addr" <<<"$out" && ok "--nnodes without the master's address: $out" ||
  fail "--nnodes without --master-addr: $out"
out=$(env -u KILN_STORE_TOKEN "$KILN" train "$M" --input-file "$B" --steps 1 --no-cache "${hosts[@]}" --node-rank 1 2>&1) &&
  fail "--nnodes without KILN_STORE_TOKEN succeeded"
grep -q "set KILN_STORE_TOKEN to the same secret on every node" <<<"$out" && ok "--nnodes needs the store's secret: $out" ||
  fail "--nnodes without KILN_STORE_TOKEN: $out"
out=$(KILN_SOCKET_IFNAME=nosuch0 "$KILN" train "$M" --input-file "$B" --steps 1 --no-cache --nproc 2 2>&1) &&
  fail "a missing KILN_SOCKET_IFNAME interface succeeded"
grep -q "KILN_SOCKET_IFNAME=nosuch0: no such network interface" <<<"$out" && ok "an unknown interface is named" ||
  fail "unknown interface: $out"

[ $fails -eq 0 ] && echo "all multi-host checks passed" || { echo "$fails failed"; exit 1; }
