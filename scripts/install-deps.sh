#!/usr/bin/env bash
# Installs what PushWarden needs on a Debian machine, once: the C libraries it links, redis-server
# for the tests, and (with --bench) nginx and wrk for the benchmark. Idempotent and quiet when all
# is present. Swift itself comes with the machine (see README).
set -euo pipefail

packages=(pkg-config curl python3 python3-venv libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev openssl redis-server nginx-light)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(wrk)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
  if [[ -x /opt/swift/usr/bin/swift ]]; then
    echo "swift is at /opt/swift/usr/bin but not on PATH: export PATH=/opt/swift/usr/bin:\$PATH" >&2
  else
    echo "swift 6 toolchain not found: install it from swift.org (see README)" >&2
  fi
  exit 1
fi
