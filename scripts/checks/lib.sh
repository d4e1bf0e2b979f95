# Shared by the checks that run beside `swift test` (sourced, not run): installing what a check
# needs on a fresh machine, a Python virtual environment under .build/venv, and a sidecar on
# loopback that the check starts and ends by its pid.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/.build/venv"
export PATH=/opt/swift/usr/bin:$PATH

# ensure_apt PACKAGE...: installs the Debian packages that are missing (through sudo when not root).
ensure_apt() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  local sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  echo "installing: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# ensure_venv REQUIREMENT...: a virtual environment made with Debian's python3, holding these
# PyPI requirements (pinned by the caller).
ensure_venv() {
  ensure_apt python3 python3-venv
  [[ -x "$VENV/bin/python" ]] || /usr/bin/python3 -m venv "$VENV"
  local missing=()
  for r in "$@"; do
    "$VENV/bin/python" -m pip show -q "${r%%[=<>]*}" >/dev/null 2>&1 || missing+=("$r")
  done
  ((${#missing[@]})) || return 0
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${missing[@]}"
}

# free_port: an unused loopback TCP port.
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_http URL [SECONDS]: until URL answers (any status), or fails after SECONDS (default 20).
wait_http() {
  local url=$1 deadline=$((SECONDS + ${2:-20}))
  until curl -s -o /dev/null "$url"; do
    ((SECONDS < deadline)) || { echo "no answer from $url" >&2; return 1; }
    sleep 0.1
  done
}
