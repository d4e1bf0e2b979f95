#!/usr/bin/env bash
# scripts/sanitize.sh thread|address 'Suite|Suite...': builds the tests with that sanitizer in
# .build/<sanitizer> and runs the named suites; fails when a suite fails or the sanitizer reports
# anything (its reports go to .build/<sanitizer>/reports).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH
sanitizer=$1
suites=$2
scratch=.build/$sanitizer
reports=$scratch/reports
mkdir -p "$reports"
rm -f "$reports"/*
swift build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch"
case $sanitizer in
  thread) export TSAN_OPTIONS="halt_on_error=0 log_path=$PWD/$reports/tsan second_deadlock_stack=1" ;;
  address) export ASAN_OPTIONS="halt_on_error=0 log_path=$PWD/$reports/asan detect_leaks=0" ;;
esac
status=0
timeout 1800 swift test --skip-build --scratch-path "$scratch" --sanitize="$sanitizer" --no-parallel --filter "$suites" || status=$?
found=$(find "$reports" -type f | wc -l)
if ((found > 0)); then
  echo "$sanitizer sanitizer: $found report file(s) in $reports:"
  for f in "$reports"/*; do echo "--- $f"; head -60 "$f"; done
  exit 1
fi
echo "$sanitizer sanitizer: no report; suites exited $status"
exit "$status"
