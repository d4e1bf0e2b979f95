#!/usr/bin/env bash
# Runs every scripts/checks/*.check.sh (each a self-contained check: it installs what it needs,
# starts what it talks to on loopback, ends what it started) and closes with one summary line.
set -uo pipefail
cd "$(dirname "$0")"
passed=0
failed=0
failures=()
for check in ./*.check.sh; do
  [[ -e "$check" ]] || continue
  name=$(basename "$check" .check.sh)
  echo "=== check: $name"
  started=$SECONDS
  if bash "$check"; then
    passed=$((passed + 1))
    echo "=== check: $name passed ($((SECONDS - started)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "=== check: $name FAILED ($((SECONDS - started)) s)"
  fi
done
((failed == 0)) || echo "failed checks: ${failures[*]}"
echo "checks: $passed passed, $failed failed"
((failed == 0))
