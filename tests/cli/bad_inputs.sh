#!/usr/bin/env bash
# Bad input must give one line "kiln: error: ...", a non-zero exit, no crash,
# no hang, and no half-written output file.
# usage: bad_inputs.sh KILN WORKDIR
set -u
KILN=$1
W=$2
rm -rf "$W" && mkdir -p "$W"
fails=0

# expect_error NAME SUBSTRING CMD...
expect_error() {
  local name=$1 want=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s' "$out" | grep -c '' || true)
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL $name: exit code $rc (want a clean non-zero exit)"; fails=$((fails + 1))
  elif [ "$lines" != 1 ] || [[ "$out" != "kiln: error: "* ]]; then
    echo "FAIL $name: want one 'kiln: error:' line, got: $out"; fails=$((fails + 1))
  elif [[ "$out" != *"$want"* ]]; then
    echo "FAIL $name: message lacks '$want': $out"; fails=$((fails + 1))
  else
    echo "ok   $name: $out"
  fi
}

# A small valid input file, written with Python (the oracle) for the run cases.
/usr/bin/python3 - "$W" <<'PY'
import sys, json, struct
w = sys.argv[1]
def st(path, tensors):
    header, data = {}, b""
    for k, (dt, shape, raw) in sorted(tensors.items()):
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st(w + "/in.safetensors", {"input0": ("F32", [2, 3], struct.pack("<6f", *range(6)))})
# Header claims a tensor far larger than the file.
h = json.dumps({"input0": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 4 << 40]}}).encode()
open(w + "/lying.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 16)
# Header length larger than the file.
open(w + "/biglen.safetensors", "wb").write(struct.pack("<Q", 1 << 60) + b"{}")
PY

printf 'hello, not a model\n' > "$W/text.pt"
: > "$W/empty.pt"
head -c 100 /dev/urandom > "$W/random.pt"
printf '{"format": "kiln-fx", "version": 1, "nodes": [' > "$W/truncated.fx.json"
printf '[1, 2, 3]' > "$W/array.fx.json"
printf '{"format": "something-else"}' > "$W/foreign.fx.json"
printf 'PK\003\004garbage-zip' > "$W/fakezip.pt"

OUTF="$W/out.safetensors"
expect_error missing_model "nope.pt" "$KILN" run "$W/nope.pt" --input-file "$W/in.safetensors" --output-file "$OUTF"
expect_error text_as_pt "text.pt" "$KILN" run "$W/text.pt" --input-file "$W/in.safetensors" --output-file "$OUTF"
expect_error empty_pt "empty.pt" "$KILN" run "$W/empty.pt" --input-file "$W/in.safetensors" --output-file "$OUTF"
expect_error random_pt "random.pt" "$KILN" run "$W/random.pt" --input-file "$W/in.safetensors" --output-file "$OUTF"
expect_error fake_zip "fakezip.pt" "$KILN" run "$W/fakezip.pt" --input-file "$W/in.safetensors" --output-file "$OUTF"
expect_error truncated_json "malformed JSON" "$KILN" inspect "$W/truncated.fx.json"
expect_error json_array "array.fx.json" "$KILN" inspect "$W/array.fx.json"
expect_error foreign_json "foreign.fx.json" "$KILN" inspect "$W/foreign.fx.json"
expect_error unknown_format "unknown model format" "$KILN" inspect "$W/in.safetensors"
expect_error lying_header "lying.safetensors" "$KILN" run "$W/text.pt" --input-file "$W/lying.safetensors" --output-file "$OUTF"
expect_error huge_header_len "biglen.safetensors" "$KILN" run "$W/text.pt" --input-file "$W/biglen.safetensors" --output-file "$OUTF"
expect_error bad_shape_arg "--input-shape" "$KILN" inspect "$W/text.pt" --input-shape 2xbanana
expect_error compare_missing "nope.safetensors" "$KILN" compare "$W/in.safetensors" "$W/nope.safetensors"

if ls "$W"/out.safetensors* >/dev/null 2>&1; then
  echo "FAIL: an output file (or its temporary) was left behind"; fails=$((fails + 1))
fi
echo "$fails failures"
[ $fails -eq 0 ]
