#!/usr/bin/env bash
# kiln train / kiln grad end to end on the bundled MLP: bad input gives one
# "kiln: error:" line, a non-zero exit and no output files; a resumed run
# logs exactly the losses of an uninterrupted one; logs, weights and
# checkpoints have the documented shape.
# usage: train_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

expect_error() {  # NAME SUBSTRING CMD...
  local name=$1 want=$2
  shift 2
  rm -f "$W/w.safetensors" "$W/log.jsonl"
  local out rc lines
  out=$(timeout 120 "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(printf '%s' "$out" | grep -c '' || true)
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: exit code $rc (want a clean non-zero exit)"
  elif [ "$lines" != 1 ] || [[ "$out" != "kiln: error: "* ]]; then fail "$name: want one 'kiln: error:' line, got: $out"
  elif [[ "$out" != *"$want"* ]]; then fail "$name: message lacks '$want': $out"
  elif [ -e "$W/w.safetensors" ] || [ -e "$W/log.jsonl" ]; then fail "$name: wrote an output file"
  else echo "ok   $name: $out"; fi
}

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
# Batches: a good one and broken ones (input0 [8, 32] f32, 10 classes).
"$PY" - "$W" "$SRC/models" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import torch
from st_io import save
w = sys.argv[1]
g = torch.Generator().manual_seed(0)
x = torch.randn(8, 32, generator=g)
t = torch.randint(0, 10, (8,), generator=g)
save(w + "/batch.safetensors", {"input0": x, "target": t})
save(w + "/no_target.safetensors", {"input0": x})
save(w + "/bad_shape.safetensors", {"input0": x, "target": t[:5]})
bad = t.clone(); bad[3] = 10
save(w + "/bad_class.safetensors", {"input0": x, "target": bad})
save(w + "/float_target.safetensors", {"input0": x, "target": t.float()})
PY

M="$W/mlp.pt"
B="$W/batch.safetensors"
OUT=(--save-weights "$W/w.safetensors" --log-file "$W/log.jsonl")
expect_error missing_target "no tensor 'target' (the cross_entropy loss needs it)" \
  "$KILN" train "$M" --input-file "$W/no_target.safetensors" --steps 2 "${OUT[@]}"
expect_error target_shape "does not fit logits f32[8,10]" \
  "$KILN" train "$M" --input-file "$W/bad_shape.safetensors" --steps 2 "${OUT[@]}"
expect_error target_class "target[3] = 10 is not a class index in [0, 10)" \
  "$KILN" train "$M" --input-file "$W/bad_class.safetensors" --steps 2 "${OUT[@]}"
expect_error float_target "needs integer class indices" \
  "$KILN" train "$M" --input-file "$W/float_target.safetensors" --steps 2 "${OUT[@]}"
expect_error unknown_optimizer "unknown optimizer 'adamx'; use sgd, adam, adamw or muon" \
  "$KILN" train "$M" --input-file "$B" --optimizer adamx "${OUT[@]}"
expect_error muon_momentum "--muon-momentum must be in [0, 1)" \
  "$KILN" train "$M" --input-file "$B" --optimizer muon --muon-momentum 1 "${OUT[@]}"
expect_error muon_frozen_matrix "freezing 'fc2.weight', a matrix Muon trains, is not supported" \
  "$KILN" train "$M" --input-file "$B" --optimizer muon --freeze fc2.weight "${OUT[@]}"
expect_error muon_zero "--zero 1 with --optimizer muon is not supported" \
  "$KILN" train "$M" --input-file "$B" --optimizer muon --zero 1 --nproc 2 "${OUT[@]}"
expect_error negative_lr "--lr must be a finite number >= 0" \
  "$KILN" train "$M" --input-file "$B" --lr -0.1 "${OUT[@]}"
expect_error unknown_loss "unknown loss 'hinge'" "$KILN" train "$M" --input-file "$B" --loss hinge "${OUT[@]}"
expect_error nesterov_without_momentum "--nesterov needs --momentum > 0" \
  "$KILN" train "$M" --input-file "$B" --optimizer sgd --nesterov "${OUT[@]}"
expect_error missing_batch "nope.safetensors" "$KILN" train "$M" --input-file "$W/nope.safetensors" "${OUT[@]}"
expect_error resume_missing "not a Kiln checkpoint directory" \
  "$KILN" train "$M" --input-file "$B" --resume "$W/no_such_ckpt" "${OUT[@]}"
expect_error mse_shape "mse needs a target of the model output's type f32[8,10]" \
  "$KILN" train "$M" --input-file "$B" --loss mse "${OUT[@]}"

# A log line per step with step, loss and lr; weights keyed like state_dict.
"$KILN" train "$M" --input-file "$B" --optimizer adamw --lr 1e-2 --steps 6 --log-file "$W/full.jsonl" \
  --save-weights "$W/full.safetensors" > "$W/full.out" || fail "full run exited $?"
"$PY" - "$W" "$SRC/models" <<'PY' || fails=$((fails + 1))
import json, sys
sys.path.insert(0, sys.argv[2])
from st_io import load
import torch
w = sys.argv[1]
rows = [json.loads(l) for l in open(w + "/full.jsonl")]
assert [r["step"] for r in rows] == list(range(6)), rows
assert all({"loss", "lr", "accuracy"} <= set(r) for r in rows), rows[0]
assert rows[-1]["loss"] < rows[0]["loss"], "loss did not fall on a repeated batch"
got = load(w + "/full.safetensors")
ref = torch.jit.load(w + "/mlp.pt").state_dict()
assert set(got) == set(ref), (sorted(got), sorted(ref))
for k in ref:
    assert got[k].shape == ref[k].shape and got[k].dtype == ref[k].dtype, k
print("ok   log and weights: %d steps, loss %.4f -> %.4f" % (len(rows), rows[0]["loss"], rows[-1]["loss"]))
PY

# Resume: 3 steps + checkpoint, then resume to 6 == the uninterrupted run.
"$KILN" train "$M" --input-file "$B" --optimizer adamw --lr 1e-2 --steps 3 --checkpoint "$W/ckpt" \
  --log-file "$W/part.jsonl" > /dev/null || fail "first half exited $?"
"$KILN" train "$M" --input-file "$B" --optimizer adamw --lr 1e-2 --steps 6 --resume "$W/ckpt" \
  --log-file "$W/part.jsonl" --save-weights "$W/resumed.safetensors" > /dev/null || fail "resumed half exited $?"
if cmp -s <(cut -d, -f-2 "$W/full.jsonl") <(cut -d, -f-2 "$W/part.jsonl") && cmp -s "$W/full.jsonl" "$W/part.jsonl"; then
  echo "ok   resume: identical log"
else
  fail "resume: logs differ"; diff "$W/full.jsonl" "$W/part.jsonl"
fi
cmp -s "$W/full.safetensors" "$W/resumed.safetensors" && echo "ok   resume: identical weights" ||
  fail "resume: weights differ"
# The same with Muon: its momentum buffers and rate schedule (warm-up across the resume) carry over.
MUON=(--optimizer muon --muon-weight-decay 0.1 --warmup-steps 4)
"$KILN" train "$M" --input-file "$B" "${MUON[@]}" --steps 6 --save-weights "$W/muon_full.safetensors" \
  > /dev/null || fail "muon run exited $?"
"$KILN" train "$M" --input-file "$B" "${MUON[@]}" --steps 3 --checkpoint "$W/muon_ckpt" > /dev/null ||
  fail "muon first half exited $?"
"$KILN" train "$M" --input-file "$B" "${MUON[@]}" --steps 6 --resume "$W/muon_ckpt" \
  --save-weights "$W/muon_resumed.safetensors" > /dev/null || fail "muon resumed half exited $?"
if cmp -s "$W/muon_full.safetensors" "$W/muon_resumed.safetensors" &&
  ! cmp -s "$W/muon_full.safetensors" "$W/full.safetensors"; then
  echo "ok   resume: Muon's weights identical (and not AdamW's)"
else
  fail "resume: Muon's weights differ"
fi

# kiln grad writes every parameter's gradient and the loss.
"$KILN" grad "$M" --input-file "$B" -o "$W/grads.safetensors" > /dev/null || fail "grad exited $?"
"$PY" - "$W" "$SRC/models" <<'PY' || fails=$((fails + 1))
import sys
sys.path.insert(0, sys.argv[2])
from st_io import load
import torch
g = load(sys.argv[1] + "/grads.safetensors")
params = dict(torch.jit.load(sys.argv[1] + "/mlp.pt").named_parameters())
assert set(params) <= set(g) and "loss" in g, sorted(g)
print("ok   grad: %d gradients and the loss" % len(params))
PY

[ $fails -eq 0 ] && echo "all train CLI checks passed" || echo "$fails train CLI checks FAILED"
exit $((fails > 0))
