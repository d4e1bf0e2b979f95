#!/usr/bin/env bash
# PushWarden benchmark: nginx baselines and PushWarden's hot paths side by side in one run, on
# loopback only, every load bounded in time. Prints one table with PASS/FAIL per bar (issue 3)
# and writes it to bench-out/last.txt. docs/benchmarks.md summarises the latest run; the dated
# history is docs/benchmarks-log.md.
#
#   make bench                                  # the full run (about 3 minutes)
#   DURATION=5s SOAK=10s SCENARIOS=hit scripts/bench.sh   # a quick look at one path
#   DURATION=5s SCENARIOS=introspect scripts/bench.sh      # P1 with an introspected session beside HS256
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH

DURATION=${DURATION:-10s}              # each throughput scenario
SOAK=${SOAK:-60s}                      # the memory-flatness run at P1 load
LATENCY_MS=${LATENCY_MS:-50}           # the mock upstream's answer delay
POOL=${POOL:-10000}                    # distinct sessions and push tokens
BYTES_POOL=${BYTES_POOL:-100000}            # distinct installations the Redis-bytes row registers
REUSED_POOL=${REUSED_POOL:-40000}           # most ES256 sessions the sessions-reused row cycles through (each ~10 times)
HIT_CONNECTIONS=${HIT_CONNECTIONS:-64}
FORWARD_CONNECTIONS=${FORWARD_CONNECTIONS:-512}
IDLE_CONNECTIONS=${IDLE_CONNECTIONS:-1000}
export WRK_THREADS=${WRK_THREADS:-2}
SCENARIOS=${SCENARIOS:-hit,es256,reused,introspect,forwarded,erase,queued,import,tail,memory,bytes}   # also: cluster
PW_FLAGS=${PW_FLAGS:-}                 # extra flags for pushwarden serve (e.g. --threads 1)
# Another pushwarden binary (an earlier commit's release build) served beside this one on the same
# Redis and mock: P1 and P2 are then measured against both in the same run ("before/after" rows).
PW_BASELINE=${PW_BASELINE:-}
# The baseline's policy: policy-base (app bench only, for builds before the outbox and introspect),
# or policy (the same as this build's: BASE_POLICY=policy with PW_BASELINE=<this binary> measures
# how far two identical processes differ, the noise floor of a this/base ratio).
BASE_POLICY=${BASE_POLICY:-policy-base}
# PW_THIS=<binary>: serve that build as "this" too (with the baseline's policy), for a before/after of
# two earlier commits side by side; only the hit and forwarded scenarios then make sense.
PW_THIS=${PW_THIS:-}
# PW_CLUSTER=<binary>: serve that build as the cluster sidecar (with PW_THIS, an earlier build's
# cluster/this ratio).
PW_CLUSTER=${PW_CLUSTER:-}
PERF=${PERF:-}                         # PERF=1: perf-record each PushWarden and the floor during P1 and P2 (bench-out/perf-*.data)
# STATUSES=1: the registration rows also count their answers by status (in bench-out/failed-*.txt for
# a row with failures: a 429 from the limits is not a 503 from the store); costs wrk a Lua call each.
# What PERF samples: CPU time by default; a uprobe (after `perf probe -x <libc> malloc`) counts
# allocations and where they are made (PERF_EVENT=probe_libc:malloc).
PERF_EVENT=${PERF_EVENT:-cpu-clock}
# HOLD=N: at the memory row, once RSS with the connections is read, write the sidecar's pid to
# bench-out/pushwarden.pid and wait N seconds, to read its heap (gdb's malloc_stats, /proc smaps).
HOLD=${HOLD:-}
RUNS=${RUNS:-1}                        # measure every scenario this many times in a row (make bench: 2)
# ROUNDS=N: after each run's rows, N rounds of short rows (ROUND_DURATION) of this build against
# the baseline and the cluster sidecar, alternating which goes first, for P1 and P2: the table then
# gives the median this/other ratio, its spread and the CPU per request of each (see
# docs/benchmarks-log.md: a single side-by-side row differs by up to 20% between two identical
# processes here).
ROUNDS=${ROUNDS:-0}
ROUND_DURATION=${ROUND_DURATION:-5s}
LIMIT_ROUNDS=${LIMIT_ROUNDS:-3}         # pairs of short P1 rows with and without rate limits (their price's median)
ES_ROUNDS=${ES_ROUNDS:-3}               # pairs of short P1 ES256 and ES256 floor rows (the bar's median)
INTRO_ROUNDS=${INTRO_ROUNDS:-3}         # pairs of short introspected and HS256 P1 rows (the bar's median)

work=$(mktemp -d /tmp/pushwarden-bench.XXXXXX)
results="$work/results-1.txt"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The sidecar's warnings stay for a look after the run (a row with failures).
  [[ -s $work/pushwarden.log ]] && mkdir -p bench-out && cp "$work/pushwarden.log" bench-out/pushwarden.log
  rm -rf "$work"
}
trap cleanup EXIT
want() { [[ ,$SCENARIOS, == *,$1,* ]]; }
fact() { echo "$1=$2" >>"$results"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

echo "building release..." >&2
for product in pushwarden mock-upstream bench-tool; do swift build -c release --product "$product" >&2; done
bin=$(swift build -c release --show-bin-path)

redis_port=$(free_port); mock_port=$(free_port); nginx_static=$(free_port); nginx_proxy=$(free_port)
pw_port=$(free_port); pw_admin=$(free_port); floor_port=$(free_port); base_port=$(free_port); base_admin=$(free_port)
queued_mock_port=$(free_port); pw2_port=$(free_port); pw2_admin=$(free_port); introspect_port=$(free_port)

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=($redis_pid)
# The same process serves app benchi's introspection endpoint (no latency: the app backend's own).
"$bin/mock-upstream" --port "$mock_port" --latency-ms "$LATENCY_MS" --key bench-key \
  --introspect-port "$introspect_port" --introspect-token bench-introspect-token >"$work/mock.log" 2>&1 &
mock_pid=$!
pids+=($mock_pid)

mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<CONF
worker_processes 2;
error_log $work/nginx/logs/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream mock { server 127.0.0.1:$mock_port; keepalive 512; }
  server { listen 127.0.0.1:$nginx_static; location / { return 202; } }
  server {
    listen 127.0.0.1:$nginx_proxy;
    location / {
      rewrite ^ /api/v1/acme/abc123/default/installations break;
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer bench-key";
    }
  }
}
CONF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
pids+=($nginx_pid)

secret=$(openssl rand -hex 32)
"$bin/bench-tool" tokens --alg HS256 --count "$POOL" --secret "$secret" --out "$work/sessions-hs256.txt"
# One ES256 key: P1 ES256 takes the first POOL sessions; the sessions-reused row a tenth of P1
# HS256's requests, up to REUSED_POOL.
"$bin/bench-tool" tokens --alg ES256 --count "$(( POOL > REUSED_POOL ? POOL : REUSED_POOL ))" --jwks "$work/jwks.json" --out "$work/sessions-es256-all.txt"
head -n "$POOL" "$work/sessions-es256-all.txt" >"$work/sessions-es256.txt"
"$bin/bench-tool" tokens --alg opaque --count "$POOL" --out "$work/sessions-opaque.txt"

"$bin/bench-tool" policy --mock-port "$mock_port" --jwks "$work/jwks.json" >"$work/policy-base.yaml"
# Apps benchq (a queued upstream) and benchi (introspected sessions) only for this build: a
# PW_BASELINE may predate the outbox and session type introspect.
"$bin/bench-tool" policy --mock-port "$mock_port" --jwks "$work/jwks.json" --queued-mock-port "$queued_mock_port" \
  --introspect-port "$introspect_port" --admin --reused --bytes --import-app >"$work/policy.yaml"
export BENCH_INTROSPECT_TOKEN=bench-introspect-token
export BENCH_ADMIN_TOKEN
BENCH_ADMIN_TOKEN=$(openssl rand -hex 32)

this_policy=policy
[[ -n $PW_THIS ]] && this_policy=$BASE_POLICY
BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key "${PW_THIS:-$bin/pushwarden}" serve --policy "$work/$this_policy.yaml" \
  --listen "127.0.0.1:$pw_port" --admin "127.0.0.1:$pw_admin" --redis "redis://127.0.0.1:$redis_port" --log-level warning $PW_FLAGS \
  2>"$work/pushwarden.log" &
pw_pid=$!
pids+=($pw_pid)
# `cluster`: three masters and three replicas of redis-server on loopback, and a second PushWarden
# on them (redis+cluster://), measured for P1 and P2 beside the one on a single Redis.
# CLUSTER_REPLICAS=0: three masters only. On this 2-core machine each replica replays every write
# of its master on the cores the sidecar and wrk need (in production replicas run elsewhere); the
# CPU lines show the masters' and the replicas' share either way.
CLUSTER_REPLICAS=${CLUSTER_REPLICAS:-1}
cluster_pid=0
cluster_node_pids=()
cluster_roles=()
cluster_port=$(free_port); cluster_admin=$(free_port)
if want cluster; then
  cluster_ports=()
  # The cluster bus listens 10,000 above each node's port: nodes need ports of 55535 or less,
  # with the bus port free too.
  for _ in $(seq 1 $(( 3 * (1 + CLUSTER_REPLICAS) ))); do
    cluster_ports+=("$(python3 -c 'import random, socket
while True:
    p = random.randint(20000, 55000)
    try:
        a = socket.socket(); a.bind(("127.0.0.1", p)); b = socket.socket(); b.bind(("127.0.0.1", p + 10000))
        a.close(); b.close(); print(p); break
    except OSError:
        pass')")
  done
  for p in "${cluster_ports[@]}"; do
    mkdir -p "$work/cluster-$p"
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --cluster-enabled yes --cluster-node-timeout 2000 \
      --cluster-config-file "$work/cluster-$p/nodes.conf" --dir "$work/cluster-$p" --daemonize no >"$work/cluster-$p/redis.log" 2>&1 &
    pids+=($!)
    cluster_node_pids+=($!)
  done
  for p in "${cluster_ports[@]}"; do wait_port "$p"; done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${cluster_ports[@]}") --cluster-replicas "$CLUSTER_REPLICAS" --cluster-yes >"$work/cluster-create.log" 2>&1
  for _ in $(seq 1 100); do
    redis-cli -p "${cluster_ports[0]}" cluster info | grep -q 'cluster_state:ok' && break
    sleep 0.1
  done
  for p in "${cluster_ports[@]}"; do cluster_roles+=("$(redis-cli -p "$p" role | head -1)"); done
  seeds=$(printf '127.0.0.1:%s,' "${cluster_ports[@]:0:3}")
  BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key "${PW_CLUSTER:-$bin/pushwarden}" serve --policy "$work/policy.yaml" \
    --listen "127.0.0.1:$cluster_port" --admin "127.0.0.1:$cluster_admin" --redis "redis+cluster://${seeds%,}" --log-level warning $PW_FLAGS \
    2>"$work/pushwarden-cluster.log" &
  cluster_pid=$!
  pids+=($cluster_pid)
fi
base_pid=0
if [[ -n $PW_BASELINE ]]; then
  BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key "$PW_BASELINE" serve --policy "$work/$BASE_POLICY.yaml" \
    --listen "127.0.0.1:$base_port" --admin "127.0.0.1:$base_admin" --redis "redis://127.0.0.1:$redis_port" --log-level warning $PW_FLAGS \
    2>"$work/baseline.log" &
  base_pid=$!
  pids+=($base_pid)
fi
# Not PushWarden: the same HTTP server, Redis and upstream client with none of its work (see
# Sources/BenchTool/Floor.swift), for the "(info)" rows that show what any path built on them reaches.
"$bin/bench-tool" floor --port "$floor_port" --redis "redis://127.0.0.1:$redis_port" \
  --upstream "http://127.0.0.1:$mock_port/api/v1/acme/abc123/default/installations" >"$work/floor.log" 2>&1 &
floor_pid=$!
pids+=($floor_pid)
for p in $redis_port $mock_port $introspect_port $nginx_static $nginx_proxy $pw_port $floor_port; do wait_port "$p"; done
[[ -n $PW_BASELINE ]] && wait_port "$base_port"
want cluster && wait_port "$cluster_port"

# run NAME URL CONNECTIONS DURATION [ENV=VALUE...]; LUA names the wrk script (none: plain GET)
run() {
  local name=$1 url=$2 conns=$3 duration=$4; shift 4
  local out="$work/$name.txt"
  local perf_pid= calls_before=
  [[ $name == pw_hit_* || $name == pw_tail ]] && calls_before=$(upstream_calls)
  [[ $name == cluster_hit_* ]] && calls_before=$(upstream_calls "$cluster_admin")
  # Redis's read events over P2 and the queued row (each a write of the sidecar's: a round trip).
  local reads_before=
  [[ $name == pw_forwarded || $name == pw_queued ]] && reads_before=$(redis_reads)
  # PERF=1: the hit and forward rows of this build, the baseline, the cluster sidecar and the floor.
  local perf_target=
  case $name in
    floor_hit_shape|floor_forward|floor_accept) perf_target=$floor_pid ;;
    pw_hit_hs256|pw_hit_nolimits|pw_hit_es256|pw_hit_reused|pw_forwarded|pw_queued) perf_target=$pw_pid ;;
    base_hit_hs256|base_forwarded) perf_target=$base_pid ;;
    cluster_hit_hs256|cluster_hit_nolimits|cluster_forwarded) perf_target=$cluster_pid ;;
  esac
  if [[ -n $PERF && -n $perf_target ]]; then
    mkdir -p bench-out
    perf record -q -e "$PERF_EVENT" -g -p "$perf_target" -o "bench-out/perf-${name#pw_}.data" -- sleep "${duration%s}" >/dev/null 2>&1 &
    perf_pid=$!
  fi
  env "$@" wrk -t"$WRK_THREADS" -c"$conns" -d"$duration" --latency ${LUA:+-s "$LUA"} "$url" >"$out" 2>&1 &
  local wrk_pid=$! seconds=${duration%s} window
  # CPU per process over the run minus its first and last second: who used the two cores.
  window=$(( seconds > 3 ? seconds - 2 : 1 ))
  sleep 1; local before; before=$(cpu_ticks "$wrk_pid")
  sleep "$window"; local after; after=$(cpu_ticks "$wrk_pid")
  wait "$wrk_pid" || true
  fact "cpu_$name" "$(cpu_used "$before" "$after" "$window")"
  local rps p50 p99 non2xx errors
  rps=$(awk '/Requests\/sec/ {print $2}' "$out")
  p50=$(awk '$1=="50%" {print $2}' "$out")
  p99=$(awk '$1=="99%" {print $2}' "$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$out"); non2xx=${non2xx:-0}
  errors=$(awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10}' "$out"); errors=${errors:-0}
  [[ -n $perf_pid ]] && { wait "$perf_pid" || true; }
  [[ -n $reads_before ]] && fact "${name}_redis_reads" "$(( $(redis_reads) - reads_before ))"
  if [[ -n $calls_before ]]; then
    local admin_port=$pw_admin
    [[ $name == cluster_hit_* ]] && admin_port=$cluster_admin
    fact "${name}_upstream_calls" "$(( $(upstream_calls "$admin_port") - calls_before ))"
  fi
  echo "$name|${rps:-0}|${p50:-?}|${p99:-?}|$non2xx|$errors" >>"$results"
  echo "  $name: ${rps:-0} req/s, p99 ${p99:-?}, failed $((non2xx + errors))" >&2
  # Which failures (connect, read, write, timeout; or the statuses): where to look next.
  if (( non2xx + errors > 0 )); then
    grep -E 'Socket errors|Non-2xx' "$out" | sed 's/^/    /' >&2 || true
    mkdir -p bench-out && cp "$out" "bench-out/failed-$name.txt"
  fi
}
# utime+stime ticks of each process taking part, as "name=ticks ..." (nginx: its workers).
# cpu_used BEFORE AFTER SECONDS: cores each process used between two cpu_ticks readings.
cpu_used() {
  python3 -c 'import sys
a = dict(x.split("=") for x in sys.argv[1].split())
b = dict(x.split("=") for x in sys.argv[2].split())
w = float(sys.argv[3])
print(" ".join(f"{k}={(int(b[k]) - int(a[k])) / 100 / w:.2f}" for k in b if k in a and int(b[k]) - int(a[k]) > w))' "$1" "$2" "$3"
}
cpu_ticks() {
  local out="" name pid
  ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
  for name in pushwarden:$pw_pid baseline:$base_pid cluster-pw:$cluster_pid redis:$redis_pid mock:$mock_pid floor:$floor_pid wrk:$1; do
    out+="${name%%:*}=$(ticks "${name#*:}") "
  done
  local workers=0
  for pid in $(pgrep -P "$nginx_pid"); do workers=$(( workers + $(ticks "$pid") )); done
  # The cluster's nodes, masters and replicas apart (a node's role as `cluster create` made it).
  local masters=0 replicas=0 index=0
  for pid in "${cluster_node_pids[@]}"; do
    if [[ ${cluster_roles[$index]} == master ]]; then masters=$(( masters + $(ticks "$pid") )); else replicas=$(( replicas + $(ticks "$pid") )); fi
    index=$(( index + 1 ))
  done
  out+="cluster-masters=$masters cluster-replicas=$replicas "
  # The machine as a whole: idle, and stolen by the hypervisor (a noisy neighbour shows here).
  echo "${out}nginx=$workers $(awk '/^cpu / {print "idle=" $5 + $6, "steal=" $9}' /proc/stat)"
}
# Upstream calls so far: a hit scenario that makes any measured misses, not hits.
upstream_calls() { curl -s "http://127.0.0.1:${1:-$pw_admin}/metrics" | awk '/^pushwarden_upstream_calls_total/ {s += $NF} END {print s + 0}'; }
# short_pairs PREFIX ROUNDS "NAME PORT APP SESSIONS" "NAME PORT APP SESSIONS": ROUNDS pairs of
# short hit rows (ROUND_DURATION) of two sides, alternating which goes first, named
# PREFIX_<NAME>_<run>_<round>; report.py takes the median pair's ratio (first side / second).
short_pairs() {
  local prefix=$1 rounds=$2 round side name port app sessions
  local sides=("$3" "$4")
  for round in $(seq 1 "$rounds"); do
    local order=("${sides[0]}" "${sides[1]}")
    (( round % 2 == 0 )) && order=("${sides[1]}" "${sides[0]}")
    for side in "${order[@]}"; do
      read -r name port app sessions <<<"$side"
      LUA=$register_lua run "${prefix}_${name}_${run_number}_$round" "http://127.0.0.1:$port" "$HIT_CONNECTIONS" "$ROUND_DURATION" \
        MODE=hit SESSIONS="$work/$sessions.txt" APP="$app"
    done
  done
}
# Calls to introspection endpoints so far: a warm-cache scenario that makes any measured misses.
introspection_calls() { curl -s "http://127.0.0.1:$pw_admin/metrics" | awk '/^pushwarden_introspection_calls_total/ {s += $NF} END {print s + 0}'; }
redis_reads() { redis-cli -p "$redis_port" INFO stats | tr -d '\r' | awk -F: '$1=="total_reads_processed" {print $2}'; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$pw_pid/status"; }
register_lua=scripts/bench/register.lua

# Every pooled token registered once, so the hit scenarios only ever hit (each call waits LATENCY_MS).
warm_seconds=$(( POOL * (LATENCY_MS + 5) / 256 / 1000 * 2 + 3 ))
echo "warming the dedupe cache (${warm_seconds}s per app)..." >&2
LUA=$register_lua run warmup_hs256 "http://127.0.0.1:$pw_port" 256 "${warm_seconds}s" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
want hit && LUA=$register_lua run warmup_nolimits "http://127.0.0.1:$pw_port" 256 "${warm_seconds}s" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=benchn
# Twice as long on the cluster: its forwards (and their inventory writes, three slots on three
# nodes) are slower, and a short warm-up leaves misses in the hit row.
want cluster && LUA=$register_lua run warmup_cluster "http://127.0.0.1:$cluster_port" 256 "$(( warm_seconds * 2 ))s" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
want cluster && want hit && LUA=$register_lua run warmup_cluster_nolimits "http://127.0.0.1:$cluster_port" 256 "$(( warm_seconds * 2 ))s" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=benchn
# The baseline may keep its dedupe entries under other keys: it warms its own.
[[ -n $PW_BASELINE ]] && LUA=$register_lua run warmup_baseline "http://127.0.0.1:$base_port" 256 "${warm_seconds}s" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
# App benchi: each pooled session introspected once (and its token registered), so its cache is warm.
# Twice as long: each first request also waits for its introspection, and a short warm-up left
# ~3% of the pool cold (306 misses measured in the first run).
want introspect && LUA=$register_lua run warmup_introspect "http://127.0.0.1:$pw_port" 256 "$(( warm_seconds * 2 ))s" MODE=hit SESSIONS="$work/sessions-opaque.txt" APP=benchi
want es256 && LUA=$register_lua run warmup_es256 "http://127.0.0.1:$pw_port" 256 "${warm_seconds}s" MODE=hit SESSIONS="$work/sessions-es256.txt" APP=benches
# Up to REUSED_POOL sessions, each registered once (the same rule as warm_seconds).
want reused && LUA=$register_lua run warmup_reused "http://127.0.0.1:$pw_port" 256 "$(( REUSED_POOL * (LATENCY_MS + 5) / 256 / 1000 * 2 + 3 ))s" MODE=hit SESSIONS="$work/sessions-es256-all.txt" APP=benchr

for run_number in $(seq 1 "$RUNS"); do
results="$work/results-$run_number.txt"
echo "run $run_number of $RUNS" >&2
fact hit_conns "$HIT_CONNECTIONS"
fact nproc "$(nproc)"
fact duration_seconds "${DURATION%s}"
fact fwd_conns "$FORWARD_CONNECTIONS"
if want hit; then
  LUA= run nginx_static "http://127.0.0.1:$nginx_static/" "$HIT_CONNECTIONS" "$DURATION"
  # Not bars: our HTTP server answering at once, then after one Redis GET on the loop: the
  # ceilings for any hit path built on them.
  LUA= run floor_inline "http://127.0.0.1:$floor_port/inline" "$HIT_CONNECTIONS" "$DURATION"
  LUA= run floor_redis "http://127.0.0.1:$floor_port/redis" "$HIT_CONNECTIONS" "$DURATION"
  # The same with P1's own requests and a hit's answer: the HTTP exchange a hit cannot avoid.
  LUA=$register_lua run floor_hit_shape "http://127.0.0.1:$floor_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  LUA=$register_lua run pw_hit_hs256 "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  # The same hits on app benchn, which has no rate limits: the price of the limits is the ratio.
  LUA=$register_lua run pw_hit_nolimits "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=benchn
  [[ -n $PW_BASELINE ]] && LUA=$register_lua run base_hit_hs256 "http://127.0.0.1:$base_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  want cluster && LUA=$register_lua run cluster_hit_hs256 "http://127.0.0.1:$cluster_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  want cluster && LUA=$register_lua run cluster_hit_nolimits "http://127.0.0.1:$cluster_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=benchn
  # The limits' price again in short pairs: two rows of one process differ by up to 10% from
  # one to the next; the bar takes the median pair.
  short_pairs lim "$LIMIT_ROUNDS" "bench $pw_port bench sessions-hs256" "benchn $pw_port benchn sessions-hs256"
fi
# Right after P1 (whose rate it needs), before P2 leaves forwards still finishing.
if want tail && want hit; then
  half=$(awk -F'|' '$1=="pw_hit_hs256" {printf "%d", $2 / 2}' "$results")
  fact tail_rate "$half"
  LUA=scripts/bench/paced.lua run pw_tail "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit \
    SESSIONS="$work/sessions-hs256.txt" APP=bench RATE="$half" CONNS="$HIT_CONNECTIONS"
fi
# P1 with introspected sessions served from the warm cache, right beside P1 with HS256 JWTs.
if want introspect; then
  want hit || LUA=$register_lua run pw_hit_hs256 "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  introspections_before=$(introspection_calls)
  LUA=$register_lua run pw_hit_introspect "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-opaque.txt" APP=benchi
  # The bar's ratio again in short pairs with P1 HS256 (two 10 s rows a minute apart differ by
  # up to 10% here); the median pair decides.
  short_pairs intro "$INTRO_ROUNDS" "introspect $pw_port benchi sessions-opaque" "hs256 $pw_port bench sessions-hs256"
  fact pw_hit_introspect_introspection_calls "$(( $(introspection_calls) - introspections_before ))"
fi
if want es256; then
  verify=$(openssl speed -seconds 3 -multi "$(nproc)" ecdsap256 2>/dev/null | awk '/256 bits ecdsa/ {print $NF}')
  fact openssl_es256_verify "$verify"
  LUA=$register_lua run pw_hit_es256 "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-es256.txt" APP=benches
  # Not a bar: that exchange with one ES256 verification and nothing else, the ceiling of P1 ES256.
  LUA=$register_lua run floor_es256 "http://127.0.0.1:$floor_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-es256.txt" APP=benches
  # The bar's ratio again in short pairs (the two rows above differ by up to 15% from one run to
  # the next); the median pair decides.
  short_pairs esp "$ES_ROUNDS" "pw $pw_port benches sessions-es256" "floor $floor_port benches sessions-es256"
fi
# Sessions reused: ES256 sessions, each sent 10 times over the run (a client that registers,
# reports events and unregisters with one session), beside P1 HS256 of the same run. The pool is
# cut to a tenth of the requests P1 HS256 made in as long, so at that rate each session comes
# round 10 times; app benchr keeps accepted sessions (the default), benches verifies every time.
if want reused; then
  want hit || LUA=$register_lua run pw_hit_hs256 "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  reused_pool=$(awk -F'|' -v s="${DURATION%s}" -v pool="$REUSED_POOL" '$1=="pw_hit_hs256" {n = int($2 * s / 10); if (n < 1) n = 1; if (n > pool) n = pool; print n}' "$results")
  head -n "$reused_pool" "$work/sessions-es256-all.txt" >"$work/sessions-reused.txt"
  fact reused_pool "$reused_pool"
  LUA=$register_lua run pw_hit_reused "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=hit SESSIONS="$work/sessions-reused.txt" APP=benchr
fi
if want forwarded; then
  LUA=$register_lua run nginx_proxy "http://127.0.0.1:$nginx_proxy" "$FORWARD_CONNECTIONS" "$DURATION" MODE=miss RUN_ID=n$$-$run_number SESSIONS="$work/sessions-hs256.txt" APP=bench
  LUA=$register_lua run pw_forwarded "http://127.0.0.1:$pw_port" "$FORWARD_CONNECTIONS" "$DURATION" MODE=miss RUN_ID=p$$-$run_number SESSIONS="$work/sessions-hs256.txt" APP=bench
  want cluster && LUA=$register_lua run cluster_forwarded "http://127.0.0.1:$cluster_port" "$FORWARD_CONNECTIONS" "$DURATION" MODE=miss RUN_ID=c$$-$run_number SESSIONS="$work/sessions-hs256.txt" APP=bench
  [[ -n $PW_BASELINE ]] && LUA=$register_lua run base_forwarded "http://127.0.0.1:$base_port" "$FORWARD_CONNECTIONS" "$DURATION" MODE=miss RUN_ID=b$$-$run_number SESSIONS="$work/sessions-hs256.txt" APP=bench
  # Not a bar: our HTTP server forwarding each body with our upstream client and nothing else.
  LUA=scripts/bench/forward.lua run floor_forward "http://127.0.0.1:$floor_port/forward" "$FORWARD_CONNECTIONS" "$DURATION"
fi
# Interleaved rounds: this build against each other PushWarden (baseline, cluster), short rows
# alternating which goes first, so that drift over the run and the first-started process's edge
# fall on both sides.
# interleave KIND CONNECTIONS MODE OTHER_NAME OTHER_PORT
interleave() {
  local kind=$1 conns=$2 mode=$3 other=$4 other_port=$5 round side port
  for round in $(seq 1 "$ROUNDS"); do
    local order=("this" "other")
    (( round % 2 == 0 )) && order=("other" "this")
    for side in "${order[@]}"; do
      port=$pw_port
      [[ $side == other ]] && port=$other_port
      # Named (and, for forwards, tokens drawn) per comparison: no row repeats another's tokens.
      LUA=$register_lua run "ab_${kind}_${other}_${side}_${run_number}_$round" "http://127.0.0.1:$port" "$conns" "$ROUND_DURATION" \
        MODE="$mode" RUN_ID="a$$-$kind-$other-$side-$run_number-$round" SESSIONS="$work/sessions-hs256.txt" APP=bench
    done
  done
}
if (( ROUNDS > 0 )); then
  fact rounds "$ROUNDS"
  for other in base cluster; do
    other_port=$base_port
    [[ $other == cluster ]] && { want cluster || continue; other_port=$cluster_port; }
    [[ $other == base && -z $PW_BASELINE ]] && continue
    want hit && interleave hit "$HIT_CONNECTIONS" hit "$other" "$other_port"
    want forwarded && interleave fwd "$FORWARD_CONNECTIONS" miss "$other" "$other_port"
  done
fi
# Erasure: contacts with 20 installations each (registered at the LATENCY_MS mock), each erased on
# the admin listener; every unregister waits LATENCY_MS, so the bar is parallelism.
if want erase; then
  fact latency_ms "$LATENCY_MS"
  "$bin/bench-tool" erase --url "http://127.0.0.1:$pw_port" --admin-url "http://127.0.0.1:$pw_admin" --secret "$secret" \
    --admin-token "$BENCH_ADMIN_TOKEN" --installations 20 --contacts 5 >>"$results"
  echo "  erase: $(grep '^erase_ms=' "$results" | tail -1)" >&2
fi
# Outbox rows: app benchq's upstream is queued to a port where nothing listens while registrations
# are accepted (each a new token); then a mock with LATENCY_MS starts there and the outbox is timed
# until it is empty. Once with this one process, then again with a second replica on the same Redis.
outbox_depth() {
  local total=0 n
  for shard in 0 1 2 3 4 5 6 7; do
    n=$(redis-cli -p "$redis_port" XLEN "pw:v2:{outbox:benchq:voyado:$shard}:s" 2>/dev/null || echo 0)
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
drain() {  # drain NAME: starts the queued mock, waits for an empty outbox (at most 180 s), stops the mock
  local waiting started ended
  waiting=$(outbox_depth)
  "$bin/mock-upstream" --port "$queued_mock_port" --latency-ms "$LATENCY_MS" --key bench-key >"$work/mock-q.log" 2>&1 &
  local qmock=$! perf_pid=
  if [[ -n $PERF && $1 == drain_1 ]]; then
    mkdir -p bench-out
    perf record -q -e "$PERF_EVENT" -g -p "$pw_pid" -o "bench-out/perf-drain.data" -- sleep 5 >/dev/null 2>&1 &
    perf_pid=$!
  fi
  started=$(date +%s.%N)
  local before; before=$(cpu_ticks "$qmock")
  local deadline=$((SECONDS + 180))
  while (( $(outbox_depth) > 0 )) && (( SECONDS < deadline )); do sleep 0.1; done
  ended=$(date +%s.%N)
  local after; after=$(cpu_ticks "$qmock")
  # Who used the cores while it drained (the queued mock shows as wrk=; a second replica is not counted).
  fact "cpu_$1" "$(cpu_used "$before" "$after" "$(python3 -c "print($ended - $started)")")"
  kill "$qmock" 2>/dev/null; wait "$qmock" 2>/dev/null || true
  [[ -n $perf_pid ]] && { wait "$perf_pid" 2>/dev/null || true; }
  fact "${1}_waiting" "$waiting"
  fact "${1}_left" "$(outbox_depth)"
  fact "${1}_seconds" "$(python3 -c "print(f'{$ended - $started:.2f}')")"
  echo "  $1: $waiting deliveries drained in $(python3 -c "print(f'{$ended - $started:.1f}')") s" >&2
}
if want queued; then
  # Not a bar: the Redis writes a queued accept cannot avoid, on our HTTP server and Redis client.
  LUA=scripts/bench/forward.lua run floor_accept "http://127.0.0.1:$floor_port/accept" "$HIT_CONNECTIONS" "$DURATION"
  mkdir -p bench-out; redis-cli -p "$redis_port" CONFIG RESETSTAT >/dev/null
  # Commands Redis was slow on: a sidecar fails its pending commands after its command timeout.
  redis-cli -p "$redis_port" CONFIG SET slowlog-log-slower-than 5000 >/dev/null; redis-cli -p "$redis_port" SLOWLOG RESET >/dev/null
  redis-cli -p "$redis_port" CONFIG SET latency-monitor-threshold 20 >/dev/null; redis-cli -p "$redis_port" LATENCY RESET >/dev/null
  LUA=$register_lua run pw_queued "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=miss RUN_ID=q$$-$run_number SESSIONS="$work/sessions-hs256.txt" APP=benchq
  # Which Redis commands the queued accepts (and the waiting worker) cost: where to look next.
  redis-cli -p "$redis_port" INFO commandstats | grep '^cmdstat' | sort -t= -k2 -rn >bench-out/commandstats-queued.txt || true
  { redis-cli -p "$redis_port" SLOWLOG GET 32; echo "LATENCY LATEST:"; redis-cli -p "$redis_port" LATENCY LATEST; } >bench-out/slowlog-queued.txt || true
  drain drain_1
  BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key "$bin/pushwarden" serve --policy "$work/policy.yaml" \
    --listen "127.0.0.1:$pw2_port" --admin "127.0.0.1:$pw2_admin" --redis "redis://127.0.0.1:$redis_port" --log-level warning $PW_FLAGS \
    2>"$work/pushwarden-2.log" &
  pw2_pid=$!
  wait_port "$pw2_port"
  LUA=$register_lua run pw_queued_2 "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$DURATION" MODE=miss RUN_ID=r$$-$run_number SESSIONS="$work/sessions-hs256.txt" APP=benchq
  drain drain_2
  kill "$pw2_pid" 2>/dev/null; wait "$pw2_pid" 2>/dev/null || true
fi
# pushwarden import into app benchimp (delivered by this sidecar), and P1 beside a paced import.
want import && source scripts/bench/import.sh
if want memory; then
  # RSS with IDLE_CONNECTIONS open client connections (each sent one request and kept alive).
  python3 - "$pw_port" "$IDLE_CONNECTIONS" <<'PY' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n")
    conns.append(s)
time.sleep(6)
PY
  holder=$!
  sleep 4
  fact rss_1000_conns_kib "$(rss_kib)"
  if [[ -n $HOLD ]]; then echo "$pw_pid" > bench-out/pushwarden.pid; sleep "$HOLD"; fi
  wait "$holder" || true
  soak_seconds=${SOAK%s}
  fact soak_seconds "$soak_seconds"
  fact rss_soak_start_kib "$(rss_kib)"
  LUA=$register_lua run soak "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$SOAK" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench &
  soak=$!
  samples=""
  for _ in $(seq 1 6); do sleep $(( soak_seconds / 6 > 0 ? soak_seconds / 6 : 1 )); samples="$samples $(rss_kib)"; done
  wait "$soak" || true
  fact rss_soak_samples_kib "${samples# }"
  fact rss_soak_end_kib "$(rss_kib)"
fi
fact error_lines "$(grep -c '"level":"error"' "$work/pushwarden.log" || true)"

done
# Redis bytes per installation (once, after the runs: it adds 100,000 registrations, and their
# sessions to the verified-session cache, which the memory rows must not see). App benchm
# registers BYTES_POOL distinct installations (one contact each) with one Voyado upstream; used
# memory before and after, over how many the upstream took. The keys one registration writes are
# sized with MEMORY USAGE on a sample of each kind, the registration's own (dedupe entry,
# identity) apart from the inventory's (the contact's record, the token's holder and its member in
# the last-seen index, both in the token's shard of the app).
if want bytes; then
  results="$work/results-1.txt"
  "$bin/bench-tool" tokens --alg HS256 --count "$BYTES_POOL" --secret "$secret" --out "$work/sessions-bytes.txt"
  used_memory() { redis-cli -p "$redis_port" INFO memory | tr -d '\r' | awk -F: '$1=="used_memory" {print $2}'; }
  bytes_before=$(used_memory); calls_before=$(upstream_calls)
  LUA=$register_lua run bytes_register "http://127.0.0.1:$pw_port" 256 "$(( BYTES_POOL * (LATENCY_MS + 5) / 256 / 1000 * 2 + 3 ))s" MODE=hit \
    SESSIONS="$work/sessions-bytes.txt" APP=benchm
  sleep 1
  fact bytes_pool "$BYTES_POOL"
  fact bytes_installations "$(( $(upstream_calls) - calls_before ))"
  fact bytes_used "$(( $(used_memory) - bytes_before ))"
  # mean MEMORY USAGE of up to 300 keys matching a pattern (SAMPLES 0: every element of a set)
  key_bytes() {
    redis-cli -p "$redis_port" --scan --pattern "$1" | head -300 | while read -r key; do redis-cli -p "$redis_port" MEMORY USAGE "$key" SAMPLES 0; done |
      awk '{s += $1; n++} END {if (n) printf "%.0f", s / n; else print 0}'
  }
  fact bytes_reg "$(key_bytes 'pw:v2:{*}:reg')"
  fact bytes_id "$(key_bytes 'pw:v2:{*}:id')"
  fact bytes_inv "$(key_bytes 'pw:v2:{c:*}:inv')"
  fact bytes_owner "$(key_bytes 'pw:v2:{inv:*}:h:*')"
  # The inventory's last-seen index, 256 shards per app: every shard's MEMORY USAGE over its
  # entries.
  per_entry() {
    redis-cli -p "$redis_port" --scan --pattern "$1" | while read -r key; do
      echo "$(redis-cli -p "$redis_port" MEMORY USAGE "$key" SAMPLES 0) $(redis-cli -p "$redis_port" "$2" "$key")"
    done | awk '{b += $1; n += $2} END {if (n) printf "%.0f", b / n; else print 0}'
  }
  fact bytes_seen "$(per_entry 'pw:v2:{inv:*}:seen' ZCARD)"
fi
mkdir -p bench-out
{
  echo "PushWarden benchmark $(date -u +%Y-%m-%dT%H:%M:%SZ) nproc=$(nproc) duration=$DURATION upstream_latency=${LATENCY_MS}ms pool=$POOL runs=$RUNS"
  for run_number in $(seq 1 "$RUNS"); do
    echo
    echo "run $run_number"
    python3 scripts/bench/report.py "$work/results-$run_number.txt"
  done
} | tee bench-out/last.txt
