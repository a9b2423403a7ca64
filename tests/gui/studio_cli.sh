#!/usr/bin/env bash
# kiln-studio's command line, headless: a model opened, measured and
# rendered (--measure on 2 ranks and in this process, --view --screenshot,
# PNG and SVG), a pass chosen with
# --pass, and one-line errors with exit 1 and no file for an unknown view,
# an unknown pass, a missing model and --screenshot without a file to open.
# usage: studio_cli.sh KILN_STUDIO WORKDIR MODEL.pt
set -u
STUDIO=$1
W=$2
MODEL=$3
rm -rf "$W" && mkdir -p "$W"
export QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR=$W
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

out=$("$STUDIO" "$MODEL" --measure --view comm --screenshot "$W/comm.png" 2>&1) || fail "--measure exited $?: $out"
[[ "$out" == *"wrote the comm view to $W/comm.png"* ]] || fail "--measure: $out"
[ "$(head -c 8 "$W/comm.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] || fail "comm.png is not a PNG"
ok "a model measured and its comm view saved as PNG"

out=$("$STUDIO" "$MODEL" --measure --measure-ranks 1 --view kernels --screenshot "$W/kernels.png" 2>&1) ||
  fail "--measure-ranks 1 exited $?: $out"
[[ "$out" == *"wrote the kernels view to $W/kernels.png"* ]] || fail "--measure-ranks 1: $out"
ok "a model measured in this process (one rank) and its kernels view saved"

out=$("$STUDIO" "$MODEL" --view passes --pass fuse --screenshot "$W/passes.svg" 2>&1) || fail "--pass exited $?: $out"
grep -q "<svg" "$W/passes.svg" || fail "passes.svg is not SVG"
ok "--pass fuse rendered as SVG"

out=$("$STUDIO" "$MODEL" --view graph --colour flops --screenshot "$W/flops.png" 2>&1) || fail "--colour flops exited $?: $out"
[[ "$out" == *"wrote the graph view to $W/flops.png"* ]] || fail "--colour flops: $out"
ok "the graph coloured by flops saved"

for args in "--view nosuch|unknown view 'nosuch'" "--pass nosuch|no pass 'nosuch'" \
  "--colour heat|unknown colouring 'heat'"; do
  a=${args%%|*}
  want=${args#*|}
  # shellcheck disable=SC2086
  "$STUDIO" "$MODEL" $a --screenshot "$W/bad.png" >"$W/out.txt" 2>&1
  rc=$?
  out=$(grep -v "^QStandardPaths\|propagateSizeHints" "$W/out.txt")
  if [ "$rc" = 0 ]; then fail "$a: exit 0"
  elif [ "$(grep -c '' <<<"$out")" != 1 ] || [[ "$out" != "kiln-studio: error: "*"$want"* ]]; then fail "$a: '$out'"
  elif [ -e "$W/bad.png" ]; then fail "$a: left bad.png"
  else ok "$a: $out"; fi
done
for args in "$W/missing.pt|missing.pt: no such file" "|--screenshot needs a report or a model"; do
  a=${args%%|*}
  want=${args#*|}
  # shellcheck disable=SC2086
  "$STUDIO" $a --screenshot "$W/bad.png" >"$W/out.txt" 2>&1
  rc=$?
  out=$(grep "kiln-studio: error" "$W/out.txt")
  if [ "$rc" = 0 ] || [[ "$out" != *"$want"* ]] || [ -e "$W/bad.png" ]; then fail "'$a': exit $rc, '$out'"
  else ok "'$a': $out"; fi
done

# A plain torch.jit.trace(...).save() archive records no input shapes: the
# error names the flags, which kiln-studio takes as kiln compile does.
/usr/bin/python3 -c "
import torch, sys
m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
torch.jit.trace(m, torch.randn(2, 3, 16, 16)).save(sys.argv[1])" "$W/plain.pt" || fail "could not trace plain.pt"
"$STUDIO" "$W/plain.pt" --screenshot "$W/plain.png" >"$W/out.txt" 2>&1 && fail "plain.pt without shapes: exit 0"
grep -q "kiln-studio: error: .*--input-shape" "$W/out.txt" || fail "plain.pt without shapes: $(cat "$W/out.txt")"
[ -e "$W/plain.png" ] && fail "plain.pt without shapes left plain.png"
out=$("$STUDIO" "$W/plain.pt" --input-shape 2x3x16x16 --amp bf16 --loss mse --view passes --pass amp \
      --screenshot "$W/plain.png" 2>&1) || fail "plain.pt --input-shape 2x3x16x16 --amp bf16 exited $?: $out"
[ -s "$W/plain.png" ] || fail "plain.pt with --input-shape: no screenshot"
out=$("$STUDIO" "$W/plain.pt" --input-shape 2x3x16x16 --amp int3 --screenshot "$W/bad.png" 2>&1)
[ $? != 0 ] && [[ "$out" == *"unknown --amp 'int3'"* ]] && [ ! -e "$W/bad.png" ] || fail "--amp int3: '$out'"
ok "kiln-studio takes kiln compile's options (--input-shape, --amp, --loss; a bad value is one line)"

[ $fails -eq 0 ] && echo "all kiln-studio command-line checks passed" || { echo "$fails failed"; exit 1; }
