#!/usr/bin/env bash
# What one outbox delivery costs, process by process: a release-build sidecar on the bench policy
# (app benchimp, one Voyado upstream `delivery: queued` at a 50 ms mock), and `pushwarden import
# --rate RATE/s` feeding it, with no other load. Prints each process's cores and CPU per delivery
# over SECS seconds, Redis's read events per delivery and its command statistics. Loopback only;
# everything it starts is stopped at exit. PERFOUT=FILE records the sidecar with perf meanwhile.
#   scripts/bench/delivery-cost.sh            RATE=500 SECS=10 by default
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(swift build -c release --show-bin-path)
SECRET=$(openssl rand -hex 32)
RATE=${RATE:-500}; SECS=${SECS:-10}; PERFOUT=${PERFOUT:-}
work=$(mktemp -d)
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
rp=$(fp); mp=$(fp); pp=$(fp); ap=$(fp); qp=$(fp)
redis-server --port $rp --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 & rpid=$!
"$bin/mock-upstream" --port $mp --latency-ms 50 --key bench-key >/dev/null 2>&1 & mpid=$!
trap 'kill ${ipid:-} ${ppid:-} $mpid $rpid 2>/dev/null || true; rm -rf $work' EXIT
"$bin/bench-tool" tokens --alg ES256 --count 10 --jwks "$work/jwks.json" --out "$work/s.txt"
"$bin/bench-tool" policy --mock-port $mp --jwks "$work/jwks.json" --queued-mock-port $qp --import-app >"$work/policy.yaml"
sleep 0.3
BENCH_SESSION_SECRET=$SECRET BENCH_VOYADO_KEY=bench-key BENCH_ADMIN_TOKEN=y "$bin/pushwarden" serve --policy "$work/policy.yaml" --listen 127.0.0.1:$pp --admin 127.0.0.1:$ap --redis redis://127.0.0.1:$rp --log-level warning 2>"$work/pw.log" & ppid=$!
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$pp) 2>/dev/null && break; sleep 0.05; done
python3 - "$work/imp.ndjson" $((RATE * (SECS + 5))) <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as out:
    for i in range(n):
        out.write(f'{{"contact_id":"c-{i}","platform":"android","push_token":"fcm-{i:08d}-aaaaaaaaaaaaaaaaaaaaaaaaa","app_version":"4.2.0"}}\n')
PY
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
sleep 2
idle0=$(ticks $ppid); sleep 5; idle1=$(ticks $ppid)
BENCH_SESSION_SECRET=$SECRET BENCH_VOYADO_KEY=bench-key "$bin/pushwarden" import --policy "$work/policy.yaml" --redis redis://127.0.0.1:$rp --app benchimp --rate "$RATE/s" --refused "$work/ref" "$work/imp.ndjson" >"$work/imp.out" 2>&1 & ipid=$!
sleep 2
p0=$(ticks $ppid); r0=$(ticks $rpid); i0=$(ticks $ipid); m0=$(ticks $mpid); t0=$(date +%s.%N)
reads0=$(redis-cli -p $rp INFO stats | awk -F: '/total_reads_processed/{print $2+0}')
d0=$(redis-cli -p $rp INFO commandstats | awk -F'[=,]' '/cmdstat_xdel/{print $2}')
if [[ -n $PERFOUT ]]; then perf record -q -g -p $ppid -o "$PERFOUT" -- sleep $SECS >/dev/null 2>&1; else sleep $SECS; fi
p1=$(ticks $ppid); r1=$(ticks $rpid); i1=$(ticks $ipid); m1=$(ticks $mpid); t1=$(date +%s.%N)
reads1=$(redis-cli -p $rp INFO stats | awk -F: '/total_reads_processed/{print $2+0}')
d1=$(redis-cli -p $rp INFO commandstats | awk -F'[=,]' '/cmdstat_xdel/{print $2}')
kill $ipid 2>/dev/null || true
python3 - <<PY
el=$t1-$t0; d=${d1:-0}-${d0:-0}
print(f"idle sidecar {($idle1-$idle0)/100/5:.3f} cores")
print(f"deliveries {d} in {el:.1f}s = {d/el:.0f}/s")
for name,a,b in (("sidecar",$p0,$p1),("redis",$r0,$r1),("import",$i0,$i1),("mock",$m0,$m1)):
    print(f"{name}: {(b-a)/100/el:.3f} cores, {(b-a)*10000/max(1,d):.0f} us per delivery")
print(f"redis reads per delivery {($reads1-$reads0)/max(1,d):.1f}")
PY
redis-cli -p $rp INFO commandstats | grep cmdstat | sort -t= -k2 -rn | head -30
