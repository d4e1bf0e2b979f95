#!/usr/bin/env bash
# Builds the libFuzzer targets (Sources/Fuzz, declared only with PUSHWARDEN_FUZZ=1) with
# -sanitize=fuzzer,address in their own scratch path, runs each for a bounded time from its seed
# corpus (fuzz/corpus/<target>) and prints one line per target: runs, execs/s, coverage (libFuzzer's
# final cov: and ft:), corpus size and peak RSS. Exits non-zero when any target crashed, leaked,
# timed out on an input or ran out of memory; the input that did it is left in
# .build/fuzz/artifacts/<target>/ and the log in .build/fuzz/logs/<target>.log.
#
#   FUZZ_SECONDS   time per target (default 60)
#   FUZZ_TARGETS   which targets (default: json jwt policy endpoint request head)
#   FUZZ_TIMEOUT   seconds one input may take before it counts as a hang (default 10)
#   FUZZ_RSS_MB    memory limit per target (default 2048)
#   FUZZ_JOBS      targets run side by side (default 1)
#
# New inputs libFuzzer finds go to .build/fuzz/corpus/<target> (kept between runs, never
# committed); the committed seeds are only read.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH=/opt/swift/usr/bin:$PATH

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
TARGETS=(${FUZZ_TARGETS:-json jwt policy endpoint request head})
INPUT_TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS_MB=${FUZZ_RSS_MB:-2048}
JOBS=${FUZZ_JOBS:-1}
SCRATCH=.build/fuzz
FLAGS=(--scratch-path "$SCRATCH" -Xswiftc -sanitize=fuzzer,address)

started=$SECONDS
mkdir -p "$SCRATCH/logs"
for t in "${TARGETS[@]}"; do
  [[ -d fuzz/corpus/$t ]] || { echo "fuzz: no target $t (no fuzz/corpus/$t)" >&2; exit 2; }
  # gold warns once per ASan helper symbol on every link; those lines say nothing.
  if ! PUSHWARDEN_FUZZ=1 swift build "${FLAGS[@]}" --product "fuzz-$t" > "$SCRATCH/logs/build-$t.log" 2>&1; then
    grep -v "Cannot export local symbol" "$SCRATCH/logs/build-$t.log" | tail -40 >&2
    echo "fuzz: building fuzz-$t failed" >&2
    exit 1
  fi
done
BIN="$(PUSHWARDEN_FUZZ=1 swift build "${FLAGS[@]}" --show-bin-path)"
echo "fuzz: built ${#TARGETS[@]} targets in $((SECONDS - started)) s; ${SECONDS_PER_TARGET} s each"

# LeakSanitizer on (libFuzzer checks every input that mallocs more than it frees); the
# toolchain's symbolizer for readable stacks; a crash trace without an interactive prompt.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1:${ASAN_OPTIONS:-}"
export ASAN_SYMBOLIZER_PATH=/opt/swift/usr/bin/llvm-symbolizer
export SWIFT_BACKTRACE="interactive=no"

run_one() {
  local t=$1
  local work="$SCRATCH/corpus/$t" artifacts="$SCRATCH/artifacts/$t/" log="$SCRATCH/logs/$t.log"
  mkdir -p "$work" "$artifacts" "$SCRATCH/logs"
  touch "$log.start"
  set +e
  "$BIN/fuzz-$t" "$work" "fuzz/corpus/$t" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout="$INPUT_TIMEOUT" -rss_limit_mb="$RSS_MB" -max_len=4096 \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$artifacts" > "$log" 2>&1
  echo $? > "$log.rc"
  set -e
}

pending=("${TARGETS[@]}")
while ((${#pending[@]})); do
  batch=("${pending[@]:0:$JOBS}")
  pending=("${pending[@]:$JOBS}")
  for t in "${batch[@]}"; do run_one "$t" & done
  wait
done

failed=()
printf '%-9s %10s %9s %7s %7s %8s %8s  %s\n' target runs execs/s cov ft corpus rss_mb result
for t in "${TARGETS[@]}"; do
  log="$SCRATCH/logs/$t.log"
  rc=$(cat "$log.rc")
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  field() { sed -n "s/.* $1: \([0-9a-zA-Z/]*\).*/\1/p" <<<"$last"; }
  result=ok
  if ((rc != 0)); then
    result="FAILED (exit $rc)"
    grep -q "LeakSanitizer" "$log" && result="FAILED (leak)"
    grep -q "ERROR: libFuzzer: timeout" "$log" && result="FAILED (timeout)"
    grep -q "out-of-memory" "$log" && result="FAILED (out of memory)"
    grep -qE "Fatal error|ERROR: AddressSanitizer|deadly signal" "$log" && result="FAILED (crash)"
    failed+=("$t")
  fi
  printf '%-9s %10s %9s %7s %7s %8s %8s  %s\n' "$t" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
    "$(field cov)" "$(field ft)" "$(field corp)" "$(stat peak_rss_mb)" "$result"
done

for t in "${failed[@]}"; do
  log="$SCRATCH/logs/$t.log"
  echo "--- fuzz-$t: $log"
  grep -v -E '^#[0-9]+|^\s+NEW_FUNC|^INFO:' "$log" | grep -v '^"' | head -60
  echo "--- inputs: $(find "$SCRATCH/artifacts/$t/" -type f -newer "$log.start" | tr '\n' ' ')"
  echo "--- replay: $BIN/fuzz-$t <input>"
done
((${#failed[@]} == 0)) || { echo "fuzz: ${#failed[@]} of ${#TARGETS[@]} targets failed: ${failed[*]}"; exit 1; }
echo "fuzz: ${#TARGETS[@]} targets, no crash, leak or timeout in ${SECONDS_PER_TARGET} s each"
