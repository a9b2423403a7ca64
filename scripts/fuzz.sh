#!/usr/bin/env bash
# Build every libFuzzer target (tests/fuzz/fuzz_*.cpp) with clang-14 in
# build-fuzz/ and run each for KILN_FUZZ_SECONDS (default 30) from a scratch
# copy of its seed corpus, so the repository is never modified. Prints one
# line per target; exits non-zero if any target crashes, leaks or times out.
#
#   scripts/fuzz.sh                 # all targets
#   scripts/fuzz.sh safetensors     # only fuzz_safetensors
#   KILN_FUZZ_SECONDS=600 scripts/fuzz.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KILN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${KILN_FUZZ_SECONDS:-30}"
jobs="$(nproc 2>/dev/null || echo 2)"

mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DKILN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "fuzz: configure failed" >&2; exit 1; }

targets=()
for src in "$root"/tests/fuzz/fuzz_*.cpp; do
  [[ -e "$src" ]] || continue
  name="$(basename "$src" .cpp)"
  if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx -e "${name#fuzz_}" -e "$name"; then continue; fi
  targets+=("$name")
done
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz: no targets matched" >&2; exit 1; }

cmake --build "$build" -j "$jobs" --target "${targets[@]}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
failed=0
for name in "${targets[@]}"; do
  short="${name#fuzz_}"
  corpus="$scratch/$short/corpus"
  artifacts="$scratch/$short/artifacts"
  mkdir -p "$corpus" "$artifacts"
  if [[ -d "$root/tests/fuzz/corpus/$short" ]]; then cp -R "$root/tests/fuzz/corpus/$short/." "$corpus/"; fi
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/"
        -print_final_stats=1)
  dict="$root/tests/fuzz/$name.dict"
  [[ -f "$dict" ]] && args+=(-dict="$dict")
  log="$build/$name.log"
  if "$build/tests/fuzz/$name" "${args[@]}" "$corpus" >"$log" 2>&1; then
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    echo "fuzz: $name ok (${seconds}s, $runs runs, corpus $(ls "$corpus" | wc -l) inputs)"
  else
    failed=1
    # Keep the crashing inputs where the developer can find them.
    keep="$build/artifacts/$name"
    mkdir -p "$keep" && cp -R "$artifacts/." "$keep/"
    echo "fuzz: $name FAILED: $(grep -m1 -E '^==[0-9]+==ERROR|runtime error|deadly signal' "$log" || echo 'see log');" \
      "log $log, inputs in $keep"
  fi
done
exit "$failed"
