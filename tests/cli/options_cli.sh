#!/usr/bin/env bash
# The option table (driver/option_table.h) against what the options do:
# every option `kiln options` declares "runtime" (not in the compile cache
# key) must leave the compiled step (graph, kernels, memory plan) exactly as
# it is without it, and must reach the report's `options`. A new runtime
# option fails here until it gets a test value below.
# usage: options_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model gpt2_mini --format trace --train || { echo "FAIL export"; exit 1; }
M="$W/gpt2_mini.pt"

"$KILN" options --json >"$W/options.json" || fail "kiln options --json exited $?"
"$KILN" options | grep -q "^--serial-nodes *compiled" || fail "kiln options: --serial-nodes is not in the key"
"$KILN" options | grep -q "^model  *model-structure  *train," ||
  fail "kiln options: the model's rule: $("$KILN" options | grep '^model ')"

"$KILN" compile "$M" --no-cache --report "$W/base.json" >/dev/null 2>&1 || fail "baseline compile exited $?"

# A valid value other than the default for every runtime option of kiln
# compile ("" for a flag); --no-cache is set in every run already.
declare -A VALUE=(
  [--token-type]=i32 [--lr]=0.5 [--muon-lr]=0.05 [--lr-schedule]=warmup_cosine [--warmup-steps]=2 [--min-lr]=1e-5
  [--steps]=3 [--seed]=7 [--threads]=1 [--prefetch]=0 [--print-ir-after]=dce [--print-ir-after-change]= [--verify-each]=
  [--dump-dir]="$W/dump" [--report-pass-ir]= [--comm-timeout]=30 [--rendezvous-timeout]=30 [--checkpoint-timeout]=60 [--cache-dir]="$W/cache" [--verbose,-v]=
)
runtime=$("$PY" -c "
import json, sys
for o in json.load(open(sys.argv[1])):
    if o['key'] == 'runtime' and 'compile' in o['commands'].split(','):
        print(o['flags'])" "$W/options.json")
[ -n "$runtime" ] || fail "kiln options lists no runtime option of kiln compile"
for flags in $runtime; do
  [ "$flags" = --no-cache ] && continue
  if [ -z "${VALUE[$flags]+set}" ]; then
    fail "runtime option $flags has no test value in options_cli.sh"
    continue
  fi
  flag=${flags%%,*}
  args=("$flag")
  [ -n "${VALUE[$flags]}" ] && args+=("${VALUE[$flags]}")
  if ! "$KILN" compile "$M" --no-cache "${args[@]}" --report "$W/r.json" >"$W/r.out" 2>&1; then
    fail "kiln compile ${args[*]} exited non-zero: $(tail -1 "$W/r.out")"
    continue
  fi
  "$PY" - "$W/base.json" "$W/r.json" "$flag" <<'PYEOF' || fail "${args[*]} (declared runtime) changes the compiled step or is not in the report"
import json, sys
base, run = (json.load(open(p)) for p in sys.argv[1:3])
name = sys.argv[3][2:].replace("-", "_")
assert run["options"][name] != base["options"][name], f"report options.{name} did not change"
for k in ("graph", "memory"):
    assert base[k] == run[k], f"{k} differs"
pick = lambda r: [(k["node"], k["kernel"], k["dialect"]) for k in r["kernels"]]
assert pick(base) == pick(run), "kernels differ"
PYEOF
done
ok "every runtime option leaves the compiled step unchanged and reaches the report's options"

# kiln opt takes the table's pass options too (it had no --optimizer or --loss).
"$KILN" export "$M" --format text --graph forward --train -o "$W/fwd.kir" >/dev/null 2>&1 || fail "export forward"
for opt in adamw sgd; do
  "$KILN" opt "$W/fwd.kir" --passes loss,autodiff,optimizer --optimizer $opt --momentum 0.9 -o "$W/opt_$opt.kir" \
    >/dev/null 2>&1 || fail "kiln opt --optimizer $opt exited $?"
done
grep -q "adam_update" "$W/opt_adamw.kir" || fail "kiln opt --optimizer adamw: no adam_update"
grep -q "sgd_update" "$W/opt_sgd.kir" || fail "kiln opt --optimizer sgd: no sgd_update"
! grep -q "adam_update" "$W/opt_sgd.kir" || fail "kiln opt --optimizer sgd: still an adam_update"
ok "kiln opt --optimizer and -o"

[ $fails = 0 ] && echo "all option checks passed" || { echo "$fails failed"; exit 1; }
