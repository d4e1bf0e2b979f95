#!/usr/bin/env bash
# scripts/sanitize.sh thread|address 'Suite|Suite...': builds the tests with that sanitizer in
# .build/<sanitizer> and runs exactly the named suites there (each name must be a suite that
# `swift test list` shows, or the run fails before testing). Fails when a suite fails, the run
# overruns its time, or the sanitizer reports anything; prints the first lines of every report
# (all of them are kept in .build/<sanitizer>/reports) and how long the build and the run took.
#
# Under ThreadSanitizer, scripts/sanitize/tsan-mutex.c is preloaded so that TSan sees
# Synchronization.Mutex's contended hand-over; nothing is suppressed. LeakSanitizer runs with
# AddressSanitizer; scripts/sanitize/lsan.supp names the few leaks of XCTest and Foundation it
# must not count, each by its frame.
#
# Time bounds (seconds, overridable): SANITIZE_BUILD_SECONDS (default 3600) for the build,
# SANITIZE_TEST_SECONDS (default 2400) for the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH
sanitizer=${1:-}
suites=${2:-}
case $sanitizer in
  thread|address) ;;
  *) echo "usage: $0 thread|address 'Suite|Suite...'" >&2; exit 2 ;;
esac
if [[ -z $suites ]]; then echo "$0: no suites named" >&2; exit 2; fi
build_seconds=${SANITIZE_BUILD_SECONDS:-3600}
test_seconds=${SANITIZE_TEST_SECONDS:-2400}
scratch=.build/$sanitizer
reports=$scratch/reports
mkdir -p "$reports"
rm -f "$reports"/*

began=$SECONDS
timeout --kill-after=30 "$build_seconds" swift build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch"
built=$SECONDS

preload=
if [[ $sanitizer == thread ]]; then
  # Synchronization.Mutex hands a contended lock over where TSan cannot see it (tsan-mutex.c).
  # Reproduce that first, then check the preload both removes it and still reports a real race.
  proof=$scratch/mutex-handoff
  mkdir -p "$proof"
  rm -f "$proof"/report.*
  clang -shared -fPIC -O1 -Wall -Werror -o "$scratch/tsan-mutex.so" scripts/sanitize/tsan-mutex.c -ldl
  swiftc -sanitize=thread -g -module-cache-path "$scratch/module-cache" scripts/sanitize/mutex-handoff.swift -o "$proof/mutex-handoff"
  handoff() { # mode preload -> the number of TSan reports
    rm -f "$proof"/report.*
    TSAN_OPTIONS="log_path=$PWD/$proof/report exitcode=0" LD_PRELOAD=$2 timeout 120 "$proof/mutex-handoff" "$1" >/dev/null
    cat "$proof"/report.* 2>/dev/null | grep -c '^WARNING: ThreadSanitizer' || true
  }
  bare=$(handoff locked "")
  shimmed=$(handoff locked "$PWD/$scratch/tsan-mutex.so")
  unlocked=$(handoff unlocked "$PWD/$scratch/tsan-mutex.so")
  echo "thread sanitizer: Mutex hand-over: $bare report(s) without tsan-mutex.so, $shimmed with it; an unlocked counter: $unlocked"
  if ((bare == 0)); then echo "thread sanitizer: (no contention this time, or this toolchain's Mutex is visible to TSan: see tsan-mutex.c)"; fi
  if ((shimmed > 0 || unlocked == 0)); then
    echo "thread sanitizer: tsan-mutex.so does not do its job on this toolchain (see $proof)" >&2
    exit 1
  fi
  preload=$PWD/$scratch/tsan-mutex.so
fi

case $sanitizer in
  thread) export TSAN_OPTIONS="halt_on_error=0 log_path=$PWD/$reports/tsan second_deadlock_stack=1" ;;
  address)
    export ASAN_OPTIONS="halt_on_error=0 log_path=$PWD/$reports/asan detect_leaks=1"
    export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitize/lsan.supp print_suppressions=0" ;;
esac

# Every name must be a suite of this build: a misspelt or renamed suite would otherwise match
# nothing and pass in silence.
listing=$scratch/test-list.txt
timeout --kill-after=30 600 swift test list --skip-build --scratch-path "$scratch" --sanitize="$sanitizer" >"$listing"
missing=()
IFS='|' read -ra names <<<"$suites"
for name in "${names[@]}"; do
  grep -q "\.$name/" "$listing" || missing+=("$name")
done
if ((${#missing[@]} > 0)); then
  echo "$sanitizer sanitizer: no suite named ${missing[*]} (see $listing)" >&2
  exit 1
fi
# Anchored on the suite's own name (Module.Suite/test), so HTTPClientTests means that suite, not
# the whole HTTPClientTests module, and InventoryTests does not also run InventoryLayoutTests.
filter="\\.($suites)/"
echo "$sanitizer sanitizer: $(grep -cE "$filter" "$listing") tests in ${#names[@]} suites"

status=0
LD_PRELOAD=$preload timeout --kill-after=30 "$test_seconds" swift test --skip-build --scratch-path "$scratch" --sanitize="$sanitizer" \
  --no-parallel --filter "$filter" || status=$?
ran=$SECONDS
echo "$sanitizer sanitizer: build $((built - began)) s, run $((ran - built)) s, wall $((ran - began)) s"
if ((status == 124 || status == 137)); then echo "$sanitizer sanitizer: the suites overran ${test_seconds} s" >&2; fi

shopt -s nullglob
files=("$reports"/*)
if ((${#files[@]} > 0)); then
  # Every report, one line each (its SUMMARY and the file it is in), then the first 40 lines of
  # the first report of each kind; the files keep them all in full.
  count=$(cat "${files[@]}" | grep -c '^SUMMARY:' || true)
  echo "$sanitizer sanitizer: $count report(s) in ${#files[@]} file(s) under $reports:"
  grep -H '^SUMMARY:' "${files[@]}" | sed -E "s|^$reports/||; s|:SUMMARY: | |" | sort | uniq -c | sort -rn
  awk '/^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer))/ { n = 40; block = "" }
       n > 0 { block = block $0 "\n"; n-- }
       /^SUMMARY:/ { if (!($0 in seen)) { seen[$0] = 1; printf "--- %s\n%s", FILENAME, block } ; n = 0 }' "${files[@]}"
  exit 1
fi
echo "$sanitizer sanitizer: no report; suites exited $status"
exit "$status"
