#!/bin/bash
# What 10,000 slow connections from 127.0.0.2 cost a normal client on 127.0.0.1, on loopback only.
# usage: scripts/bench/slowloris.sh [serve flags...]   e.g. --connections-per-address 0 --head-timeout 0
# Starts `pushwarden serve` on the example policy, runs `bench-tool slowloris` for SECONDS (25),
# stops the sidecar and prints the per-second lines and the summary. Uses the debug build
# (CONFIG=release for the release one); build first with `swift build` (or -c release).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(swift build -c "${CONFIG:-debug}" --show-bin-path)
port=${PORT:-18480}
PUSHWARDEN_DEMO_SESSION_SECRET=slowloris-secret-0123456789abcdef0123 "$bin/pushwarden" serve --policy policies/example.yaml \
  --listen "127.0.0.1:$port" --admin "127.0.0.1:$((port + 1))" --log-level warning "$@" &
pw=$!
trap 'kill -TERM $pw 2>/dev/null || true; wait $pw 2>/dev/null || true' EXIT
sleep 1.5
timeout $(( ${SECONDS_RUN:-25} + 30 )) "$bin/bench-tool" slowloris --port "$port" --connections "${CONNECTIONS:-10000}" \
  --seconds "${SECONDS_RUN:-25}" --path /v1/apps/demo/nowhere
