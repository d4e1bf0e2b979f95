#!/usr/bin/env bash
# Soak: the release binary (the build the Dockerfile ships) served the way production serves it,
# on a real redis-server and once on the in-memory store, for every policy in policies/ rewritten
# to reach only loopback, with every background task at short intervals (the expiry sweeper every
# 300 ms, queued deliveries to a flaky upstream, JWKS by URL, SIGHUP every 3 s) under mixed client
# and admin traffic. It fails when the process dies, on any 5xx, on an error line that no injected
# fault explains, and on RSS that keeps growing; scripts/checks/soak.py says exactly how.
# No test caught a release-only miscompile that trapped within seconds in the expiry sweeper;
# this runs the binary that traps.
#   PW_BINARY=/path/to/pushwarden  soak that binary instead of building one
#   SOAK_LONG_SECONDS=60           the example policy's Redis run; SOAK_RATE=120 requests/s
#   SOAK_ONLY=example/redis,...    only these runs
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_apt curl openssl python3 redis-server
if [[ -n "${PW_BINARY:-}" ]]; then
  BIN=$PW_BINARY
else
  # What `swift build --product pushwarden` links (the C libraries' -dev packages).
  ensure_apt pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev
  timeout 1800 swift build -q -c release --product pushwarden
  BIN="$(swift build -c release --show-bin-path)/pushwarden"
fi
[[ -x "$BIN" ]] || { echo "soak: no binary at $BIN" >&2; exit 1; }

soak_pid=""
cleanup() {
  [[ -n "$soak_pid" ]] && kill "$soak_pid" 2>/dev/null && wait "$soak_pid" 2>/dev/null
  return 0
}
trap cleanup EXIT
# The soak starts redis-server, the loopback stand-ins and each sidecar itself, ends them by their
# pid, and they end with it if it is killed (PR_SET_PDEATHSIG).
/usr/bin/python3 "$ROOT/scripts/checks/soak.py" --binary "$BIN" &
soak_pid=$!
wait "$soak_pid"
rc=$?
soak_pid=""
exit "$rc"
