#!/usr/bin/env bash
# The release build's trap of 2026-12-05 came from a miscompile: a task group child returning
# `(index, .success(try await …))` from inside do/catch loses its index under -O. This check
#  1. builds the standalone reproduction with -O as it is and reports what this toolchain does
#     with it (informational: "still miscompiled" or "fixed"),
#  2. builds the same program with the child in the shape PWCore's mapConcurrently uses (the
#     pair built after the call returned) and fails unless it is right under -O,
#  3. fails when any source file returns a tuple or a Result built around a `try` (the family of
#     the shape; binding the call's result to a local first is always right).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=scripts/checks/miscompile/unsafe-shape.swift
unsafe='do throws(E) { return (index, .success(try await send(commands[index], on: nil))) } catch { return (index, .failure(error)) }'
grep -qF "$unsafe" "$src" || { echo "the reproduction no longer holds the unsafe child"; exit 1; }
python3 - "$src" "$work/safe.swift" "$unsafe" <<'PY'
import sys
src, out, unsafe = sys.argv[1], sys.argv[2], sys.argv[3]
safe = ('let result: Result<Reply, E>\n'
        '                    do throws(E) { result = .success(try await send(commands[index], on: nil)) } catch { result = .failure(error) }\n'
        '                    return (index, result)')
open(out, 'w').write(open(src).read().replace(unsafe, safe))
PY
swiftc -O -parse-as-library "$src" -o "$work/unsafe" 2>/dev/null
swiftc -O -parse-as-library "$work/safe.swift" -o "$work/safe" 2>/dev/null
unsafe_result=$("$work/unsafe" 2>&1 | tail -1 || true)
safe_result=$("$work/safe" 2>&1 | tail -1 || true)
toolchain=$(swiftc --version 2>&1 | head -1)
if [[ "$unsafe_result" == correct ]]; then
  echo "the unsafe shape is right under -O with $toolchain: the miscompile is fixed in this toolchain"
else
  echo "the unsafe shape is still miscompiled under -O with $toolchain ($unsafe_result)"
fi
echo "the shape PushWarden uses: $safe_result"
[[ "$safe_result" == correct ]] || exit 1
# A tuple or a Result returned with a `try` inside it, in the sources (tests and tools included).
if grep -rnE 'return (\([^()]*, *)?\.(success|some)\(try |return \([^()]*, *try await' Sources Tests --include='*.swift'; then
  echo "the lines above return a value built around a try: bind the call's result to a local first (see PWCore/ConcurrentMap.swift)"
  exit 1
fi
echo "the reproduction ran; no source returns the unsafe shape"
