#!/usr/bin/env bash
# A step too large to hold (LLaMA at 7B shape: 32 layers, width 4096,
# 6.7e9 parameters) compiled from shapes alone: models/export.py
# --shapes-only dumps the forward traced on PyTorch's meta device (no
# weights, no weights file), kiln compile builds the whole training step
# from it within a small memory footprint and reports it, kiln-studio opens
# the report folded; training or running such a dump is a one-line error.
# usage: shapes_only_cli.sh KILN WORKDIR
source "$(dirname "$0")/lib/common.sh"

export_model llama_7b_shape --format fx --shapes-only ||
  { echo "FAIL export"; exit 1; }
M="$W/llama_7b_shape.fx.json"
[ -e "$W/llama_7b_shape.safetensors" ] && fail "a shapes-only export wrote weights"

out=$("$KILN" compile "$M" --no-cache --report "$W/r.json" 2>&1) || fail "compile exited $?: $out"
"$PY" - "$W/r.json" <<'PYEOF' || fail "the 7B-shape report"
import json, sys
r = json.load(open(sys.argv[1]))
m = r["model"]
assert 6.7e9 < m["params"] < 6.8e9, m["params"]  # embed + 32 x (4 x 4096^2 + 3 x 4096 x 11008) + norms + head
assert r["graph"]["nodes"] > 4000, r["graph"]["nodes"]
# Adam's moments are in the plan: at least 3 x the f32 weights at the peak.
assert r["memory"]["peak_bytes"] > 3 * 4 * m["params"], r["memory"]["peak_bytes"]
assert r["compile"]["peak_rss_bytes"] < 2 << 30, r["compile"]["peak_rss_bytes"]  # no weights were made
PYEOF
ok "compile: the 7B-shape training step from shapes alone, without allocating weights"

for cmd in train bench; do
  out=$("$KILN" $cmd "$M" --steps 1 --no-cache 2>&1) && fail "$cmd exited 0"
  [ "$(wc -l <<<"$out")" = 1 ] || fail "$cmd: not one line: $out"
  grep -q "shapes-only dump (no weights)" <<<"$out" || fail "$cmd: $out"
done
ok "train and bench on a shapes-only dump are one-line errors"

studio=$(dirname "$KILN")/gui/kiln-studio
if [ -x "$studio" ]; then
  mkdir -p -m 700 "$W/xdg"
  out=$(QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="$W/xdg" "$studio" "$W/r.json" --view graph \
        --screenshot "$W/graph.png" 2>&1) || fail "kiln-studio exited $?: $out"
  [ -s "$W/graph.png" ] || fail "kiln-studio wrote no screenshot: $out"
  ok "kiln-studio opens the 7B-shape report (folded)"
else
  echo "skip kiln-studio: not built"
fi

[ $fails = 0 ] && echo "all shapes-only checks passed" || { echo "$fails failed"; exit 1; }
