#!/usr/bin/env bash
# kiln-studio's command line, headless: a model opened, measured and
# rendered (--measure --view --screenshot, PNG and SVG), a pass chosen with
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

out=$("$STUDIO" "$MODEL" --view passes --pass fuse --screenshot "$W/passes.svg" 2>&1) || fail "--pass exited $?: $out"
grep -q "<svg" "$W/passes.svg" || fail "passes.svg is not SVG"
ok "--pass fuse rendered as SVG"

for args in "--view nosuch|unknown view 'nosuch'" "--pass nosuch|no pass 'nosuch'"; do
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

[ $fails -eq 0 ] && echo "all kiln-studio command-line checks passed" || { echo "$fails failed"; exit 1; }
