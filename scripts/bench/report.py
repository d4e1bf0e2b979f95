#!/usr/bin/env python3
"""Turns the benchmark's raw results into one table with PASS/FAIL per bar: the table
docs/benchmarks.md summarises and docs/benchmarks-log.md keeps run by run.

Input: a results file of `name|rps|p50|p99|non2xx|errors` lines plus `key=value` facts.
"""
import sys

def ms(text):
    text = text.strip()
    for suffix, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * factor
            except ValueError:
                return None
    return None

rows, facts = {}, {}
for line in open(sys.argv[1]):
    line = line.strip()
    if "|" in line:
        name, rps, p50, p99, non2xx, errors = line.split("|")
        rows[name] = dict(rps=float(rps or 0), p50=p50, p99=p99, non2xx=int(non2xx or 0), errors=int(errors or 0))
    elif "=" in line:
        key, value = line.split("=", 1)
        facts[key] = value

def rps(name):
    return rows.get(name, {}).get("rps", 0.0)

def ratio(a, b):
    return a / b if b else 0.0

table = []
def scenario(name, label, conns, baseline, bar_text, value, passed):
    r = rows.get(name)
    if r is None:
        return
    failures = r["non2xx"] + r["errors"]
    table.append((label, conns, f"{r['rps']:.0f}", r["p50"], r["p99"], baseline, value, bar_text,
                  "PASS" if passed and failures == 0 else "FAIL", failures))

scenario("nginx_static", "nginx static 202", facts.get("hit_conns"), "-", "-", "-", True)
def info(name, label, conns, baseline):
    scenario(name, label, conns, f"{rps(baseline):.0f}", "-", f"{ratio(rps(name), rps(baseline)):.2f}x", True)

info("floor_inline", "floor: HTTPServer alone (info)", facts.get("hit_conns"), "nginx_static")
info("floor_redis", "floor: + one Redis GET (info)", facts.get("hit_conns"), "nginx_static")
info("floor_hit_shape", "floor: + one Redis GET, P1's requests and answers (info)", facts.get("hit_conns"), "floor_redis")
# The bars of the performance issue, round 2: the hit against our own libraries' floor.
p1 = ratio(rps("pw_hit_hs256"), rps("floor_redis"))
scenario("pw_hit_hs256", "P1 dedupe hit HS256", facts.get("hit_conns"), f"{rps('floor_redis'):.0f} (floor + GET)", ">= 0.70x floor",
         f"{p1:.2f}x (nginx {ratio(rps('pw_hit_hs256'), rps('nginx_static')):.2f}x"
         + (f", P1's shape {ratio(rps('pw_hit_hs256'), rps('floor_hit_shape')):.2f}x" if rps("floor_hit_shape") else "") + ")", p1 >= 0.7)
# The price of the shared rate limits: P1 (app bench, limits on, as the example policy) against
# the same hits on app benchn (no limits), measured one right after the other.
pl = ratio(rps("pw_hit_hs256"), rps("pw_hit_nolimits"))
def short_pairs(first, second, single):
    """The short pairs of `short_pairs` in bench.sh: the median ratio (`single`, the 10 s pair's,
    when there are none) and how it reads beside the row."""
    ratios = sorted(ratio(rps(n), rps(n.replace(first, second, 1))) for n in rows
                    if n.startswith(first) and rps(n.replace(first, second, 1)))
    if not ratios:
        return single, ""
    median = ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
    return median, f"; {len(ratios)} short pairs: median {median:.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f})"
# The short pairs beside them (LIMIT_ROUNDS): the median pair decides, the single pair is shown.
limit_median, limit_text = short_pairs("lim_bench_", "lim_benchn_", pl)
scenario("pw_hit_nolimits", "P1 without rate limits (their price)", facts.get("hit_conns"), f"{rps('pw_hit_hs256'):.0f} (P1, limits on)",
         "P1 >= 0.85x this", f"P1 is {pl:.2f}x this" + limit_text, limit_median >= 0.85)
# An introspected session served from the warm cache, against P1 with HS256 in the same run; the
# short pairs beside them (INTRO_ROUNDS) decide.
pi = ratio(rps("pw_hit_introspect"), rps("pw_hit_hs256"))
intro_median, intro_text = short_pairs("intro_introspect_", "intro_hs256_", pi)
scenario("pw_hit_introspect", "P1 dedupe hit, introspected session (cache warm)", facts.get("hit_conns"),
         f"{rps('pw_hit_hs256'):.0f} (P1 HS256)", ">= 0.90x P1", f"{pi:.2f}x" + intro_text, intro_median >= 0.9)
verify = float(facts.get("openssl_es256_verify", "0") or 0)
p1es = ratio(rps("pw_hit_es256"), verify)
es_floor = ratio(rps("pw_hit_es256"), rps("floor_es256"))
# The short pairs beside them (ES_ROUNDS): the median pair decides, the single pair is shown.
es_median, es_text = short_pairs("esp_pw_", "esp_floor_", es_floor)
# Round 3's bar: against its own floor (one verification and nothing else), beside the older one.
scenario("pw_hit_es256", "P1 dedupe hit ES256 (every token verified)", facts.get("hit_conns"), f"{verify:.0f} verify/s",
         ">= 0.90x its floor", f"{es_floor:.2f}x its floor ({p1es:.2f}x openssl speed)" + es_text, es_median >= 0.9)
scenario("floor_es256", "floor: + one ES256 verification (info)", facts.get("hit_conns"), f"{verify:.0f} verify/s", "-",
         f"{ratio(rps('floor_es256'), verify):.2f}x", True)
# ES256 sessions each sent about 10 times over the run, accepted ones kept, against P1 HS256.
pr = ratio(rps("pw_hit_reused"), rps("pw_hit_hs256"))
scenario("pw_hit_reused", f"P1 hit ES256, sessions reused ({facts.get('reused_pool', '?')} sessions)", facts.get("hit_conns"),
         f"{rps('pw_hit_hs256'):.0f} (P1 HS256)", ">= 0.80x P1", f"{pr:.2f}x", pr >= 0.8)
scenario("nginx_proxy", "nginx proxy_pass", facts.get("fwd_conns"), "-", "-", "-", True)
p2 = ratio(rps("pw_forwarded"), rps("nginx_proxy"))
scenario("pw_forwarded", "P2 forwarded", facts.get("fwd_conns"), f"{rps('nginx_proxy'):.0f}", ">= 0.90x", f"{p2:.2f}x", p2 >= 0.9)
def cpu_us(name, process):
    cores = dict(x.split("=") for x in facts.get(f"cpu_{name}", "").split()).get(process)
    return float(cores) * 1e6 / rps(name) if cores and rps(name) else 0.0
if "pw_forwarded" in rows and "floor_forward" in rows:
    mine, floor = cpu_us("pw_forwarded", "pushwarden"), cpu_us("floor_forward", "floor")
    reads = float(facts.get("pw_forwarded_redis_reads", "0") or 0)
    trips = reads / (rps("pw_forwarded") * float(facts.get("duration_seconds", "0") or 0) or 1)
    table.append(("P2: sidecar CPU per forward", facts.get("fwd_conns"), "-", "-", "-", f"{floor:.0f} us (floor's)",
                  f"{mine:.0f} us, {ratio(mine, floor):.2f}x the floor's; Redis read events per forward {trips:.2f} "
                  "(under load one write carries many requests' commands; the round trips of one are RoundTripTests')",
                  "<= 1.40x", "PASS" if 0 < ratio(mine, floor) <= 1.4 else "FAIL", 0))
info("floor_forward", "floor: HTTP + upstream call (info)", facts.get("fwd_conns"), "nginx_proxy")
# cluster: the same build on a three-master Redis Cluster (bars: >= 0.9x of the single-Redis rows).
if "cluster_hit_hs256" in rows:
    c1 = ratio(rps("cluster_hit_hs256"), rps("pw_hit_hs256"))
    scenario("cluster_hit_hs256", "P1 hit HS256 on Redis Cluster", facts.get("hit_conns"), f"{rps('pw_hit_hs256'):.0f} (P1)",
             ">= 0.90x P1", f"{c1:.2f}x", c1 >= 0.9)
if "cluster_hit_nolimits" in rows:
    cl = ratio(rps("cluster_hit_hs256"), rps("cluster_hit_nolimits"))
    scenario("cluster_hit_nolimits", "P1 on Redis Cluster without rate limits", facts.get("hit_conns"),
             f"{rps('cluster_hit_hs256'):.0f} (cluster P1)", "P1 >= 0.85x this", f"P1 is {cl:.2f}x this", cl >= 0.85)
if "cluster_forwarded" in rows:
    c2 = ratio(rps("cluster_forwarded"), rps("pw_forwarded"))
    scenario("cluster_forwarded", "P2 forwarded on Redis Cluster", facts.get("fwd_conns"), f"{rps('pw_forwarded'):.0f} (P2)",
             ">= 0.90x P2", f"{c2:.2f}x", c2 >= 0.9)
# PW_BASELINE: an earlier build beside this one, same run (info rows: this build / baseline).
# Interleaved rounds (ROUNDS=N): this build against the baseline and the cluster sidecar.
process_of = {"pw": "pushwarden", "base": "baseline", "cluster": "cluster-pw"}
def cpu_us_per_request(name, side):
    cores = dict(x.split("=") for x in facts.get(f"cpu_{name}", "").split()).get(process_of[side])
    return float(cores) * 1e6 / rps(name) if cores and rps(name) else 0.0
interleaved = []
for other in ("base", "cluster"):
    for kind, label in (("hit", "P1 hit"), ("fwd", "P2 forwarded")):
        pairs = []
        for n in rows:
            if n.startswith(f"ab_{kind}_{other}_this_"):
                twin = n.replace("_this_", "_other_", 1)
                if twin in rows and rps(twin):
                    pairs.append((n, twin))
        if not pairs:
            continue
        # The cluster's bar is the cluster sidecar against this one (single Redis); a baseline's, this against it.
        if other == "cluster":
            ratios = sorted(ratio(rps(b), rps(a)) for a, b in pairs)
            shown = "cluster/this"
        else:
            ratios = sorted(ratio(rps(a), rps(b)) for a, b in pairs)
            shown = f"this/{other}"
        median = ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
        def mean_cpu(values):
            measured = [v for v in values if v > 0]
            return sum(measured) / len(measured) if measured else 0.0
        cpu_this = mean_cpu(cpu_us_per_request(a, "pw") for a, _ in pairs)
        cpu_other = mean_cpu(cpu_us_per_request(b, other) for _, b in pairs)
        failed = sum(rows[a]["non2xx"] + rows[a]["errors"] + rows[b]["non2xx"] + rows[b]["errors"] for a, b in pairs)
        interleaved.append(f"  {label}, {shown}: median {median:.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f}, "
                           f"{len(pairs)} rounds); CPU per request {cpu_this:.0f} us this, {cpu_other:.0f} us {other}; failed {failed}")
if "base_hit_hs256" in rows:
    scenario("base_hit_hs256", "baseline P1 hit HS256 (info)", facts.get("hit_conns"), f"{rps('nginx_static'):.0f}", "-",
             f"{ratio(rps('base_hit_hs256'), rps('nginx_static')):.2f}x; this/base {ratio(rps('pw_hit_hs256'), rps('base_hit_hs256')):.2f}", True)
if "base_forwarded" in rows:
    scenario("base_forwarded", "baseline P2 forwarded (info)", facts.get("fwd_conns"), f"{rps('nginx_proxy'):.0f}", "-",
             f"{ratio(rps('base_forwarded'), rps('nginx_proxy')):.2f}x; this/base {ratio(rps('pw_forwarded'), rps('base_forwarded')):.2f}", True)
if "floor_accept" in rows:
    info("floor_accept", "floor: + a queued accept's Redis writes (info)", facts.get("hit_conns"), "floor_redis")
if "pw_queued" in rows:
    q = ratio(rps("pw_queued"), rps("pw_hit_hs256"))
    qreads = float(facts.get("pw_queued_redis_reads", "0") or 0) / (rps("pw_queued") * float(facts.get("duration_seconds", "0") or 0) or 1)
    scenario("pw_queued", "queued accept (new tokens)", facts.get("hit_conns"), f"{rps('pw_hit_hs256'):.0f} (P1)", ">= 0.55x P1",
             f"{q:.2f}x (floor {ratio(rps('floor_accept'), rps('pw_hit_hs256')):.2f}x P1; sidecar {cpu_us('pw_queued', 'pushwarden'):.0f} us, "
             f"Redis {cpu_us('pw_queued', 'redis'):.0f} us and {qreads:.2f} reads per accept)", q >= 0.55)
    for replicas in ("1", "2"):
        waiting = float(facts.get(f"drain_{replicas}_waiting", "0") or 0)
        seconds = float(facts.get(f"drain_{replicas}_seconds", "0") or 0)
        left = int(float(facts.get(f"drain_{replicas}_left", "0") or 0))
        rate = waiting / seconds if seconds else 0.0
        d = ratio(rate, rps("pw_forwarded"))
        table.append((f"outbox drain, {replicas} replica(s)", "-", f"{rate:.0f}", "-", "-", f"{rps('pw_forwarded'):.0f} (P2)",
                      f"{d:.2f}x ({waiting:.0f} in {seconds:.1f}s)", ">= 0.80x P2", "PASS" if d >= 0.8 and left == 0 else "FAIL", left))
if "erase_ms" in facts:
    times = sorted(float(t) for t in facts["erase_ms"].split(",") if t)
    counts = [int(c) for c in facts.get("erase_installations", "").split(",") if c]
    latency = float(facts.get("latency_ms", "50") or 50)
    median = times[len(times) // 2] if times else 0.0
    ok = bool(times) and median < 3 * latency and all(c == 20 for c in counts)
    table.append(("erase a contact, 20 installations", "-", "-", f"{median:.0f}ms", f"{times[-1] if times else 0:.0f}ms (max)",
                  f"{latency:.0f}ms (one call)", f"{median / latency:.2f}x one call ({len(times)} contacts, erased {counts})",
                  "< 3x one call", "PASS" if ok else "FAIL", sum(1 for c in counts if c != 20)))
if "bytes_used" in facts:
    n = int(float(facts.get("bytes_installations", "0") or 0))
    total = float(facts["bytes_used"]) / n if n else 0.0
    part = lambda key: float(facts.get(key, "0") or 0)
    own = part("bytes_reg") + part("bytes_id")
    inventory = part("bytes_inv") + part("bytes_owner") + part("bytes_seen")
    table.append((f"Redis bytes per installation ({n} registered)", "-", "-", "-", "-", "INFO used_memory",
                  f"{total:.0f} B in all; keys: registration {own:.0f} B (entry {part('bytes_reg'):.0f}, identity {part('bytes_id'):.0f}), "
                  f"inventory {inventory:.0f} B (record {part('bytes_inv'):.0f}, holder {part('bytes_owner'):.0f}, last seen {part('bytes_seen'):.0f})",
                  "<= 256 B (registration)", "PASS" if n > 0 and own <= 256 else "FAIL", 0 if n >= int(facts.get("bytes_pool", n) or n) else 1))
# Import (issue 31): pushwarden import of fresh lines at the highest --rate into app benchimp,
# delivered by the sidecar's outbox workers to the mock; then P1 beside an import at a paced rate.
if "imp_lines" in facts:
    num = lambda key: float(facts.get(key, "0") or 0)
    lines, wall = int(num("imp_lines")), num("imp_seconds")
    queued, refused, failed = int(num("imp_queued")), int(num("imp_refused")), int(num("imp_failed"))
    ok = queued == lines and refused + failed == 0 and facts.get("imp_rc") == "0"
    table.append((f"import {lines} lines, unpaced: queued", "-", f"{ratio(lines, wall):.0f}", "-", "-", "-",
                  f"{queued} queued, {refused} refused, {failed} failed in {wall:.1f}s (lines/s)",
                  "all queued, 0 refused/failed", "PASS" if ok else "FAIL", max(0, lines - queued)))
    delivered, left, dead, calls = num("imp_delivered_seconds"), int(num("imp_left")), int(num("imp_dead")), int(num("imp_calls"))
    ok = left == 0 and dead == 0 and calls >= lines
    table.append((f"import {lines} lines: delivered end to end", "-", f"{ratio(lines, delivered):.0f}", "-", "-",
                  f"{rps('pw_forwarded'):.0f} (P2)" if rps("pw_forwarded") else "-",
                  f"outbox empty after {delivered:.1f}s; {calls} upstream calls, {left} left, {dead} dead (lines/s)",
                  "outbox empty, >= 1 call a line", "PASS" if ok else "FAIL", left + dead + max(0, lines - calls)))
    # Bounded: the peak against the bar, and the samples over the run (a quarter in, half, three quarters, the end).
    samples = [int(s) / 1024 for s in facts.get("imp_rss_samples_kib", "").split(",") if s]
    peak = num("imp_rss_kib") / 1024
    flat = len(samples) == 4 and max(samples[1:]) - samples[0] <= max(2.0, 0.05 * samples[0])
    table.append((f"import {lines} lines: RSS of the import", "-", "-", "-", "-", "-",
                  f"peak {peak:.1f} MiB; {' -> '.join(f'{s:.1f}' for s in samples)} MiB over the run"
                  + (" (flat)" if flat else " (grows)"),
                  "<= 64 MiB, flat", "PASS" if 0 < peak <= 64 and flat else "FAIL", 0))
    if "imp_p1_busy_1" in rows:
        rounds = int(facts.get("imp_rounds", "1") or 1)
        ratios, names = [], ["imp_p1_quiet_1"]
        for k in range(1, rounds + 1):
            busy, before, after = f"imp_p1_busy_{k}", f"imp_p1_quiet_{k}", f"imp_p1_quiet_{k + 1}"
            names += [busy, after]
            quiet = [rps(n) for n in (before, after) if n in rows]
            if busy in rows and quiet:
                ratios.append(ratio(rps(busy), sum(quiet) / len(quiet)))
        ratios.sort()
        r = ratios[len(ratios) // 2] if ratios else 0.0
        alive = all(facts.get(f"imp_busy_alive_{k}") == "1" for k in range(1, rounds + 1))
        failures = sum(rows[n]["non2xx"] + rows[n]["errors"] for n in names if n in rows)
        busy_rps = [rps(f"imp_p1_busy_{k}") for k in range(1, rounds + 1)]
        table.append((f"P1 beside an import at {facts.get('imp_busy_rate', '?')}/s", facts.get("hit_conns"),
                      f"{sorted(busy_rps)[len(busy_rps) // 2]:.0f}", "-", "-", "P1 quiet on either side",
                      f"median {r:.2f}x of {len(ratios)} rounds ({', '.join(f'{x:.2f}' for x in ratios)}); deliveries per round "
                      + ", ".join(facts.get(f"imp_busy_calls_{k}", "?") for k in range(1, rounds + 1)) + "; import process "
                      + ", ".join(facts.get(f"imp_busy_import_cores_{k}", "?") for k in range(1, rounds + 1)) + " cores"
                      + ("" if alive else "; an import ended before its row did"),
                      ">= 0.90x quiet", "PASS" if r >= 0.9 and alive and failures == 0 else "FAIL", failures))
tail = rows.get("pw_tail")
if tail:
    p99 = ms(tail["p99"]) or 1e9
    scenario("pw_tail", f"tail at {facts.get('tail_rate')}/s", facts.get("hit_conns"), "-", "p99 <= 5ms", f"{p99:.2f}ms", p99 <= 5)

header = ("scenario", "conns", "req/s", "p50", "p99", "baseline", "result", "bar", "verdict", "failed")
widths = [max(len(str(row[i])) for row in table + [header]) for i in range(len(header))]
print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
for row in table:
    print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
if interleaved:
    print()
    print(f"Interleaved rounds ({facts.get('rounds', '?')} per comparison, rows alternating which goes first):")
    for line in interleaved:
        print(line)

def mib(key):
    return float(facts.get(key, "0") or 0) / 1024
idle = mib("rss_1000_conns_kib")
start, end = mib("rss_soak_start_kib"), mib("rss_soak_end_kib")
print()
print(f"P3 memory: RSS with 1000 open connections {idle:.1f} MiB (bar <= 64 MiB): {'PASS' if 0 < idle <= 64 else 'FAIL'}")
if end:
    growth = end - start
    flat = growth <= max(2.0, 0.05 * start)
    print(f"P3 memory: {facts.get('soak_seconds')}s at P1 load: RSS {start:.1f} -> {end:.1f} MiB "
          f"(samples {facts.get('rss_soak_samples_kib', '')} KiB): {'PASS' if flat else 'FAIL'} (flat: growth <= max(2 MiB, 5%))")
print(f"pushwarden error log lines: {facts.get('error_lines', '?')}")
cpu = [(k[len("cpu_"):], v) for k, v in facts.items() if k.startswith("cpu_") and not k.startswith(("cpu_warmup", "cpu_ab_", "cpu_lim_", "cpu_esp_", "cpu_intro_"))]
if cpu:
    print("CPU during each scenario, in cores of the machine's " + facts.get("nproc", "?") + " (processes using under 1%/s left out):")
    for name, value in cpu:
        print(f"  {name:16} {value}")
if "pw_hit_introspect_introspection_calls" in facts:
    print(f"introspection calls during pw_hit_introspect (0: every session came from the cache): {facts['pw_hit_introspect_introspection_calls']}")
calls = {k[: -len("_upstream_calls")]: v for k, v in facts.items() if k.endswith("_upstream_calls")}
if calls:
    print("upstream calls during hit scenarios (0: every request was a dedupe hit): "
          + ", ".join(f"{k} {v}" for k, v in sorted(calls.items())))
