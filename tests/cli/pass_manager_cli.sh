#!/usr/bin/env bash
# The PassManager switches of kiln train / kiln grad on the bundled MLP:
# --print-ir-after, --print-ir-after-change, --dump-dir (the IR before and
# after every pass, each file parseable by `kiln verify`), --passes with a
# custom pipeline, and one-line errors for unknown pass names; `kiln passes`
# lists every pass and the default pipelines.
# usage: pass_manager_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model mlp --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/mlp.pt"

out=$("$KILN" passes) || fail "kiln passes exited $?"
for p in loss autodiff optimizer cse dce "default pipeline of kiln train" "default pipeline of kiln grad"; do
  [[ "$out" == *"$p"* ]] || fail "kiln passes lacks '$p'"
done
ok "kiln passes"

out=$("$KILN" train "$M" --steps 1 --print-ir-after autodiff 2>&1) || fail "--print-ir-after exited $?"
[ "$(grep -c '^// ---- IR after' <<<"$out")" = 1 ] || fail "--print-ir-after autodiff: want exactly one IR print: $out"
grep -q '^// ---- IR after autodiff ----$' <<<"$out" || fail "--print-ir-after autodiff: no header"
grep -q 'cross_entropy_backward\|log_softmax_backward\|_backward(' <<<"$out" || fail "--print-ir-after autodiff: no backward op in the IR"
ok "--print-ir-after"

out=$("$KILN" grad "$M" -o "$W/g.safetensors" --print-ir-after-change 2>&1) || fail "--print-ir-after-change exited $?"
for p in loss autodiff; do grep -q "^// ---- IR after $p ----" <<<"$out" || fail "--print-ir-after-change: no IR after $p"; done
# The MLP has nothing dead: dce changes nothing, so its IR is not printed.
grep -q "IR after dce" <<<"$out" && fail "--print-ir-after-change printed the unchanged dce"
ok "--print-ir-after-change"

"$KILN" train "$M" --steps 1 --dump-dir "$W/dump" --verify-each >/dev/null 2>&1 || fail "--dump-dir exited $?"
# One file per pass of the default pipeline, as `kiln passes` lists it.
want="00-input.kir$("$KILN" passes | awk '/default pipeline of kiln train/ {f = 1; next} /^$/ {f = 0}
  f && /^ *[0-9]+\./ {printf " %02d-%s.kir", $1 + 0, $2}')"
[[ "$want" == *"01-loss.kir"*"autodiff.kir"*"optimizer.kir"* ]] || fail "kiln passes: unexpected train pipeline '$want'"
got=$(cd "$W/dump" 2>/dev/null && ls | tr '\n' ' ' | sed 's/ $//')
[ "$got" = "$want" ] || fail "--dump-dir: files '$got', want '$want'"
for f in "$W"/dump/*.kir; do
  "$KILN" verify "$f" >/dev/null 2>&1 || fail "kiln verify $(basename "$f") exited non-zero"
done
ok "--dump-dir ($want)"

out=$("$KILN" train "$M" --steps 2 --passes loss,autodiff,optimizer -v 2>&1) || fail "--passes exited $?"
grep -q "pass optimizer" <<<"$out" || fail "--passes: no optimizer in the trace: $out"
grep -q "pass dce" <<<"$out" && fail "--passes loss,autodiff,optimizer ran dce"
ok "--passes loss,autodiff,optimizer"

for args in "--passes loss,autodif|unknown pass 'autodif' in --passes (known: " \
            "--passes loss,,dce|--passes: empty pass name" \
            "--print-ir-after nope|--print-ir-after: unknown pass 'nope'"; do
  flags=${args%%|*}
  want=${args#*|}
  # shellcheck disable=SC2086
  out=$("$KILN" train "$M" $flags 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ]; then fail "$flags: exit 0"
  elif [ "$(grep -c '' <<<"$out")" != 1 ] || [[ "$out" != "kiln: error: "*"$want"* ]]; then fail "$flags: got '$out'"
  else ok "$flags: $out"; fi
done

[ $fails -eq 0 ] && echo "all pass-manager CLI checks passed" || { echo "$fails failed"; exit 1; }
