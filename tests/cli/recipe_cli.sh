#!/usr/bin/env bash
# kiln train's recipes end to end on the bundled MLP: held-out evaluation
# (--eval-data, --eval-every, --metric, --target) in the output, the log and
# the report; a --freeze-schedule whose points are compiled once and hit the
# compile cache on a second run (and on a run of other weights), with the
# frozen weights kept from their step on; --ema's averaged weights; bad
# recipe options give one line and write nothing.
# usage: recipe_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
# Four training batches and two held-out ones (input0 [8, 32] f32, 10 classes).
"$PY" - "$W" "$SRC/models" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[2])
import torch
from st_io import save
w = sys.argv[1]
g = torch.Generator().manual_seed(0)
for d, n in (("data", 4), ("eval", 2)):
    os.makedirs(f"{w}/{d}", exist_ok=True)
    for i in range(n):
        save(f"{w}/{d}/{i}.safetensors", {"input0": torch.randn(8, 32, generator=g),
                                          "target": torch.randint(0, 10, (8,), generator=g)})
PY
M="$W/mlp.pt"
T=(train "$M" --data "$W/data" --lr 0.01 --threads 1 --cache-dir "$W/cache")

json() {  # FILE EXPRESSION: print the Python expression over the JSON file as `r`
  "$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); print($2)" "$1"
}

# --- Evaluation every 2 steps: in the output, the log and the report.
out=$("$KILN" "${T[@]}" --steps 6 --eval-data "$W/eval" --eval-every 2 --log-file "$W/log.jsonl" \
  --report "$W/eval.json" 2>&1) || fail "train with --eval-data: $out"
n=$(grep -c '^eval after step' <<<"$out")
[ "$n" = 3 ] && ok "three evaluations printed" || fail "want 3 'eval after step' lines, got $n: $out"
grep -q '^evaluation: 2 batches of 2 batch files in .*eval (cycled), accuracy$' <<<"$out" && ok "evaluation set described" ||
  fail "no 'evaluation: 2 batches ... accuracy' line: $out"
n=$(grep -c '"eval_loss"' "$W/log.jsonl")
[ "$n" = 3 ] && ok "three evaluation lines in the log" || fail "want 3 eval lines in the log, got $n"
got=$(json "$W/eval.json" "[e['step'] for e in r['recipe']['evaluations']]")
[ "$got" = "[2, 4, 6]" ] && ok "report evaluations at steps $got" || fail "report evaluations at $got"
got=$(json "$W/eval.json" "all(0 <= e['accuracy'] <= 1 and e['perplexity'] > 1 and e['eval_ms'] > 0 for e in \
r['recipe']['evaluations']) and len(r['steps']) == 6")
[ "$got" = True ] && ok "evaluations hold accuracy, perplexity and their time" || fail "evaluation fields: $got"

# --- A target reached at the first evaluation stops the run there.
out=$("$KILN" "${T[@]}" --steps 6 --eval-data "$W/eval" --eval-every 2 --metric loss --target 1e9 \
  --report "$W/target.json" 2>&1) || fail "train with --target: $out"
grep -q '^reached loss <= 1e+09 after 2 steps and ' <<<"$out" && ok "target reached after 2 steps" ||
  fail "no 'reached loss <= 1e+09 after 2 steps': $out"
got=$(json "$W/target.json" "(r['recipe']['target']['reached'], r['recipe']['target']['step'], len(r['steps']))")
[ "$got" = "(True, 2, 2)" ] && ok "report: target reached at step 2, 2 steps trained" || fail "report target: $got"
out=$("$KILN" "${T[@]}" --steps 2 --eval-data "$W/eval" --target 1.01 2>&1) || fail "unreachable target: $out"
grep -q '^did not reach accuracy >= 1.01 in 2 steps$' <<<"$out" && ok "unreachable target said" ||
  fail "no 'did not reach accuracy >= 1.01': $out"

# --- A freeze schedule: two points, compiled on the first run, cache hits on the second.
for run in 1 2; do
  out=$("$KILN" "${T[@]}" --steps 6 --freeze-schedule 2:fc1,4:fc2 --save-weights "$W/sched$run.safetensors" \
    --report "$W/sched$run.json" 2>&1) || fail "train with --freeze-schedule (run $run): $out"
done
grep -q '^schedule: step 2 freeze fc1: .* compile cache hit)$' <<<"$out" &&
  grep -q '^schedule: step 4 freeze fc2: .* compile cache hit)$' <<<"$out" && ok "second run: both points hit the cache" ||
  fail "second run's schedule lines: $out"
got=$(json "$W/sched1.json" "[(p['step'], p['change'], p['cache']) for p in r['recipe']['schedule']]")
[ "$got" = "[(2, 'freeze fc1', 'miss'), (4, 'freeze fc2', 'miss')]" ] && ok "first run compiled both points" ||
  fail "first run's schedule: $got"
got=$(json "$W/sched2.json" "[p['trainable_params'] for p in r['recipe']['schedule']]")
[ "$got" = "[4810, 650]" ] && ok "trainable parameters after each point: $got" || fail "trainable params: $got"
# fc1 trains steps 0-1 only: its weights are those of a 2-step run; fc3 keeps training.
"$KILN" "${T[@]}" --steps 2 --save-weights "$W/two.safetensors" >/dev/null 2>&1 || fail "2-step run"
"$PY" - "$W" "$SRC/models" <<'PY' && ok "fc1 frozen from step 2 on, fc3 trained on" || fail "frozen weights"
import sys
sys.path.insert(0, sys.argv[2])
from st_io import load
a, b = load(sys.argv[1] + "/two.safetensors"), load(sys.argv[1] + "/sched2.safetensors")
assert a["fc1.weight"].equal(b["fc1.weight"]) and a["fc1.bias"].equal(b["fc1.bias"]), "fc1 changed after step 2"
assert not a["fc3.weight"].equal(b["fc3.weight"]), "fc3 did not train after step 2"
PY
# The same model with other weights (the bytes of one tensor changed): its
# start-up and both points hit the entries of the runs above (each checked
# against the new file's import), and it trains as --no-cache does.
"$PY" - "$M" "$W/other.pt" <<'PY' || fail "the other weights' archive"
import sys, zipfile
zin, zout = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_STORED)
for info in zin.infolist():
    data = zin.read(info.filename)
    if info.filename.endswith("/data/0"):  # a float32 tensor: every value negated (its sign bit flipped)
        data = bytes(b ^ 0x80 if i % 4 == 3 else b for i, b in enumerate(data))
    zout.writestr(info, data)
zout.close()
PY
O=(train "$W/other.pt" --data "$W/data" --lr 0.01 --threads 1 --steps 6 --freeze-schedule 2:fc1,4:fc2)
"$KILN" "${O[@]}" --cache-dir "$W/cache" --report "$W/other.json" >/dev/null 2>&1 || fail "other weights, cached"
"$KILN" "${O[@]}" --no-cache --report "$W/other_off.json" >/dev/null 2>&1 || fail "other weights, --no-cache"
got=$(json "$W/other.json" "[r['cache']['status']] + [p['cache'] for p in r['recipe']['schedule']]")
[ "$got" = "['hit', 'hit', 'hit']" ] && ok "other weights: the start-up and both points hit" ||
  fail "other weights' cache: $got"
"$PY" - "$W" <<'PY' && ok "other weights from the cache train as --no-cache" || fail "other weights' losses"
import json, sys
losses = lambda f: [s["loss"] for s in json.load(open(f"{sys.argv[1]}/{f}.json"))["steps"]]
assert len(losses("other")) == 6 and None not in losses("other"), losses("other")
assert losses("other") == losses("other_off"), (losses("other"), losses("other_off"))
assert losses("other") != losses("sched2"), "the other weights trained as the first ones"
PY

# --- EMA: the averaged weights are written beside the trained ones.
out=$("$KILN" "${T[@]}" --steps 3 --ema 0.5 --save-ema "$W/ema.safetensors" --save-weights "$W/last.safetensors" \
  2>&1) || fail "train with --ema: $out"
"$PY" - "$W" "$SRC/models" <<'PY' && ok "--save-ema wrote the averaged weights" || fail "--save-ema file"
import sys
sys.path.insert(0, sys.argv[2])
from st_io import load
e, w = load(sys.argv[1] + "/ema.safetensors"), load(sys.argv[1] + "/last.safetensors")
assert sorted(e) == sorted(w), (sorted(e), sorted(w))
assert all(e[k].shape == w[k].shape for k in e) and not e["fc1.weight"].equal(w["fc1.weight"])
PY

# --- Selective backprop: the step scores 8 rows and trains 4.
out=$("$KILN" "${T[@]}" --steps 2 --selective-backprop 0.5 --report "$W/sb.json" 2>&1) ||
  fail "train with --selective-backprop: $out"
got=$(json "$W/sb.json" "[(p['statistics']['examples_scored'], p['statistics']['examples_trained']) for p in \
r['passes'] if p['name'] == 'selective_backprop']")
[ "$got" = "[(8, 4)]" ] && ok "selective backprop scores 8 rows, trains 4" || fail "selective_backprop statistics: $got"

# --- Progressive resizing (resnet_mini at 16x16, then the data's 32x32) and
# sequence-length warm-up (gpt2_mini's windows of 8, then 16 tokens).
export_model resnet_mini --format trace --train || fail "export resnet_mini"
export_model gpt2_mini --format trace --train || fail "export gpt2_mini"
"$PY" - "$W" "$SRC/models" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[2])
import torch
from st_io import save
w = sys.argv[1]
g = torch.Generator().manual_seed(1)
for d in ("img", "img_eval"):
    os.makedirs(f"{w}/{d}", exist_ok=True)
    for i in range(2):
        save(f"{w}/{d}/{i}.safetensors", {"input0": torch.randn(2, 3, 32, 32, generator=g),
                                          "target": torch.randint(0, 10, (2,), generator=g)})
torch.randint(0, 128, (4000,), generator=g).to(torch.int16).numpy().tofile(f"{w}/tokens.u16")
PY
out=$("$KILN" train "$W/resnet_mini.pt" --data "$W/img" --eval-data "$W/img_eval" --steps 4 --threads 1 \
  --cache-dir "$W/cache" --resize-schedule 0:16,2:0 --report "$W/resize.json" 2>&1) || fail "--resize-schedule: $out"
got=$(json "$W/resize.json" "[(p['step'], p['change']) for p in r['recipe']['schedule']]")
[ "$got" = "[(2, \"images at the data's size\")]" ] && ok "resize schedule: 16x16, then the data's size" ||
  fail "resize schedule: $got"
grep -q 'images resized to 16x16' <<<"$out" && ok "the first step reads 16x16 images" || fail "no resized data: $out"
out=$("$KILN" train "$W/gpt2_mini.pt" --data "$W/tokens.u16" --seq-len 16 --seq-warmup 8:4 --steps 6 --threads 1 \
  --cache-dir "$W/cache" --report "$W/warm.json" 2>&1) || fail "--seq-warmup: $out"
got=$(json "$W/warm.json" "[(p['step'], p['change']) for p in r['recipe']['schedule']]")
[ "$got" = "[(4, 'seq_len 16')]" ] && ok "sequence warm-up: 8 tokens, then 16 at step 4" || fail "seq warm-up: $got"
grep -q 'windows of 8' <<<"$out" && ok "the first step reads windows of 8" || fail "no 8-token windows: $out"

# --- Bad recipe options: one line, non-zero exit, nothing written.
expect_error() {  # NAME SUBSTRING ARGS...
  local name=$1 want=$2
  shift 2
  rm -f "$W/bad.safetensors" "$W/bad.jsonl"
  local msg rc lines
  msg=$(timeout 120 "$KILN" "${T[@]}" --steps 3 --save-weights "$W/bad.safetensors" --log-file "$W/bad.jsonl" "$@" \
    2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s' "$msg" | grep -c '' || true)
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: exit code $rc"
  elif [ "$lines" != 1 ] || [[ "$msg" != "kiln: error: "* ]]; then fail "$name: want one 'kiln: error:' line: $msg"
  elif [[ "$msg" != *"$want"* ]]; then fail "$name: message lacks '$want': $msg"
  elif [ -e "$W/bad.safetensors" ] || [ -e "$W/bad.jsonl" ]; then fail "$name: wrote an output file"
  else ok "$name: $msg"; fi
}
expect_error schedule_syntax "'x:fc1' is not STEP:PATTERN" --freeze-schedule x:fc1
expect_error schedule_empty_pattern "'2:' is not STEP:PATTERN" --freeze-schedule 2:
expect_error schedule_no_match "--freeze-schedule 2:nope" --freeze-schedule 2:nope
expect_error target_without_eval "need --eval-data" --target 0.5
expect_error eval_every_negative "--eval-every must be >= 0" --eval-data "$W/eval" --eval-every -1
expect_error eval_missing "--eval-data" --eval-data "$W/no-such-dir"
expect_error ema_range "--ema must be a decay in (0, 1)" --ema 1.5
expect_error save_ema_without_ema "--save-ema needs --ema" --save-ema "$W/e.safetensors"
msg=$("$KILN" "${T[@]}" --eval-data "$W/eval" --metric top5 2>&1 >/dev/null) && fail "--metric top5 was taken" ||
  { [[ "$msg" == "--metric: top5 not in {accuracy,loss,perplexity}"* ]] && ok "metric_choice: ${msg%%$'\n'*}" ||
    fail "metric_choice: $msg"; }
expect_error selective_range "--selective-backprop must be a fraction" --selective-backprop 1
expect_error selective_all_rows "keeps all 8 rows" --selective-backprop 0.97
expect_error seq_warmup_needs_tokens "--seq-warmup cuts the windows of a token file" --seq-warmup 8:10
expect_error resize_no_images "--image-size / --resize-schedule: the batch has no 4-D floating image input" --resize-schedule 0:16

[ $fails -eq 0 ] && echo "all recipe CLI checks passed" || echo "$fails recipe CLI checks failed"
exit $((fails > 0))
