# The `import` scenario, sourced by scripts/bench.sh inside each run: `pushwarden import` into app
# benchimp, whose one Voyado upstream is `delivery: queued` at the LATENCY_MS mock, delivered by
# the bench sidecar's outbox workers (issue 31).
#   Row 1: IMPORT_LINES fresh lines at --rate 1000000/s (the flag's most): lines/s queued (the
#   import's wall time), its peak RSS and RSS samples, then lines/s delivered end to end (until the
#   app's outbox is empty) and the upstream calls the sidecar made for them.
#   Row 2: P1 quiet, then beside an import of fresh lines at IMPORT_BUSY_RATE, then quiet again.
# Uses bench.sh's helpers and variables (run, fact, cpu_ticks, cpu_used, upstream_calls, $bin, $work...).
IMPORT_LINES=${IMPORT_LINES:-100000}
IMPORT_BUSY_RATE=${IMPORT_BUSY_RATE:-500}
IMPORT_ROUNDS=${IMPORT_ROUNDS:-3}        # quiet/busy P1 pairs of ROUND_DURATION
IMPORT_DRAIN_SECONDS=${IMPORT_DRAIN_SECONDS:-300}   # the longest row 1 waits for the outbox to empty

# import_file FILE COUNT TAG: COUNT lines, each a contact and a token no other file holds (TAG),
# android (an FCM token) and ios (an APNs token) in turn, as docs/migration.md writes them.
import_file() {
  python3 - "$1" "$2" "$3" <<'PY'
import hashlib, sys
path, count, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "w") as out:
    for n in range(count):
        if n % 2:
            token = hashlib.sha256(f"{tag}-{n}".encode()).hexdigest()
            out.write(f'{{"contact_id":"imp-{tag}-{n}","platform":"ios","push_token":"{token}","app_version":"4.2.0"}}\n')
        else:
            out.write(f'{{"contact_id":"imp-{tag}-{n}","platform":"android","push_token":"fcm-{tag}-{n:08d}-aaaaaaaaaaaaaaaaaaaa",'
                      f'"app_version":"4.2.0"}}\n')
PY
}
# Deliveries waiting in app benchimp's outbox (its 8 shards), and those dead-lettered.
import_depth() {
  for shard in 0 1 2 3 4 5 6 7; do echo "XLEN pw:v2:{outbox:benchimp:voyado:$shard}:s"; done |
    redis-cli -p "$redis_port" 2>/dev/null | awk '{s += $1} END {print s + 0}'
}
import_dead() { redis-cli -p "$redis_port" XLEN "pw:v2:{outbox:benchimp:voyado:dead}:s" 2>/dev/null || echo 0; }
# import_wait SECONDS: until the outbox is empty or SECONDS passed.
import_wait() {
  local deadline=$((SECONDS + $1))
  while (( $(import_depth) > 0 )) && (( SECONDS < deadline )); do sleep 0.1; done
}

if [[ -n $PW_THIS ]]; then
  echo "  import: skipped (PW_THIS serves a policy without app benchimp)" >&2
else
  # Row 1: unpaced. A small wrapper waits for the import with wait4 (its peak RSS, its CPU) and
  # samples its RSS from /proc while it runs.
  import_file "$work/import-$run_number.ndjson" "$IMPORT_LINES" "u$$-$run_number"
  imp_calls_before=$(upstream_calls)
  imp_cpu_before=$(cpu_ticks 0)
  imp_started=$(date +%s.%N)
  imp_measure=$(BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key python3 - "$work/import-$run_number.out" "$bin/pushwarden" "$work" "$redis_port" "$work/import-$run_number.ndjson" <<'PY'
import os, subprocess, sys, threading, time
out, binary, work, redis_port, path = sys.argv[1:]
command = [binary, "import", "--policy", f"{work}/policy.yaml", "--redis", f"redis://127.0.0.1:{redis_port}", "--app", "benchimp",
           "--rate", "1000000/s", "--refused", path + ".refused", path]
samples, done = [], threading.Event()
def sample(pid):
    while not done.wait(0.25):
        try:
            with open(f"/proc/{pid}/status") as status:
                samples.extend(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except OSError:
            return
started = time.monotonic()
with open(out, "w") as sink:
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    sampler = threading.Thread(target=sample, args=(child.pid,))
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    done.set(); sampler.join()
wall = time.monotonic() - started
# Samples at a quarter, half, three quarters and the end of the run: flat or growing.
picked = [samples[min(len(samples) - 1, len(samples) * q // 4)] for q in (1, 2, 3, 4)] if samples else []
print(f"{wall:.3f} {usage.ru_maxrss} {usage.ru_utime + usage.ru_stime:.2f} {child.returncode} {','.join(map(str, picked))}")
PY
  )
  read -r imp_wall imp_rss imp_cpu imp_rc imp_samples <<<"$imp_measure"
  imp_cpu_after=$(cpu_ticks 0)
  # Delivered end to end: from the import's start until the sidecar emptied the outbox.
  import_wait "$IMPORT_DRAIN_SECONDS"
  imp_ended=$(date +%s.%N)
  sleep 0.5  # the last calls' metrics
  fact imp_lines "$IMPORT_LINES"
  fact imp_seconds "$imp_wall"
  fact imp_rc "$imp_rc"
  fact imp_rss_kib "$imp_rss"
  fact imp_rss_samples_kib "$imp_samples"
  fact cpu_imp_unlimited "$(cpu_used "$imp_cpu_before" "$imp_cpu_after" "$imp_wall") import=$(python3 -c "print(f'{$imp_cpu / $imp_wall:.2f}')")"
  summary=$(grep '^imported ' "$work/import-$run_number.out" || true)
  for kind in queued unchanged refused failed; do
    fact "imp_$kind" "$(sed -n "s/.* \([0-9][0-9]*\) $kind[,;]\{0,1\}.*/\1/p" <<<"$summary" | head -1)"
  done
  fact imp_delivered_seconds "$(python3 -c "print(f'{$imp_ended - $imp_started:.2f}')")"
  fact imp_left "$(import_depth)"
  fact imp_dead "$(import_dead)"
  fact imp_calls "$(( $(upstream_calls) - imp_calls_before ))"
  echo "  import: ${summary%%$'\n'*}; peak RSS ${imp_rss} KiB; outbox empty after $(grep '^imp_delivered_seconds=' "$results" | tail -1 | cut -d= -f2) s" >&2
  [[ $imp_rc == 0 ]] || sed 's/^/    /' "$work/import-$run_number.out" | tail -5 >&2

  # Row 2: P1 quiet and beside an import at IMPORT_BUSY_RATE in turn, IMPORT_ROUNDS times (each
  # import of fresh lines, sized to outlast its row, stopped after it), then quiet once more:
  # each busy row against the quiet rows on either side of it, the median round decides.
  imp_row_seconds=${ROUND_DURATION%s}
  LUA=$register_lua run imp_p1_quiet_1 "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$ROUND_DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  for imp_round in $(seq 1 "$IMPORT_ROUNDS"); do
    imp_busy_file="$work/import-busy-$run_number-$imp_round.ndjson"
    import_file "$imp_busy_file" "$(( IMPORT_BUSY_RATE * (imp_row_seconds + 10) ))" "b$$-$run_number-$imp_round"
    # A simple command, so that $! is the import itself (a function would run in a subshell).
    BENCH_SESSION_SECRET=$secret BENCH_VOYADO_KEY=bench-key "$bin/pushwarden" import --policy "$work/policy.yaml" \
      --redis "redis://127.0.0.1:$redis_port" --app benchimp --rate "$IMPORT_BUSY_RATE/s" --refused "$imp_busy_file.refused" \
      "$imp_busy_file" >"$work/import-busy-$run_number-$imp_round.out" 2>&1 &
    imp_busy_pid=$!
    pids+=($imp_busy_pid)
    sleep 1  # its policy loaded and its lines flowing
    imp_calls_before=$(upstream_calls)
    # The import process's own CPU over the row (run's CPU line does not know it).
    imp_ticks() { awk '{print $14 + $15}' "/proc/$imp_busy_pid/stat" 2>/dev/null || echo 0; }
    imp_ticks_before=$(imp_ticks); imp_row_started=$(date +%s.%N)
    LUA=$register_lua run "imp_p1_busy_$imp_round" "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$ROUND_DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
    fact "imp_busy_import_cores_$imp_round" "$(python3 -c "print(f'{max(0, $(imp_ticks) - $imp_ticks_before) / 100 / ($(date +%s.%N) - $imp_row_started):.2f}')")"
    fact "imp_busy_calls_$imp_round" "$(( $(upstream_calls) - imp_calls_before ))"
    if kill -0 "$imp_busy_pid" 2>/dev/null; then fact "imp_busy_alive_$imp_round" 1; else fact "imp_busy_alive_$imp_round" 0; fi
    kill "$imp_busy_pid" 2>/dev/null || true
    wait "$imp_busy_pid" 2>/dev/null || true
    import_wait 60
    LUA=$register_lua run "imp_p1_quiet_$(( imp_round + 1 ))" "http://127.0.0.1:$pw_port" "$HIT_CONNECTIONS" "$ROUND_DURATION" MODE=hit SESSIONS="$work/sessions-hs256.txt" APP=bench
  done
  fact imp_busy_rate "$IMPORT_BUSY_RATE"
  fact imp_rounds "$IMPORT_ROUNDS"
fi
