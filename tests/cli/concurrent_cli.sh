#!/usr/bin/env bash
# Independent nodes side by side (the default) against --serial-nodes on a
# zoo model whose step has stages worth a thread: the same losses and the
# same weights bit for bit after 3 AdamW steps, with the stages in the report.
# usage: concurrent_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model resnet_mini --format trace --train --no-dropout ||
  { echo "FAIL export"; exit 1; }
M="$W/resnet_mini.pt"
# The default pipeline without channels_last: this step's one stage of two
# independent nodes (what the test needs) exists in the NCHW schedule; the
# NHWC one orders its small nodes differently and has none at this size.
passes=$("$KILN" passes | awk '/default pipeline of kiln train/ {on=1; next} on && /^ *[0-9]+\./ {print $2} on && /^$/ {exit}' |
  grep -vx channels_last | paste -sd, -)
[ -n "$passes" ] || { echo "FAIL could not read the default pipeline from kiln passes"; exit 1; }
for mode in staged serial; do
  flag=(); [ $mode = serial ] && flag=(--serial-nodes)
  out=$("$KILN" train "$M" --steps 3 --optimizer adamw --threads 2 --no-cache --passes "$passes" "${flag[@]}" \
    --report "$W/$mode.json" \
    --save-weights "$W/$mode.safetensors" 2>&1) || fail "$mode train exited $?: $out"
done
cmp -s "$W/staged.safetensors" "$W/serial.safetensors" && ok "same weights bit for bit" ||
  fail "weights differ between side-by-side and one-by-one runs"
"$PY" - "$W/staged.json" "$W/serial.json" <<'PYEOF' || fail "report checks"
import json, sys
staged, serial = (json.load(open(p)) for p in sys.argv[1:3])
assert [s["loss"] for s in staged["steps"]] == [s["loss"] for s in serial["steps"]], "losses differ"
ex, ex1 = staged["execution"], serial["execution"]
assert ex["concurrent_nodes"] and ex["shared_stages"] > 0 and ex["widest_stage"] >= 2, ex
assert not ex1["concurrent_nodes"] and ex1["shared_stages"] == 0 and ex1["stages"] == serial["graph"]["nodes"], ex1
PYEOF
ok "same losses; the report shows the stages (and none with --serial-nodes)"

[ $fails = 0 ] && echo "all concurrent checks passed" || { echo "$fails failed"; exit 1; }
