#!/usr/bin/env bash
# The Swift client of docs/clients (docs/clients/swift, URLSession) builds and does what
# docs/clients/README.md says against a live debug sidecar on loopback (policies/example.yaml,
# dry_run upstream): sign-in registers (forwarded), the next launch re-registers (unchanged), a
# new token rotates with previous_push_token (forwarded; the sidecar then retires the old token),
# sign-out unregisters, and refusals get the table's action (a malformed token: never retried;
# a bad session: reauthenticate; over the rate limit: retry on the next launch after Retry-After;
# a bad event batch: never retried).
#
# Environment: SWIFT_CLIENT_DIR (default docs/clients/swift; a broken copy shows the check can fail).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

CLIENT_DIR=${SWIFT_CLIENT_DIR:-$ROOT/docs/clients/swift}
ensure_apt curl openssl libcurl4-openssl-dev

echo "swift-client: building $CLIENT_DIR"
timeout 600 swift build -q --package-path "$CLIENT_DIR" --product pushwarden-client-demo
DEMO=$(swift build --package-path "$CLIENT_DIR" --show-bin-path)/pushwarden-client-demo
timeout 600 swift build -q --product pushwarden

WORK=$(mktemp -d)
PID=
cleanup() {
  if [[ -n $PID ]]; then kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

export PUSHWARDEN_DEMO_SESSION_SECRET
PUSHWARDEN_DEMO_SESSION_SECRET=$(openssl rand -hex 32)
PORT=$(free_port)
ADMIN=$(free_port)
.build/debug/pushwarden serve --policy policies/example.yaml --listen "127.0.0.1:$PORT" --admin "127.0.0.1:$ADMIN" \
  2>"$WORK/sidecar.log" &
PID=$!
wait_http "http://127.0.0.1:$ADMIN/healthz" 30

# Fresh sessions (they expire): the demo's contact, and a spare one the rate-limit step uses up.
SESSION=$(.build/debug/pushwarden dev-token --policy policies/example.yaml --app demo --contact "swift-client-$$")
SPARE=$(.build/debug/pushwarden dev-token --policy policies/example.yaml --app demo --contact "swift-client-spare-$$")

rc=0
timeout 60 "$DEMO" --base-url "http://127.0.0.1:$PORT" --app demo --session "$SESSION" --spare-session "$SPARE" || rc=$?

# The rotation really carried previous_push_token: the sidecar retired the old token upstream (an
# unregister before the sign-out's own). Without it there would be one unregister only.
unregisters=$(grep -c '"msg":"dry_run: would send".*installations/unregister' "$WORK/sidecar.log" || true)
if [[ $unregisters != 2 ]]; then
  echo "swift-client: expected 2 upstream unregisters (rotation's retirement, sign-out), saw $unregisters" >&2
  rc=1
fi
if ((rc != 0)); then
  echo "--- sidecar log (last 20 lines)" >&2
  tail -n 20 "$WORK/sidecar.log" | cut -c1-400 >&2
fi
kill -0 "$PID" 2>/dev/null || { echo "swift-client: the sidecar died" >&2; exit 1; }
exit $rc
