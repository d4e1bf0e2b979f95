#!/usr/bin/env bash
# PushWarden benchmark: nginx baselines and PushWarden's hot paths, side by side in one run, on
# loopback only, with bounded durations. Prints one table; see BENCHMARKS.md.
#
#   DURATION=10s LATENCY_MS=50 POOL=10000 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/opt/swift/usr/bin:$PATH

DURATION=${DURATION:-10s}
LATENCY_MS=${LATENCY_MS:-50}
POOL=${POOL:-10000}
HIT_CONNECTIONS=${HIT_CONNECTIONS:-64}
FORWARD_CONNECTIONS=${FORWARD_CONNECTIONS:-512}
WRK_THREADS=${WRK_THREADS:-2}
SCENARIOS=${SCENARIOS:-hit,forwarded}   # comma-separated subset, for quicker iterations
PW_FLAGS=${PW_FLAGS:-}                  # extra flags for pushwarden serve (e.g. --threads 1)

work=$(mktemp -d /tmp/pushwarden-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

echo "building release..." >&2
swift build -c release --product pushwarden >&2
swift build -c release --product mock-upstream >&2
bin=$(swift build -c release --show-bin-path)

redis_port=$(free_port); mock_port=$(free_port); nginx_static=$(free_port); nginx_proxy=$(free_port)
pw_port=$(free_port); pw_admin=$(free_port)

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
"$bin/mock-upstream" --port "$mock_port" --latency-ms "$LATENCY_MS" --key bench-key >"$work/mock.log" 2>&1 &
pids+=($!)

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
pids+=($!)

cat >"$work/policy.yaml" <<POLICY
version: 1
apps:
  bench:
    session:
      type: jwt
      algorithms: [HS256]
      hmac_secret: {env: BENCH_SESSION_SECRET}
      issuer: https://auth.bench
      audience: bench
    client:
      platforms: [android, ios]
    dedupe:
      refresh_after: 1d
    upstreams:
      - name: voyado
        provider: voyado
        base_path: http://127.0.0.1:$mock_port/api/v1/acme/abc123/default
        api_key: {env: BENCH_VOYADO_KEY}
        timeout: 5s
POLICY
secret=$(openssl rand -hex 32)
BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key "$bin/pushwarden" serve --policy "$work/policy.yaml" \
  --listen "127.0.0.1:$pw_port" --admin "127.0.0.1:$pw_admin" --redis "redis://127.0.0.1:$redis_port" --log-level warning $PW_FLAGS \
  2>"$work/pushwarden.log" &
pw_pid=$!
pids+=($pw_pid)

for p in $redis_port $mock_port $nginx_static $nginx_proxy $pw_port; do wait_port "$p"; done
python3 scripts/bench/gen_sessions.py "$secret" "$POOL" "$work/sessions.txt"
export SESSIONS="$work/sessions.txt"

results=()
# run NAME URL CONNECTIONS [lua-script env...]
run() {
  local name=$1 url=$2 conns=$3; shift 3
  local out="$work/$name.txt"
  env "$@" wrk -t"$WRK_THREADS" -c"$conns" -d"${DURATION}" --latency ${LUA:+-s "$LUA"} "$url" >"$out" 2>&1 || true
  local rps p50 p99 non2xx errors
  rps=$(awk '/Requests\/sec/ {print $2}' "$out")
  p50=$(awk '$1=="50%" {print $2}' "$out")
  p99=$(awk '$1=="99%" {print $2}' "$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$out"); non2xx=${non2xx:-0}
  errors=$(awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10}' "$out"); errors=${errors:-0}
  results+=("$name|${rps:-0}|${p50:-?}|${p99:-?}|$non2xx|$errors")
}
rss() { awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' "/proc/$pw_pid/status"; }

# Long enough for every pooled token to be registered once (each call waits LATENCY_MS upstream).
warm_seconds=$(( POOL * (LATENCY_MS + 5) / 256 / 1000 * 2 + 3 ))
echo "warming the dedupe cache with $POOL registrations (${warm_seconds}s)..." >&2
DURATION=${warm_seconds}s LUA=scripts/bench/register.lua run warmup "http://127.0.0.1:$pw_port" 256 MODE=hit
rss_hit=-; rss_fwd=-
if [[ ,$SCENARIOS, == *,hit,* ]]; then
  LUA= run nginx_static "http://127.0.0.1:$nginx_static/" "$HIT_CONNECTIONS"
  LUA=scripts/bench/register.lua run pw_dedupe_hit "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" MODE=hit
  rss_hit=$(rss)
fi
if [[ ,$SCENARIOS, == *,forwarded,* ]]; then
  LUA=scripts/bench/register.lua run nginx_proxy "http://127.0.0.1:$nginx_proxy" "$FORWARD_CONNECTIONS" MODE=miss RUN_ID=n$$ APP=bench
  LUA=scripts/bench/register.lua run pw_forwarded "http://127.0.0.1:$pw_port" "$FORWARD_CONNECTIONS" MODE=miss RUN_ID=p$$
  rss_fwd=$(rss)
fi

field() { local IFS='|'; read -r -a f <<<"$1"; echo "${f[$2]}"; }
get() { for r in "${results[@]}"; do [[ $(field "$r" 0) == "$1" ]] && { field "$r" "$2"; return; }; done; }
ratio() { python3 -c "a=float('$1' or 0); b=float('$2' or 0); print(f'{a/b:.2f}x' if b else 'n/a')"; }

echo
echo "PushWarden benchmark $(date -u +%Y-%m-%dT%H:%M:%SZ) nproc=$(nproc) duration=$DURATION upstream_latency=${LATENCY_MS}ms pool=$POOL"
printf '%-16s %6s %12s %10s %10s %8s %8s %12s\n' scenario conns "req/s" p50 p99 non2xx errors "vs nginx"
for r in "${results[@]}"; do
  name=$(field "$r" 0); [[ $name == warmup ]] && continue
  case $name in
    pw_dedupe_hit) base=$(get nginx_static 1); conns=$HIT_CONNECTIONS;;
    pw_forwarded) base=$(get nginx_proxy 1); conns=$FORWARD_CONNECTIONS;;
    nginx_static) base=""; conns=$HIT_CONNECTIONS;;
    *) base=""; conns=$FORWARD_CONNECTIONS;;
  esac
  printf '%-16s %6s %12s %10s %10s %8s %8s %12s\n' "$name" "$conns" "$(field "$r" 1)" "$(field "$r" 2)" "$(field "$r" 3)" \
    "$(field "$r" 4)" "$(field "$r" 5)" "$([[ -n $base ]] && ratio "$(field "$r" 1)" "$base" || echo -)"
done
echo "pushwarden RSS after dedupe-hit run: $rss_hit; after forwarded run: $rss_fwd"
echo "warm-up: $(get warmup 1) req/s, non2xx $(get warmup 4)"
echo "pushwarden error log lines: $(grep -c '"level":"error"' "$work/pushwarden.log" || true)"
