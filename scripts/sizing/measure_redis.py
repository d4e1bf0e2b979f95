#!/usr/bin/env python3
"""What one registration costs Redis: commands, bytes on the wire and memory, for docs/sizing.md.

Starts redis-server (no persistence), mock-upstream (a Voyado stand-in, no latency) and
`pushwarden serve` on free loopback ports in a scratch directory, registers N new installations
(each a new contact: a forward), then the same N again (dedupe hits), and prints per request the
Redis commands (INFO commandstats, scripts' own commands included), the bytes into and out of
Redis (INFO stats), and the growth of used_memory; then MEMORY USAGE of each key kind. A few
requests are also watched with MONITOR (monitor.txt) to tell the sidecar's commands from those
its scripts run. Every process it starts is ended by its pid.

    BIN_DIR=.build/debug N=40000 python3 scripts/sizing/measure_redis.py
    ENC=0 (no store.encryption_key)  RATE=0 (no rate limits)  UPSTREAMS=2 (a shadow too)
    PROVIDER=voidhash (a dry_run emulating Voidhash, which keeps an identity)

CPU figures it prints are only meaningful on an idle machine; docs/sizing.md takes CPU from the
benchmark instead.
"""
import base64, ctypes, hashlib, hmac, json, os, signal, socket, subprocess, sys, tempfile, time, urllib.request, concurrent.futures as cf

BIN = os.path.abspath(os.environ.get("BIN_DIR", ".build/debug"))
os.chdir(tempfile.mkdtemp(prefix="pw-sizing-"))
print("scratch directory", os.getcwd())
N = int(os.environ.get("N", "2000"))
ENC = os.environ.get("ENC", "1") == "1"
UP = int(os.environ.get("UPSTREAMS", "1"))
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
rp, mp, lp, ap = free_port(), free_port(), free_port(), free_port()
secret = os.urandom(32).hex()
env = dict(os.environ, SESS=secret, VKEY="bench-key", STOREKEY=base64.b64encode(os.urandom(32)).decode())
store = "store:\n  encryption_key: {env: STOREKEY}\n" if ENC else ""
ups = ""
for i in range(UP):
    if os.environ.get("PROVIDER") == "voidhash":
        ups += f"""      - name: voidhash{i if i else ''}
        provider: dry_run
        emulates: voidhash
        role: {'primary' if i == 0 else 'shadow'}
"""
        continue
    ups += f"""      - name: voyado{i if i else ''}
        provider: voyado
        base_path: http://127.0.0.1:{mp}/api/v1/acme/abc123/default
        api_key: {{env: VKEY}}
        role: {'primary' if i == 0 else 'shadow'}
        timeout: 5s
"""
rate = "      rate_limits: {register: 20/min, unregister: 40/min, events: 120/min}\n" if os.environ.get("RATE", "1") == "1" else ""
policy = f"""version: 1
{store}apps:
  shop:
    session:
      type: jwt
      algorithms: [HS256]
      hmac_secret: {{env: SESS}}
      issuer: https://auth.size
      audience: size
    client:
      platforms: [ios, android]
{rate}      max_installations: 20
    dedupe:
      refresh_after: 7d
    inventory:
      expire_after: 270d
    upstreams:
{ups}"""
open("policy.yaml", "w").write(policy)
procs = []
def die_with_parent():
    """Children end when this script does, however it ends (PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
def spawn(argv, log):
    p = subprocess.Popen(argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    procs.append(p)
    return p
def rcli(*a):
    return subprocess.run(["redis-cli", "-p", str(rp), *a], capture_output=True, text=True).stdout
def info(section):
    out = {}
    for line in rcli("INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1); out[k] = v.strip()
    return out
def cmdstats():
    out = {}
    for k, v in info("commandstats").items():
        parts = dict(x.split("=") for x in v.split(","))
        out[k.replace("cmdstat_", "")] = int(parts["calls"])
        out["usec:" + k.replace("cmdstat_", "")] = int(parts["usec"])
    return out
def b64u(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
def jwt(sub):
    h = b64u(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    now = int(time.time())
    c = b64u(json.dumps({"sub": sub, "iss": "https://auth.size", "aud": "size", "iat": now, "exp": now + 3600}).encode())
    s = b64u(hmac.new(secret.encode(), f"{h}.{c}".encode(), hashlib.sha256).digest())
    return f"{h}.{c}.{s}"
def post(path, tok, body):
    req = urllib.request.Request(f"http://127.0.0.1:{lp}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {tok}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r: return json.loads(r.read())
def wait(fn, secs, what):
    end = time.time() + secs
    while time.time() < end:
        try:
            if fn(): return
        except Exception: pass
        time.sleep(0.1)
    raise SystemExit(f"{what} never came up")
try:
    spawn(["redis-server", "--port", str(rp), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], "redis.log")
    wait(lambda: rcli("PING").strip() == "PONG", 10, "redis")
    spawn([f"{BIN}/mock-upstream", "--port", str(mp), "--latency-ms", "0", "--key", "bench-key"], "mock.log")
    spawn([f"{BIN}/pushwarden", "serve", "--policy", "policy.yaml", "--listen", f"127.0.0.1:{lp}", "--admin", f"127.0.0.1:{ap}",
           "--redis", f"redis://127.0.0.1:{rp}", "--log-level", "warning"], "pw.log")
    wait(lambda: urllib.request.urlopen(f"http://127.0.0.1:{ap}/readyz", timeout=1).status == 200, 30, "pushwarden")
    # warm-up: one registration so scripts are loaded, connections open
    post("/v1/apps/shop/installations", jwt("warm"), {"platform": "ios", "push_token": "ff" * 32, "app_version": "1.0.0"})
    post("/v1/apps/shop/installations", jwt("warm"), {"platform": "ios", "push_token": "ff" * 32, "app_version": "1.0.0"})
    time.sleep(1)
    toks = [(jwt(f"contact-{i:07d}"), hashlib.sha256(f"t{i}".encode()).hexdigest()) for i in range(N)]
    def phase(name, fn):
        time.sleep(1.5)
        c0, s0, m0 = cmdstats(), info("stats"), int(info("memory")["used_memory"]); u0 = info("cpu")
        t0 = time.time()
        with cf.ThreadPoolExecutor(16) as ex: outs = list(ex.map(fn, toks))
        dt = time.time() - t0
        time.sleep(1.5)  # let off-path writes (inventory touches) land
        c1, s1, m1 = cmdstats(), info("stats"), int(info("memory")["used_memory"]); u1 = info("cpu")
        d = {k: c1.get(k, 0) - c0.get(k, 0) for k in c1 if c1.get(k, 0) - c0.get(k, 0) > 0}
        d.pop("info", None); d.pop("usec:info", None)
        usec = {k[5:]: v for k, v in d.items() if k.startswith("usec:")}
        d = {k: v for k, v in d.items() if not k.startswith("usec:")}
        usec_line = f"   command execution in redis per request: {sum(v for k, v in usec.items() if not k.startswith('x'))/N:.1f} us (" + ", ".join(f"{k} {v/N:.1f}" for k, v in sorted(usec.items()) if v/N >= 0.05) + ")"
        res = {}
        for o in outs:
            for u, v in o.get("upstreams", {}).items(): res[f"{u}={v}"] = res.get(f"{u}={v}", 0) + 1
        inb = int(s1["total_net_input_bytes"]) - int(s0["total_net_input_bytes"])
        outb = int(s1["total_net_output_bytes"]) - int(s0["total_net_output_bytes"])
        print(f"== {name}: {N} requests in {dt:.1f}s, outcomes {res}")
        print(f"   commands per request: " + ", ".join(f"{k} {v/N:.2f}" for k, v in sorted(d.items())) + f"; total {sum(d.values())/N:.2f}")
        print(f"   net bytes per request: into redis {inb/N:.0f}, out of redis {outb/N:.0f}  (INFO calls add a little)")
        print(f"   used_memory delta per request: {(m1-m0)/N:.0f} B")
        cpu = sum(float(u1[k]) - float(u0[k]) for k in ("used_cpu_sys", "used_cpu_user"))
        print(f"   redis CPU per request: {cpu*1e6/N:.1f} us (includes ~3 s of idle polling around the phase)")
        print(usec_line)
    reg = lambda t: post("/v1/apps/shop/installations", t[0], {"platform": "ios", "push_token": t[1], "app_version": "1.0.0"})
    # MONITOR a few requests: top-level commands (from the sidecar) apart from those a script runs ("lua")
    mon = subprocess.Popen(["redis-cli", "-p", str(rp), "monitor"], stdout=open("monitor.txt", "w"), preexec_fn=die_with_parent); procs.append(mon)
    time.sleep(2.5)
    def mark(m): rcli("ECHO", m); time.sleep(1.2)
    few = [(jwt(f"mon-{i}"), hashlib.sha256(f"m{i}".encode()).hexdigest()) for i in range(5)]
    mark("MISS"); [reg(t) for t in few]; time.sleep(1); mark("HIT"); [reg(t) for t in few]; time.sleep(1); mark("END")
    mon.terminate(); mon.wait(5)
    phase("miss (new installation, forwarded)", reg)
    phase("hit (same registration again, unchanged)", reg)
    # memory per key kind, sampled
    def sample(pattern, n=200):
        keys = rcli("--scan", "--pattern", pattern, ).split()[:n]
        if not keys: return 0, 0
        tot = sum(int(rcli("MEMORY", "USAGE", k, "SAMPLES", "0").strip() or 0) for k in keys)
        return tot / len(keys), len(keys)
    print("== MEMORY USAGE per key (sampled):")
    for pat in ["pw:v2:{*}:reg", "pw:v2:{*}:id", "pw:v2:{c:*}:inv", "pw:v2:{c:*}:rate:*", "pw:v2:{inv:*}:h:*", "pw:v2:{inv:*}:seen"]:
        avg, n = sample(pat)
        print(f"   {pat}: {avg:.0f} B avg over {n} keys")
    print("   dbsize", rcli("DBSIZE").strip(), "keys for", N + 1, "installations")
    seen = rcli("--scan", "--pattern", "pw:v2:{inv:*}:seen", ).split()
    tot = sum(int(rcli("MEMORY", "USAGE", k, "SAMPLES", "0").strip()) for k in seen)
    card = sum(int(rcli("ZCARD", k).strip()) for k in seen)
    print(f"   seen shards: {len(seen)} keys, {card} members, {tot/ max(card,1):.0f} B per member")
    print("   used_memory total", info("memory")["used_memory"], "dataset", info("memory").get("used_memory_dataset"))
    print(f"   keys by kind:", subprocess.run(f"redis-cli -p {rp} --scan | sed -E 's/\\{{[^}}]*\\}}/{{}}/; s/:h:.*/:h:*/; s/:rate:.*/:rate:*/' | sort | uniq -c", shell=True, capture_output=True, text=True).stdout)
finally:
    for p in reversed(procs):
        p.terminate()
        try: p.wait(10)
        except Exception: p.kill()
