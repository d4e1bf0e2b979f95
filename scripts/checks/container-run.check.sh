#!/usr/bin/env bash
# The container image, built and run with rootful podman (docs/container.md says why each choice):
# 1. The base image: `debootstrap --variant=minbase` of the suite the runtime stage's
#    `FROM debian:<suite>-slim` names, made slim as debian:*-slim is, imported under that name into
#    a podman store of the check's own (.build/container/storage; registries are never asked:
#    --pull=never). Kept there: a second run skips this (remade after 30 days or a recipe change).
# 2. The binary: the Dockerfile's build stage needs the swift image, which cannot be pulled here, so
#    the check stands in for that stage with the release build `make test` already made
#    (.build/release-tests), relinked with -static-stdlib (what the build stage's
#    --static-swift-stdlib does; the objects are reused, the link takes seconds).
# 3. The image: a Containerfile generated in .build/container/context, a stand-in build stage that
#    puts that binary where the runtime stage copies it from, then the Dockerfile's runtime stage
#    verbatim (the Dockerfile stays the source of truth: its apt-get line, user, env, HEALTHCHECK,
#    entrypoint are what runs). Docker image format, so the HEALTHCHECK is kept.
# 4. A container of it with policies/example.yaml mounted read-only, its two ports published on
#    127.0.0.1 only, locked down as deploy/kubernetes runs it (read-only root, no capabilities);
#    `podman healthcheck run` (the image's HEALTHCHECK) until healthy; a session minted by the
#    image's own `pushwarden dev-token`; a registration (forwarded) and the same one
#    again (unchanged) through the published port; podman stop must end it with exit 0; then the
#    container is removed.
# Every step is bounded by a timeout; a step that is refused fails the check with its command and
# error. Podman runs with runc (crun refuses a hybrid cgroup layout) and explicit rlimits within
# this shell's hard limits (a sandbox without CAP_SYS_RESOURCE refuses podman's defaults).
#   CONTAINER_BINARY=path      put this binary in the image (must link the Swift runtime statically)
#   CONTAINER_RUNTIME=crun     another OCI runtime than runc
#   CONTAINER_MIRROR=url       Debian mirror for debootstrap and the image's apt (deb.debian.org)
#   DOCKERFILE=path            another Dockerfile (the failure trials in docs/container.md)
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

DOCKERFILE=${DOCKERFILE:-Dockerfile}
CACHE="$ROOT/.build/container"
STORE="$CACHE/storage"
CONTEXT="$CACHE/context"
MIRROR=${CONTAINER_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${CONTAINER_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
IMAGE=localhost/pushwarden:container-check
NAME="pushwarden-container-check-$$"
LABEL=org.pushwarden.check=container-run
BASE_MAX_AGE_DAYS=30
started=$SECONDS

sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
# curl and python3 talk to the container; podman (conmon, CNI plugins) with runc, iptables for the
# CNI bridge's published ports; debootstrap makes the base; binutils for readelf.
ensure_apt podman runc debootstrap curl openssl python3 binutils iptables

say() { printf -- '-- %s (%d s)\n' "$*" "$((SECONDS - started))"; }

# run_step STEP COMMAND...: runs COMMAND (already bounded by the caller's timeout); on failure
# prints the step, the command and its output, and fails the check.
refused_log="$CACHE/last-step.log"
mkdir -p "$CACHE"
run_step() {
  local step=$1; shift
  local rc=0
  "$@" >"$refused_log" 2>&1 || rc=$?
  if ((rc)); then
    echo "FAIL: refused: $step" >&2
    echo "  command: $*" >&2
    echo "  exit: $rc; output (last 25 lines):" >&2
    tail -n 25 "$refused_log" | sed 's/^/    /' >&2
    exit 1
  fi
}

# The check's own podman: its own store and run root (nothing it imports or builds reaches the
# machine's images), runc, cgroupfs (no systemd needed), events in a file.
RUNROOT="/run/pushwarden-container-check-$(printf '%s' "$STORE" | sha256sum | cut -c1-12)"
PM=("${sudo_cmd[@]}" podman --root "$STORE" --runroot "$RUNROOT" --storage-driver overlay
    --runtime "${CONTAINER_RUNTIME:-runc}" --cgroup-manager cgroupfs --events-backend file)
# rlimits inside this shell's hard limits (podman's defaults, nofile 1048576 and nproc above
# pid_max, need CAP_SYS_RESOURCE); nproc also at most pid_max, the most podman can pass on.
hard_nofile=$(ulimit -Hn); [[ "$hard_nofile" == unlimited || "$hard_nofile" -gt 1048576 ]] && hard_nofile=1048576
hard_nproc=$(ulimit -Hu); pid_max=$(cat /proc/sys/kernel/pid_max)
[[ "$hard_nproc" == unlimited || "$hard_nproc" -gt "$pid_max" ]] && hard_nproc=$pid_max
ULIMITS=(--ulimit "nofile=$hard_nofile:$hard_nofile" --ulimit "nproc=$hard_nproc:$hard_nproc")

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # The container this run started (by its name); the store is the check's cache and stays.
  timeout 60 "${PM[@]}" rm -f -t 3 "$NAME" >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- the Dockerfile's runtime stage
say "runtime stage of $DOCKERFILE"
# The final stage's text from its FROM line on, verbatim (comments and continuations kept).
runtime_stage_text=$(/usr/bin/python3 - "$DOCKERFILE" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines(keepends=True)
starts, joined = [], ""
for i, line in enumerate(lines):
    if not joined and line.lstrip().startswith("#"):
        continue
    if not joined and line.split()[:1] and line.split()[0].upper() == "FROM":
        starts.append(i)
    joined = line.rstrip("\n").endswith("\\")
print("".join(lines[starts[-1]:]) if starts else "", end="")
PY
)
[[ -n "$runtime_stage_text" ]] || { echo "FAIL: no FROM stage in $DOCKERFILE" >&2; exit 1; }
from_line=$(head -n1 <<<"$runtime_stage_text")
base_ref=$(awk '{print $2}' <<<"$from_line")
if [[ ! "$base_ref" =~ ^(docker\.io/)?(library/)?debian:([a-z]+)-slim$ ]]; then
  echo "FAIL: the runtime stage is FROM $base_ref; this check stands in only for debian:<suite>-slim" >&2
  exit 1
fi
suite=${BASH_REMATCH[3]}
base_ref=docker.io/library/debian:$suite-slim
# What the runtime stage copies from other stages: the check stands in for the binary only.
mapfile -t copies < <(grep -E '^COPY[[:space:]]+--from=' <<<"$runtime_stage_text" || true)
if ((${#copies[@]} != 1)); then
  echo "FAIL: the runtime stage has ${#copies[@]} COPY --from lines; the check stands in for exactly one (the binary):" >&2
  printf '  %s\n' "${copies[@]}" >&2
  exit 1
fi
read -r _ from_flag binary_src _ extra <<<"${copies[0]}"
build_stage=${from_flag#--from=}
if [[ -n "${extra:-}" || "$(basename "$binary_src")" != pushwarden ]]; then
  echo "FAIL: the runtime stage's '${copies[0]}' copies more than the pushwarden binary; the check cannot stand in for it" >&2
  exit 1
fi

# ---------------------------------------------------------------- the binary
say "binary"
mkdir -p "$CONTEXT"
binary="$CONTEXT/pushwarden"
rm -f "$binary"
# relink SCRATCH: the pushwarden link command from SCRATCH's llbuild manifest, with -static-stdlib
# and the output in the build context.
relink() {
  local manifest="$1/release.yaml"
  [[ -f "$manifest" ]] || return 1
  /usr/bin/python3 - "$manifest" "$binary" <<'PY' >"$CACHE/link-args" || return 1
import json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r'^  "C\.pushwarden-[^"]*-release\.exe":\n(?:    .*\n)*?    args: (\[.*\])$', text, re.M)
if not m:
    sys.exit("no pushwarden link command in " + sys.argv[1])
args = json.loads(m.group(1))
args[args.index("-o") + 1] = sys.argv[2]
args.insert(1, "-static-stdlib")
sys.stdout.write("\0".join(args))
PY
  timeout 300 xargs -0 -a "$CACHE/link-args" sh -c 'exec "$@"' sh
}
if [[ -n "${CONTAINER_BINARY:-}" ]]; then
  cp "$CONTAINER_BINARY" "$binary"
  binary_from="CONTAINER_BINARY=$CONTAINER_BINARY"
elif [[ -x .build/release-tests/release/pushwarden ]] && relink .build/release-tests; then
  binary_from="make test's release build (.build/release-tests), relinked with -static-stdlib"
else
  # Run on its own (no make test before it): the release build the soak also uses, then the same relink.
  ensure_apt pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev
  timeout 1800 swift build -q -c release --product pushwarden
  relink .build || { echo "FAIL: cannot relink .build's release pushwarden with -static-stdlib" >&2; exit 1; }
  binary_from="swift build -c release (.build), relinked with -static-stdlib"
fi
[[ -x "$binary" ]] || { echo "FAIL: no binary at $binary" >&2; exit 1; }
if readelf -d "$binary" | grep -E '\(NEEDED\).*\[lib(swift|dispatch|BlocksRuntime|Foundation)' >&2; then
  echo "FAIL: $binary links the Swift runtime dynamically (above); the runtime image has none" >&2
  exit 1
fi
echo "binary: $binary_from"

# ---------------------------------------------------------------- the base image
say "base image $base_ref (debootstrap --variant=minbase $suite)"
# The recipe below, as a label on the base: a changed recipe (or mirror) remakes the base.
base_recipe="2 $suite $MIRROR $SECURITY_MIRROR"
base_state=$(timeout 60 "${PM[@]}" image inspect \
  --format '{{.Created.Unix}} {{index .Labels "org.pushwarden.check.base-recipe"}}' "$base_ref" 2>/dev/null || true)
base_created=${base_state%% *}
if [[ -z "$base_created" || "${base_state#* }" != "$base_recipe" ]] ||
   (( $(date +%s) - base_created > BASE_MAX_AGE_DAYS * 86400 )); then
  rootfs="$CACHE/rootfs"
  "${sudo_cmd[@]}" rm -rf "$rootfs"
  run_step "debootstrap --variant=minbase $suite" \
    timeout 600 "${sudo_cmd[@]}" debootstrap --variant=minbase "$suite" "$rootfs" "$MIRROR"
  # What makes debian:*-slim out of a minbase root (debuerreotype's minimizing config and slimify),
  # so the runtime stage's apt-get sees what it sees there: deb822 sources with the suite, its
  # updates and security; apt drops downloaded packages after each install, keeps its lists
  # compressed and fetches no translations; dpkg installs no documentation, man pages or locales
  # (copyright files kept), and those already installed are removed; services never start.
  put() { "${sudo_cmd[@]}" tee "$rootfs/$1" >/dev/null; }
  "${sudo_cmd[@]}" rm -f "$rootfs/etc/apt/sources.list"
  put etc/apt/sources.list.d/debian.sources <<EOF
Types: deb
URIs: $MIRROR
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
  put etc/apt/apt.conf.d/docker-clean <<EOF
DPkg::Post-Invoke { $clean };
APT::Update::Post-Invoke { $clean };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::GzipIndexes "true";' | put etc/apt/apt.conf.d/docker-gzip-indexes
  echo 'Acquire::Languages "none";' | put etc/apt/apt.conf.d/docker-no-languages
  echo 'Apt::AutoRemove::SuggestsImportant "false";' | put etc/apt/apt.conf.d/docker-autoremove-suggests
  echo force-unsafe-io | put etc/dpkg/dpkg.cfg.d/docker-apt-speedup
  slim_paths=(/usr/share/doc /usr/share/groff /usr/share/info /usr/share/linda /usr/share/lintian/overrides
              /usr/share/locale /usr/share/man)
  { printf 'path-exclude %s/*\n' "${slim_paths[@]}"; echo 'path-include /usr/share/doc/*/copyright'; } |
    put etc/dpkg/dpkg.cfg.d/docker
  for d in "${slim_paths[@]}"; do
    [[ -d "$rootfs$d" ]] || continue
    "${sudo_cmd[@]}" find "$rootfs$d" -mindepth 1 \( -type f -o -type l \) ! -path "$rootfs/usr/share/doc/*/copyright" -delete
    "${sudo_cmd[@]}" find "$rootfs$d" -mindepth 1 -type d -empty -delete
  done
  printf '#!/bin/sh\nexit 101\n' | put usr/sbin/policy-rc.d
  "${sudo_cmd[@]}" chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
  "${sudo_cmd[@]}" find "$rootfs/var/cache/apt" "$rootfs/var/lib/apt/lists" -type f -delete
  import_base() {
    "${sudo_cmd[@]}" tar -C "$rootfs" --numeric-owner -c . |
      timeout 300 "${PM[@]}" import --change 'CMD ["bash"]' \
        --change "LABEL org.pushwarden.check.base-recipe=\"$base_recipe\"" - "$base_ref"
  }
  run_step "import the root as $base_ref" import_base
  "${sudo_cmd[@]}" rm -rf "$rootfs"
else
  echo "base: kept from $(date -u -d "@$base_created" +%FT%TZ) (rm -rf $CACHE to remake it)"
fi

# ---------------------------------------------------------------- the image
say "image $IMAGE"
# Left by an interrupted run of this check (its own store only).
mapfile -t stale < <(timeout 60 "${PM[@]}" ps -a -q --filter "label=$LABEL" 2>/dev/null || true)
((${#stale[@]} == 0)) || timeout 60 "${PM[@]}" rm -f -t 0 "${stale[@]}" >/dev/null 2>&1 || true
containerfile="$CONTEXT/Containerfile"
{
  echo "# Generated by scripts/checks/container-run.check.sh: a stand-in for the '$build_stage' stage,"
  echo "# then the runtime stage of $DOCKERFILE verbatim."
  echo "FROM scratch AS $build_stage"
  echo "COPY pushwarden $binary_src"
  echo
  printf '%s\n' "$runtime_stage_text"
} >"$containerfile"
# --format docker: the OCI format has no HEALTHCHECK (podman drops it with a warning).
run_step "podman build (the runtime stage)" timeout 600 "${PM[@]}" build --pull=never --format docker \
  "${ULIMITS[@]}" --label "$LABEL" -f "$containerfile" -t "$IMAGE" "$CONTEXT"
# The previous run's image, now untagged (the new one's layers stay: the next build reuses them).
timeout 120 "${PM[@]}" image prune -f >/dev/null 2>&1 || true
# The image keeps the Dockerfile's HEALTHCHECK, user, entrypoint and command.
want_health=$(/usr/bin/python3 -c '
import json, re, sys
m = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])\s*$", sys.stdin.read().replace("\\\n", " "), re.M)
print(json.dumps(["CMD"] + json.loads(m.group(1))) if m else "")' <<<"$runtime_stage_text")
got_health=$( (timeout 60 "${PM[@]}" image inspect --format '{{json .HealthCheck}}' "$IMAGE" || true) |
  /usr/bin/python3 -c 'import json, sys; t = sys.stdin.read().strip(); h = json.loads(t) if t else None
print(json.dumps(h["Test"]) if h and h.get("Test") else "none")')
if [[ -z "$want_health" || "$(tr -d ' ' <<<"$got_health")" != "$(tr -d ' ' <<<"$want_health")" ]]; then
  echo "FAIL: the image's HEALTHCHECK is $got_health, the Dockerfile's ${want_health:-missing}" >&2
  exit 1
fi
image_user=$(timeout 60 "${PM[@]}" image inspect --format '{{.Config.User}}' "$IMAGE")
want_uid=${image_user%%:*}
if [[ -z "$want_uid" || "$want_uid" == 0 || "$want_uid" == root ]]; then
  echo "FAIL: the image runs as root (USER '${image_user}')" >&2
  exit 1
fi
echo "image: healthcheck $got_health, user $image_user"

# ---------------------------------------------------------------- a container
say "container $NAME"
port=$(free_port)
admin_port=$(free_port)
while [[ "$admin_port" == "$port" ]]; do admin_port=$(free_port); done
# The policy's only secret, passed by name (not on the command line).
PUSHWARDEN_DEMO_SESSION_SECRET=$(openssl rand -hex 32)
export PUSHWARDEN_DEMO_SESSION_SECRET
# Locked down as deploy/kubernetes runs it: read-only root (no tmpfs added), no capabilities, no
# privilege escalation, the runtime's default seccomp profile.
run_step "podman run (the image, example policy)" timeout 120 "${PM[@]}" run -d --name "$NAME" --label "$LABEL" \
  --read-only --read-only-tmpfs=false --cap-drop ALL --security-opt no-new-privileges \
  "${ULIMITS[@]}" -p "127.0.0.1:$port:8080" -p "127.0.0.1:$admin_port:9090" \
  -v "$ROOT/policies/example.yaml:/etc/pushwarden/policy.yaml:ro" \
  -e PUSHWARDEN_DEMO_SESSION_SECRET "$IMAGE"
container_log() { timeout 30 "${PM[@]}" logs "$NAME" 2>&1 | tail -n 20 | sed 's/^/    /' >&2 || true; }

say "HEALTHCHECK"
health=""
deadline=$((SECONDS + 60))
while ((SECONDS < deadline)); do
  state=$(timeout 30 "${PM[@]}" inspect --format '{{.State.Status}}' "$NAME" 2>&1 || true)
  if [[ "$state" != running ]]; then
    echo "FAIL: the container is $state, not running; its log:" >&2
    container_log
    exit 1
  fi
  if timeout 30 "${PM[@]}" healthcheck run "$NAME" >"$CACHE/healthcheck.out" 2>&1; then
    health=$(timeout 30 "${PM[@]}" inspect --format '{{.State.Health.Status}}' "$NAME" 2>&1 || true)
    [[ "$health" == healthy ]] && break
  fi
  sleep 0.5
done
if [[ "$health" != healthy ]]; then
  echo "FAIL: the HEALTHCHECK did not report healthy within 60 s; podman healthcheck run said: $(head -c 300 "$CACHE/healthcheck.out")" >&2
  echo "  the container's health state (the last check's output):" >&2
  timeout 30 "${PM[@]}" inspect --format '{{json .State.Health}}' "$NAME" | /usr/bin/python3 -c '
import json, sys
h = json.load(sys.stdin) or {}
log = h.get("Log") or [{}]
print("    status %s, failing streak %s, last exit %s: %s" % (h.get("Status"), h.get("FailingStreak"),
      log[-1].get("ExitCode"), (log[-1].get("Output") or "").strip()))' >&2 || true
  echo "  its log:" >&2
  container_log
  exit 1
fi
user_in=$(timeout 30 "${PM[@]}" exec "$NAME" cat /proc/1/status | awk '/^Uid:/ {print $2}')
echo "healthy; the sidecar runs as uid $user_in"
[[ "$user_in" == "$want_uid" ]] || { echo "FAIL: the sidecar runs as uid $user_in, not the image's $want_uid" >&2; exit 1; }

say "registration"
token=$(timeout 30 "${PM[@]}" exec "$NAME" /usr/local/bin/pushwarden dev-token \
  --policy /etc/pushwarden/policy.yaml --app demo --contact container-check 2>"$CACHE/dev-token.err") || {
  echo "FAIL: pushwarden dev-token in the container:" >&2; sed 's/^/    /' "$CACHE/dev-token.err" >&2; exit 1; }
apns=$(printf 'ab%.0s' {1..32})
register() {
  rm -f "$CACHE/register.body"
  curl -sS -m 10 -o "$CACHE/register.body" -w '%{http_code}' -X POST "http://127.0.0.1:$port/v1/apps/demo/installations" \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "{\"platform\":\"ios\",\"push_token\":\"$apns\",\"app_version\":\"1.0.0\"}"
}
# expect_answer WANT_CODE CODE OUTCOME: the answer's status (202, openapi.yaml) and JSON (a request
# id, the voyado upstream's outcome).
expect_answer() {
  local want_code=$1 code=$2 want=$3
  if [[ "$code" != "$want_code" ]] || ! /usr/bin/python3 -c '
import json, sys
try:
    body = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit("no JSON answer: %s" % e)
assert isinstance(body.get("request_id"), str) and body["request_id"], "no request_id"
assert body.get("upstreams") == {"voyado": sys.argv[2]}, "upstreams %r" % body.get("upstreams")
' "$CACHE/register.body" "$want"; then
    echo "FAIL: registration answered $code, expected $want_code with upstreams {voyado: $want}: $(cat "$CACHE/register.body" 2>/dev/null)" >&2
    container_log
    exit 1
  fi
  echo "registration: $code $(cat "$CACHE/register.body")"
}
expect_answer 202 "$(register)" forwarded
expect_answer 202 "$(register)" unchanged

say "stop"
run_step "podman stop" timeout 60 "${PM[@]}" stop -t 10 "$NAME"
exit_code=$(timeout 30 "${PM[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")
if [[ "$exit_code" != 0 ]]; then
  echo "FAIL: the sidecar exited $exit_code on podman stop (SIGTERM, then SIGKILL after 10 s); its log:" >&2
  container_log
  exit 1
fi
run_step "podman rm" timeout 60 "${PM[@]}" rm "$NAME"
echo "container-run: $base_ref stand-in (debootstrap minbase), runtime stage built, healthy, registration forwarded then unchanged; stopped (exit $exit_code) and removed ($((SECONDS - started)) s)"
