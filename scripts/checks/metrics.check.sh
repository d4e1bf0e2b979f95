#!/usr/bin/env bash
# Metrics people can use: a live sidecar's /metrics, after a few real client requests, passes
# `promtool check metrics` (the exposition format and Prometheus' naming lint), and every metric
# each query of the Grafana dashboards uses (deploy/grafana/*.json, their template variables
# included) is a family that /metrics exports (a histogram by its _bucket, _sum or _count),
# except those NOT_YET names below (none today), which a panel marked "(not built yet)" may
# query before they are built; once one is exported this check fails until it leaves
# the list. The sidecar runs on a Redis of its own with its upstream queued, so the outbox's
# metrics are exported too.
# DASHBOARDS="file..." checks other dashboards (the failure trials do).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

NOT_YET=()
MARKER="(not built yet)"
DASHBOARDS=${DASHBOARDS:-$(ls deploy/grafana/*.json)}

ensure_apt curl openssl python3 python3-venv redis-server
# What `swift build --product pushwarden` links (the C libraries' -dev packages).
ensure_apt pkg-config libmicrohttpd-dev libcurl4-openssl-dev libhiredis-dev libssl-dev libyaml-dev
ensure_venv promql-parser==0.11.0

# promtool: the one on PATH, else the one in Debian's prometheus package, unpacked under .build
# rather than installed (installing it would start a Prometheus server on :9090, the admin
# listener's default port; promtool itself is one static binary).
PROMTOOL=$(command -v promtool || true)
if [[ -z "$PROMTOOL" ]]; then
  PROMTOOL="$ROOT/.build/tools/prometheus/usr/bin/promtool"
  if [[ ! -x "$PROMTOOL" ]]; then
    downloads="$ROOT/.build/tools/downloads"
    mkdir -p "$downloads"
    if ! (cd "$downloads" && timeout 300 apt-get download -q prometheus >/dev/null 2>&1); then
      sudo_cmd=()
      [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
      DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get update -qq
      (cd "$downloads" && timeout 300 apt-get download -q prometheus >/dev/null 2>&1)
    fi
    dpkg-deb -x "$(ls -t "$downloads"/prometheus_*.deb | sed -n 1p)" "$ROOT/.build/tools/prometheus"
  fi
fi
"$PROMTOOL" --version | sed -n 1p

work=$(mktemp -d)
pid=""
redis_pid=""
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  [[ -n "$redis_pid" ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

timeout 900 swift build -q --product pushwarden
export PUSHWARDEN_DEMO_SESSION_SECRET
PUSHWARDEN_DEMO_SESSION_SECRET=$(openssl rand -hex 32)
port=$(free_port)
admin=$(free_port)
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
# The example policy with its upstream queued: the outbox's series exist from start.
sed 's/delivery: sync /delivery: queued/' policies/example.yaml >"$work/policy.yaml"
grep -q 'delivery: queued' "$work/policy.yaml" || { echo "FAIL: could not queue the example's upstream" >&2; exit 1; }
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null && break; sleep 0.05; done
.build/debug/pushwarden serve --policy "$work/policy.yaml" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" \
  --redis "redis://127.0.0.1:$redis_port" 2>"$work/sidecar.log" &
pid=$!
wait_http "http://127.0.0.1:$admin/healthz" || { cat "$work/sidecar.log" >&2; exit 1; }

token=$(.build/debug/pushwarden dev-token --policy policies/example.yaml --app demo --contact alice)
apns=$(printf 'ab%.0s' {1..32})
client() {  # client EXPECTED_STATUS PATH BODY [TOKEN]
  local status
  status=$(curl -s -m 5 -o "$work/answer" -w '%{http_code}' -X POST "http://127.0.0.1:$port/v1/apps/demo$2" \
    -H "Authorization: Bearer ${4:-$token}" -H 'Content-Type: application/json' -d "$3")
  [[ "$status" == "$1" ]] || { echo "FAIL: POST $2 answered $status, not $1: $(cat "$work/answer")" >&2; exit 1; }
}
client 202 /installations "{\"platform\":\"ios\",\"push_token\":\"$apns\",\"app_version\":\"1.0.0\"}"   # queued
sleep 1  # delivered by the outbox worker
client 202 /installations "{\"platform\":\"ios\",\"push_token\":\"$apns\",\"app_version\":\"1.0.0\"}"   # unchanged: a dedupe hit
client 202 /installations/unregister "{\"push_token\":\"$apns\"}"
client 400 /installations '{"platform":"ios","push_token":"abc"}'
client 401 /installations "{\"platform\":\"ios\",\"push_token\":\"$apns\"}" not-a-session
sleep 2.5  # the outbox sampler's first pass
curl -s -m 5 -f -o "$work/metrics" "http://127.0.0.1:$admin/metrics"
grep -q '^pushwarden_outbox_depth{' "$work/metrics" || { echo "FAIL: /metrics has no outbox series" >&2; exit 1; }

failed=0
echo "-- promtool check metrics"
if ! "$PROMTOOL" check metrics <"$work/metrics"; then
  echo "FAIL: promtool finds the problems above in /metrics" >&2
  failed=1
fi
# promtool lints only families that have samples; a family without any yet (a counter of rare
# events) gets one zero sample here so that its name and type are linted too.
/usr/bin/python3 - "$work/metrics" >"$work/metrics-completed" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
lines = text.splitlines()
sampled = {re.match(r"[^{ ]+", l).group(0) for l in lines if l and not l.startswith("#")}
out = []
for line in lines:
    out.append(line)
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if not m:
        continue
    name, kind = m.groups()
    series = {"histogram": [name + '_bucket{le="+Inf"}', name + "_sum", name + "_count"],
              "summary": [name + "_sum", name + "_count"]}.get(kind, [name])
    if not any(re.match(r"[^{]+", s).group(0) in sampled for s in series):
        out.extend(f"{s} 0" for s in series)
        print(f"(no samples yet: {name}, linted with a zero sample)", file=sys.stderr)
print("\n".join(out))
PY
if ! "$PROMTOOL" check metrics <"$work/metrics-completed"; then
  echo "FAIL: promtool finds the problems above once every family has a sample" >&2
  failed=1
fi

echo "-- dashboards against /metrics: ${DASHBOARDS//$'\n'/ }"
# shellcheck disable=SC2086
"$VENV/bin/python" - "$work/metrics" "$MARKER" "${NOT_YET[*]}" $DASHBOARDS <<'PY' || failed=1
import json, re, sys
import promql_parser as pq

metrics_file, marker, not_yet, dashboards = sys.argv[1], sys.argv[2], set(sys.argv[3].split()), sys.argv[4:]
problems = []

# What /metrics exports: every family declared by # TYPE, with the series names it stands for.
exported, samples = {}, set()
for line in open(metrics_file):
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if m:
        name, kind = m.groups()
        names = {name}
        if kind == "histogram":
            names = {name + s for s in ("_bucket", "_sum", "_count")}
        elif kind == "summary":
            names = {name, name + "_sum", name + "_count"}
        for n in names:
            exported[n] = name
    elif line.strip() and not line.startswith("#"):
        samples.add(re.match(r"[^{ ]+", line).group(0))

# The requests the check made show up.
def expect_sample(pattern, why):
    if not re.search(pattern, open(metrics_file).read(), re.M):
        problems.append(f"/metrics has no {why} ({pattern})")
expect_sample(r'^pushwarden_requests_total\{app="demo",route="register",status="202"\} 2$', "two accepted registrations")
expect_sample(r'^pushwarden_requests_total\{app="demo",route="register",status="401"\} 1$', "refused session")
expect_sample(r'^pushwarden_dedupe_hits_total\{app="demo",upstream="voyado"\} 1$', "dedupe hit")
expect_sample(r'^pushwarden_auth_failures_total\{app="demo"\} 1$', "auth failure")
expect_sample(r'^pushwarden_upstream_circuit_state\{app="demo",upstream="voyado"\} 0$', "closed circuit from the start")
expect_sample(r'^pushwarden_upstream_latency_seconds_bucket\{upstream="voyado",le="\+Inf"\} 2$', "latency of the two upstream calls")

# Grafana's own variables stand for durations; a $variable elsewhere is inside a string.
def promql(expr):
    return re.sub(r"\$\{?__(rate_interval|interval|range)(_ms|_s)?\}?", "5m", expr)

def selectors(node, out):
    if isinstance(node, pq.VectorSelector):
        if node.name is None:
            problems.append(f"a selector without a plain metric name cannot be checked: {node}")
        else:
            out.add(node.name)
        return
    for attr in ("vector_selector", "expr", "lhs", "rhs", "param"):
        child = getattr(node, attr, None)
        if isinstance(child, pq.Expr) or type(child).__module__ == "promql_parser":
            selectors(child, out)
    for child in getattr(node, "args", None) or []:
        selectors(child, out)

def queries(dashboard):
    """(where, panel title or None, PromQL or label_values metric)"""
    def walk(panels):
        for p in panels:
            yield from ((p, t) for t in p.get("targets", []))
            yield from walk(p.get("panels", []))
    for panel, target in walk(dashboard.get("panels", [])):
        if "expr" in target:
            yield f'panel "{panel.get("title")}" {target.get("refId")}', panel, target["expr"]
    for var in dashboard.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if var.get("type") == "query" and q:
            m = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*\w+\s*\)\s*", q)
            yield f'variable "{var.get("name")}"', None, m.group(1) if m else q

used_not_yet = set()
for path in dashboards:
    try:
        dashboard = json.load(open(path))
    except ValueError as e:
        problems.append(f"{path}: not JSON: {e}")
        continue
    if not 36 <= dashboard.get("schemaVersion", 0) <= 41:
        problems.append(f"{path}: schemaVersion {dashboard.get('schemaVersion')} is not 36-41")
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus" for i in dashboard.get("__inputs", [])):
        problems.append(f"{path}: no DS_PROMETHEUS datasource input")
    count = 0
    for where, panel, expr in queries(dashboard):
        count += 1
        try:
            ast = pq.parse(promql(expr))
        except Exception as e:
            problems.append(f"{path}: {where}: not PromQL: {e}")
            continue
        names = set()
        selectors(ast, names)
        if panel is not None and panel.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
            problems.append(f"{path}: {where}: datasource is not ${{DS_PROMETHEUS}}")
        later = sorted(n for n in names if n in not_yet)
        used_not_yet.update(later)
        title = panel.get("title", "") if panel else ""
        if panel is not None and bool(later) != (marker in title):
            problems.append(f'{path}: {where}: uses {later or "only exported metrics"} but its title '
                            f'{"lacks" if later else "has"} "{marker}"')
        for n in sorted(names):
            if n in not_yet:
                if n in exported:
                    problems.append(f"{path}: {where}: {n} is exported now: take it off NOT_YET and drop \"{marker}\" from its panel")
            elif n not in exported:
                problems.append(f"{path}: {where}: {n} is not exported by /metrics")
    if count == 0:
        problems.append(f"{path}: no queries found")
    print(f"{path}: {count} queries checked")

print("not exported yet (panels marked \"%s\"): %s" % (marker, ", ".join(sorted(not_yet)) or "none"))
for n in sorted(not_yet - used_not_yet):
    print(f"note: NOT_YET names {n}, which no dashboard uses")
for p in problems:
    print("FAIL:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY

if ((failed)); then
  echo "metrics: FAILED" >&2
  exit 1
fi
echo "metrics: promtool clean; every dashboard query's metric is exported (or listed as not yet built)"
