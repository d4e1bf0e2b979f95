#!/usr/bin/env python3
"""The soak behind soak.check.sh: the release binary served the way production serves it, on a real
Redis (and once on the in-memory store), every background task at short intervals, mixed traffic
from a small bounded driver. Loopback only; Python's standard library and the openssl CLI only.

    soak.py --binary PATH          the whole soak (what soak.check.sh runs)
    soak.py standins --port-file F --jwks FILE --introspect-token T --voyado-key K
                                   the loopback stand-ins (a separate process, started by the soak)

Every run gets, from the policy in policies/ it is named after (its session, client and dedupe
blocks as written):
- the admin block (the server-to-server API on, list and erase are driven);
- inventory.expire_after: 3s (the expiry sweeper passes every 300 ms and retires what idles);
- client.max_installations: 5 (rotations and new tokens evict) and rate limits high enough
  that the driver's contacts are rarely refused (429s are counted, never a failure);
- a second upstream, role shadow, provider voyado, on the flaky stand-in (500 for about one call in
  eight, 400 for one in thirty: retries, the circuit breaker and, on Redis, dead letters), queued
  on Redis so the outbox workers run;
- SIGHUP every 3 s, one reload in four of a file with an unknown key (refused: the two error lines
  that refusal writes are the only ones explained).
A run fails on: the process ending other than by our SIGTERM (exit 0), any 5xx, a request nobody
answered, an error line not explained by an injected fault, a line on stderr that is not the JSON
log, reloads the metrics do not count, or RSS still climbing (see rss_verdict).
"""
import argparse
import base64
import collections
import ctypes
import hashlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VOYADO_PREFIX = "/api/v1/acme/abc123/default"
RELOAD_EVERY = 3.0
RSS_MARGIN_KIB = 4 * 1024
EXPIRE_AFTER = "3s"
# The error lines one refused reload writes (Sidecar.reloadRefused): the fault we inject.
RELOAD_REFUSAL_MESSAGES = {"policy reload refused; the running policy stays", "policy diagnostic"}


# ---------------------------------------------------------------------------------------------
# Loopback stand-ins: a Voyado upstream (ok and flaky), the JWKS of an identity provider, an
# RFC 7662 introspection endpoint. One threaded HTTP/1.1 server, keep-alive, a process of its own.

def standins(args):
    stats = collections.Counter()
    lock = threading.Lock()
    rng = random.Random(7)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def answer(self, status, body=b"", headers=()):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/jwks.json":
                with open(args.jwks, "rb") as f:
                    body = f.read()
                with lock:
                    stats["jwks 200"] += 1
                return self.answer(200, body, [("Content-Type", "application/json"), ("Cache-Control", "max-age=60")])
            if self.path == "/stats":
                with lock:
                    body = json.dumps(dict(stats)).encode()
                return self.answer(200, body, [("Content-Type", "application/json")])
            self.answer(404)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/introspect":
                return self.introspect(body)
            for kind in ("ok", "flaky"):
                if self.path.startswith(f"/{kind}{VOYADO_PREFIX}/"):
                    return self.voyado(kind, self.path[len(kind) + 1 + len(VOYADO_PREFIX):], body)
            self.answer(404)

        def voyado(self, kind, endpoint, body):
            if self.headers.get("Authorization") != f"Bearer {args.voyado_key}":
                status = 401
            else:
                roll = rng.random() if kind == "flaky" else 1.0
                status = 500 if roll < 0.125 else 400 if roll < 0.16 else 202
            with lock:
                stats[f"voyado-{kind} {endpoint} {status}"] += 1
            if status == 202 and endpoint == "/events":
                try:
                    count = len(json.loads(body)["events"])
                except (ValueError, KeyError, TypeError):
                    count = 0
                return self.answer(202, json.dumps({"accepted": count}).encode(), [("Content-Type", "application/json")])
            if status == 202:
                return self.answer(202)
            code = {500: "internal", 400: "invalid_request", 401: "unauthorized"}[status]
            envelope = {"error": {"code": code, "message": "injected by the soak", "request_id": "soak"}}
            self.answer(status, json.dumps(envelope).encode(), [("Content-Type", "application/json")])

        def introspect(self, body):
            if self.headers.get("Authorization") != f"Bearer {args.introspect_token}":
                with lock:
                    stats["introspect 401"] += 1
                return self.answer(401)
            token = urllib.parse.parse_qs(body.decode()).get("token", [""])[0]
            parts = token.split(".")
            if len(parts) == 3 and parts[0] == "sess":
                answer = {"active": True, "contact_id": bytes.fromhex(parts[1]).decode(), "exp": int(time.time()) + 3600}
            else:
                answer = {"active": False}
            with lock:
                stats[f"introspect active={answer['active']}"] += 1
            self.answer(200, json.dumps(answer).encode(), [("Content-Type", "application/json")])

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            with lock:   # a connection the sidecar dropped (its 1 s timeout on a slow answer)
                stats["connection dropped by the sidecar"] += 1

    server = Server(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.serve_forever()


# ---------------------------------------------------------------------------------------------
# Keys and session tokens.

def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def openssl(*args, data=None):
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True).stdout


class Keys:
    """One P-256 key (kid soak-es) and one RSA-2048 key (kid soak-rs), made for this soak."""

    def __init__(self, work):
        self.es = os.path.join(work, "es.pem")
        self.rs = os.path.join(work, "rs.pem")
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.es)
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", self.rs)
        point = openssl("pkey", "-in", self.es, "-pubout", "-outform", "DER")[-65:]
        modulus = openssl("rsa", "-in", self.rs, "-noout", "-modulus").decode().strip().split("=", 1)[1]
        self.jwk_es = {"kty": "EC", "crv": "P-256", "kid": "soak-es", "alg": "ES256", "use": "sig",
                       "x": b64u(point[1:33]), "y": b64u(point[33:])}
        self.jwk_rs = {"kty": "RSA", "kid": "soak-rs", "alg": "RS256", "use": "sig",
                       "n": b64u(bytes.fromhex(modulus)), "e": b64u((65537).to_bytes(3, "big"))}

    @staticmethod
    def der_to_raw(der):
        """An ECDSA-Sig-Value (SEQUENCE of two INTEGERs) as JWS wants it: r and s, 32 bytes each."""
        i = 2 if der[1] < 0x80 else 3
        out = b""
        for _ in range(2):
            assert der[i] == 0x02
            n = der[i + 1]
            out += der[i + 2:i + 2 + n].lstrip(b"\0").rjust(32, b"\0")
            i += 2 + n
        return out

    def mint(self, alg, claims):
        header = {"alg": alg, "typ": "JWT", "kid": "soak-es" if alg == "ES256" else "soak-rs"}
        signing_input = (b64u(json.dumps(header).encode()) + "." + b64u(json.dumps(claims).encode())).encode()
        signature = openssl("dgst", "-sha256", "-sign", self.es if alg == "ES256" else self.rs, data=signing_input)
        if alg == "ES256":
            signature = self.der_to_raw(signature)
        return signing_input.decode() + "." + b64u(signature)


# ---------------------------------------------------------------------------------------------
# Policies: each file of policies/ rewritten for loopback and short intervals.

class Spec:
    """How one policy runs: the store, the seconds of traffic and how its upstream gets to loopback."""

    def __init__(self, policy, store, seconds, upstream, note):
        self.policy, self.store, self.seconds, self.upstream, self.note = policy, store, seconds, upstream, note

    @property
    def name(self):
        return f"{os.path.splitext(self.policy)[0]}/{self.store}"


def plan(long_seconds):
    keep, loop, stand_in = "kept (dry_run)", "kept, base_path on the loopback Voyado stand-in", "a dry_run emulating it (a real provider needs a real key)"
    return [
        Spec("example.yaml", "redis", long_seconds, "keep", keep),
        Spec("example.yaml", "memory", 12, "keep", keep),
        Spec("idp.yaml", "redis", 20, "keep", keep + "; jwks_url on the loopback JWKS stand-in, a second key added mid-run"),
        Spec("introspect.yaml", "redis", 10, "keep", keep + "; url on the loopback introspection stand-in"),
        Spec("voyado.yaml", "redis", 10, "voyado-loopback", loop + "; ES256 sessions, half of them in the cookie"),
        Spec("dry-run-voidhash.yaml", "redis", 8, "keep", keep),
        Spec("voidhash.yaml", "redis", 6, "dry_run:voidhash", stand_in),
        Spec("fluxer.yaml", "redis", 6, "dry_run:fluxer", stand_in + "; the client's X-Fluxer-Session sent"),
        Spec("nativenotify.yaml", "redis", 6, "dry_run:nativenotify", stand_in),
        Spec("pushnotice.yaml", "redis", 6, "dry_run:pushnotice", stand_in),
    ]


def rewrite(text, spec, ports, work):
    """The policy's text with the soak's changes; every change is checked to have happened."""
    def sub(pattern, replacement, text, count=1, required=True):
        new, n = re.subn(pattern, replacement, text, count=count, flags=re.M)
        if required and n == 0:
            raise SystemExit(f"soak: {spec.policy}: cannot rewrite (no match for {pattern!r})")
        return new

    text = sub(r"^version: 1\b.*$", "version: 1\nadmin:\n  token: {env: PUSHWARDEN_ADMIN_TOKEN}", text)
    text = sub(r"^(\s+)jwks_file: \S+", rf"\1jwks_file: {work}/jwks.json", text, required=False)
    if spec.policy == "idp.yaml":
        text = sub(r"^(\s+)jwks_url: \S+", rf"\1jwks_url: http://127.0.0.1:{ports['standins']}/jwks.json", text)
        text = sub(r"^\s+jwks_file: \S+.*\n", "", text)  # no fallback: a failed fetch must stop the start
    if spec.policy == "introspect.yaml":
        text = sub(r"^(\s+)url: \S+", rf"\1url: http://127.0.0.1:{ports['standins']}/introspect", text)
    text = sub(r"^\s+rate_limits: .*\n", "", text, required=False)
    text = sub(r"^\s+max_installations: .*\n", "", text, required=False)
    text = sub(r"^    inventory:\n(      .*\n)+", "", text, required=False)
    text = sub(r"^(    client:.*\n)", r"\1      max_installations: 5\n"
               r"      rate_limits: {register: 600/min, unregister: 600/min, events: 600/min}\n", text)
    head, sep, upstreams = text.partition("\n    upstreams:")
    if not sep or re.search(r"^ {0,4}[^ #\n]", upstreams.split("\n", 1)[1], re.M):
        raise SystemExit(f"soak: {spec.policy}: upstreams is not the last block of its only app")
    if spec.upstream == "keep" or spec.upstream == "voyado-loopback":
        block = upstreams.split("\n", 1)[1]
        if spec.upstream == "voyado-loopback":
            block = sub(r"^(\s+)base_path: \S+", rf"\1base_path: http://127.0.0.1:{ports['standins']}/ok{VOYADO_PREFIX}", block)
            block = sub(r"^(\s+)api_key: .*$", r"\1api_key: {env: SOAK_VOYADO_KEY}", block)
        if block.count("- name:") != 1:
            raise SystemExit(f"soak: {spec.policy}: expected one upstream")
        if not re.search(r"^\s+role:", block, re.M):
            block = sub(r"^(\s+)- name: (\S+)(.*)$", r"\1- name: \2\3\n\1  role: primary", block)
    else:
        emulates = spec.upstream.split(":", 1)[1]
        name = re.search(r"- name: (\S+)", upstreams).group(1)
        extra = {"fluxer": "        session_header: X-Fluxer-Session\n", "pushnotice": "        slug: ktso\n"}.get(emulates, "")
        block = (f"      - name: {name}\n        provider: dry_run\n        emulates: {emulates}\n{extra}"
                 f"        role: primary\n        timeout: 2s\n")
    queued = spec.store == "redis"
    flaky = (f"      - name: flaky\n        provider: voyado\n"
             f"        base_path: http://127.0.0.1:{ports['standins']}/flaky{VOYADO_PREFIX}\n"
             f"        api_key: {{env: SOAK_VOYADO_KEY}}\n        role: shadow\n"
             f"        delivery: {'queued' if queued else 'sync'}\n        timeout: 1s\n"
             f"        retry: {{attempts: 2, backoff: 50ms, max_backoff: 400ms}}\n"
             + ("        queue: {max_age: 3s, claim_after: 2s}\n" if queued else "")
             + "        circuit: {failures: 25, within: 5s, open_for: 2s}\n")
    return (head + f"\n    inventory:\n      expire_after: {EXPIRE_AFTER}\n    upstreams:\n"
            + block.rstrip("\n") + "\n" + flaky)


def session_shape(text):
    """What a token for the policy's only app must look like."""
    def value(key):
        m = re.search(rf"^\s+{key}: (\S+)", text, re.M)
        return m.group(1) if m else None
    algorithms = re.search(r"algorithms: \[([^\]]*)\]", text)
    return {
        "app": re.search(r"^apps:\n  ([a-z0-9_-]+):", text, re.M).group(1),
        "type": value("type"),
        "issuer": value("issuer"), "audience": value("audience"),
        "claim": value("contact_claim") or "sub",
        "algorithms": [a.strip() for a in algorithms.group(1).split(",")] if algorithms else [],
        "cookie": value("cookie"),
        "platforms": [p.strip() for p in re.search(r"platforms: \[([^\]]*)\]", text).group(1).split(",")],
    }


# ---------------------------------------------------------------------------------------------
# The driver: a few threads, each owning its contacts, paced to a total rate, stopping by itself.

class Driver:
    def __init__(self, spec, shape, sessions, ports, admin_token, seconds, rate, threads=4):
        self.spec, self.shape, self.sessions = spec, shape, sessions
        self.ports, self.admin_token = ports, admin_token
        self.deadline = time.monotonic() + seconds
        self.interval = threads / rate
        self.counts = collections.Counter()
        self.server_errors = []   # (what, status, body)
        self.no_answer = []       # (what, error)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        contacts = sorted(sessions)
        self.threads = [threading.Thread(target=self.loop, args=(i, contacts[i::threads]), daemon=True) for i in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def record(self, what, status, body):
        with self.lock:
            self.counts[(what, status)] += 1
            if status >= 500 and len(self.server_errors) < 20:
                self.server_errors.append((what, status, body[:300]))

    def loop(self, index, contacts):
        rng = random.Random(index * 7919 + len(self.spec.name))
        conns = {}
        state = {c: {"registered": {}, "pool": self.pool(c)} for c in contacts}
        next_at = time.monotonic()
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            contact = rng.choice(contacts)
            try:
                self.step(rng, conns, contact, state[contact])
            except (OSError, http.client.HTTPException) as e:
                for c in conns.values():
                    c.close()
                conns.clear()
                with self.lock:
                    self.no_answer.append((contact, repr(e)))
                    self.counts[("no answer", 0)] += 1
                if len(self.no_answer) > 50:
                    return
                time.sleep(0.2)
            next_at += self.interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_at = time.monotonic()
        for c in conns.values():
            c.close()

    def pool(self, contact):
        """Six tokens per contact, ever the same: the key space stays bounded, so memory should too."""
        tokens = []
        for i in range(6):
            digest = hashlib.sha256(f"{self.spec.name}/{contact}/{i}".encode()).hexdigest()
            platform = self.shape["platforms"][i % len(self.shape["platforms"])]
            if platform == "web":
                platform = "ios"
            if platform == "ios" and not (self.spec.upstream == "dry_run:pushnotice"):
                tokens.append(("ios", digest))
            else:
                tokens.append(("android", f"{digest[:22]}:APA91b{digest * 2}"[:160]))
        return tokens

    def request(self, conns, port, method, path, body, headers, what):
        conn = conns.get(port)
        if conn is None:
            conn = conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        data = json.dumps(body).encode() if body is not None else None
        hdrs = dict(headers)
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        response = conn.getresponse()
        payload = response.read()
        self.record(what, response.status, payload.decode(errors="replace"))
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
            del conns[port]
        return response.status, payload

    def client(self, conns, contact, path, body, what, session=None):
        app = self.shape["app"]
        token = session or self.sessions[contact]
        headers = {}
        if self.shape["cookie"] and sum(contact.encode()) % 2:
            headers["Cookie"] = f"{self.shape['cookie']}={token}"
        else:
            headers["Authorization"] = f"Bearer {token}"
        if self.spec.upstream == "dry_run:fluxer":
            headers["X-Fluxer-Session"] = f"fluxer-session-{contact.encode().hex()}"
        return self.request(conns, self.ports["client"], "POST", f"/v1/apps/{app}{path}", body, headers, what)

    def admin(self, conns, contact, method, what):
        path = f"/v1/apps/{self.shape['app']}/contacts/{urllib.parse.quote(contact, safe='')}/installations"
        return self.request(conns, self.ports["admin"], method, path, None,
                            {"Authorization": f"Bearer {self.admin_token}"}, what)

    def step(self, rng, conns, contact, s):
        registered, pool = s["registered"], s["pool"]
        free = [t for t in pool if t[1] not in registered]
        r = rng.random()
        if r < 0.26 and free:                                   # a token new to the sidecar
            platform, token = rng.choice(free)
            body = {"platform": platform, "push_token": token, "app_version": "1.0.0"}
            status, _ = self.client(conns, contact, "/installations", body, "register new")
            if status == 202:
                registered[token] = body
        elif r < 0.50 and registered:                           # the same again: a dedupe hit
            token = rng.choice(list(registered))
            self.client(conns, contact, "/installations", registered[token], "register repeat")
        elif r < 0.58 and registered and free:                  # a rotation
            old = rng.choice(list(registered))
            platform, token = next(((p, t) for p, t in free if p == registered[old]["platform"]), (None, None))
            if token is None:
                return
            body = {"platform": platform, "push_token": token, "previous_push_token": old, "app_version": "1.0.0"}
            status, _ = self.client(conns, contact, "/installations", body, "register rotation")
            if status == 202:
                del registered[old]
                registered[token] = {k: v for k, v in body.items() if k != "previous_push_token"}
        elif r < 0.62 and registered:                           # an update: forwarded again
            token = rng.choice(list(registered))
            body = dict(registered[token], app_version=rng.choice(["1.0.1", "1.1.0", "2.0.0"]))
            status, _ = self.client(conns, contact, "/installations", body, "register update")
            if status == 202:
                registered[token] = body
        elif r < 0.72:                                          # a logout (now and then of a token never registered)
            token = rng.choice(list(registered)) if registered and rng.random() < 0.85 else rng.choice(pool)[1]
            self.client(conns, contact, "/installations/unregister", {"push_token": token}, "unregister")
            registered.pop(token, None)
        elif r < 0.84:                                          # events
            events = [{"type": rng.choice(["delivered", "opened", "dismissed"]), "message_id": f"m-{rng.randrange(10**6)}",
                       "recipient_id": f"r-{rng.randrange(10**6)}",
                       "occurred_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "app_state": "foreground"}
                      for _ in range(rng.randint(1, 5))]
            self.client(conns, contact, "/events", {"events": events}, "events")
        elif r < 0.92:                                          # the backend lists a contact's devices
            self.admin(conns, contact, "GET", "admin list")
        elif r < 0.94:                                          # and erases a contact (GDPR Art. 17)
            status, _ = self.admin(conns, contact, "DELETE", "admin erase")
            if status == 202:
                registered.clear()
        elif r < 0.97:                                          # a client mistake
            self.client(conns, contact, "/installations", {"platform": "ios", "push_token": "abc"}, "bad token")
        else:                                                   # a session that is no session
            self.client(conns, contact, "/installations", {"platform": free[0][0] if free else "android",
                        "push_token": (free or pool)[0][1]}, "bad session", session="not-a-session")


# ---------------------------------------------------------------------------------------------
# The soak itself.

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """Children end when the soak does, however it ends (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)


def http_get(port, path, headers=None, timeout=5):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def wait_for(check, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no {what} after {seconds} s")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_verdict(samples, seconds):
    """Whether RSS still climbs once the driver's bounded key space is warm: fails when the last
    third's lowest sample is above the middle third's lowest by more than RSS_MARGIN_KIB.

    The first third is warm-up (connections, caches filling to the driver's bounded key space,
    allocator arenas per thread) and is not judged. The floors (minimums) are compared, not a
    minimum with a maximum: under a steady leak the last third's minimum sits right at the middle
    third's maximum (they are adjacent samples), so that comparison only sees a jump, while the
    floors move apart by a third of the run's leak; and a floor ignores a burst that was freed
    again. Runs under 20 s have too few samples for thirds to mean anything: their figures are
    printed, not judged."""
    if seconds < 20 or len(samples) < 9:
        return None, "not judged (run under 20 s)"
    third = len(samples) // 3
    middle, last = samples[third:2 * third], samples[2 * third:]
    mid_floor, last_floor = min(middle), min(last)
    ok = last_floor - mid_floor <= RSS_MARGIN_KIB
    return ok, (f"floors of the middle and last thirds {mid_floor / 1024:.1f} and {last_floor / 1024:.1f} MiB "
                f"(margin {RSS_MARGIN_KIB / 1024:.0f} MiB): " + ("flat" if ok else "STILL GROWING")
                + "; samples " + " ".join(f"{v / 1024:.1f}" for v in samples))


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def metric_sum(metrics, prefix, **labels):
    total = 0.0
    for name, value in metrics.items():
        if name.startswith(prefix + "{") or name == prefix:
            if all(f'{k}="{v}"' in name for k, v in labels.items()):
                total += value
    return total


class Soak:
    def __init__(self, binary, work, rate):
        self.binary, self.work, self.rate = binary, work, rate
        self.children = []
        self.env = dict(os.environ)
        self.env.update({
            "PUSHWARDEN_DEMO_SESSION_SECRET": os.urandom(32).hex(),
            "PUSHWARDEN_ADMIN_TOKEN": os.urandom(32).hex(),
            "INTROSPECT_TOKEN": "soak-introspect-" + os.urandom(8).hex(),
            "SOAK_VOYADO_KEY": "soak-voyado-" + os.urandom(8).hex(),
            "PUSHWARDEN_SHUTDOWN_GRACE": "10",
        })
        self.keys = Keys(work)
        self.write_jwks(rotated=True, path=os.path.join(work, "jwks.json"))
        self.idp_jwks = os.path.join(work, "idp-jwks.json")
        self.write_jwks(rotated=False, path=self.idp_jwks)

    def write_jwks(self, rotated, path):
        keys = [self.keys.jwk_es] + ([self.keys.jwk_rs] if rotated else [])
        with open(path + ".tmp", "w") as f:
            json.dump({"keys": keys}, f)
        os.rename(path + ".tmp", path)

    def spawn(self, argv, **kw):
        p = subprocess.Popen(argv, env=self.env, preexec_fn=die_with_parent, **kw)
        self.children.append(p)
        return p

    def stop_all(self):
        for p in reversed(self.children):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()

    def start_shared(self):
        self.redis_port = free_port()
        self.redis = self.spawn(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", self.work],
                                stdout=open(os.path.join(self.work, "redis.log"), "w"), stderr=subprocess.STDOUT)
        port_file = os.path.join(self.work, "standins.port")
        self.standins = self.spawn([sys.executable, os.path.abspath(__file__), "standins", "--port-file", port_file,
                                    "--jwks", self.idp_jwks, "--introspect-token", self.env["INTROSPECT_TOKEN"],
                                    "--voyado-key", self.env["SOAK_VOYADO_KEY"]])
        wait_for(lambda: os.path.exists(port_file), 10, "stand-ins")
        self.standins_port = int(open(port_file).read())
        wait_for(lambda: self.redis_command("PING") == b"+PONG\r\n", 10, "redis-server")

    def redis_command(self, *words):
        with socket.create_connection(("127.0.0.1", self.redis_port), timeout=5) as s:
            s.sendall(("*%d\r\n" % len(words) + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)).encode())
            return s.recv(4096)

    def sessions(self, spec, shape, contacts):
        if shape["type"] == "introspect":
            # The contact travels in the opaque token as hex: a bearer token has no room for "@" or "ë".
            return {c: f"sess.{c.encode().hex()}.{i}" for i, c in enumerate(contacts)}
        if "HS256" in shape["algorithms"]:
            out = {}
            for c in contacts:
                out[c] = subprocess.run([self.binary, "dev-token", "--policy", spec.path, "--app", shape["app"],
                                         "--contact", c, "--ttl", "3600"], env=self.env, capture_output=True,
                                        check=True, text=True).stdout.strip()
            return out
        now = int(time.time())
        out = {}
        for i, c in enumerate(contacts):
            claims = {"sub": c, shape["claim"]: c, "iat": now - 5, "exp": now + 3600}
            if shape["issuer"]:
                claims["iss"] = shape["issuer"]
            if shape["audience"]:
                claims["aud"] = shape["audience"]
            # Both algorithms where both are allowed; on idp.yaml the RS256 key is served only after
            # the rotation, so those sessions are refused (401) until the keys are fetched again.
            alg = shape["algorithms"][i % len(shape["algorithms"])]
            out[c] = self.keys.mint(alg, claims)
        return out

    def run(self, spec):
        result = {"name": spec.name, "problems": [], "lines": []}
        problems, say = result["problems"], result["lines"].append
        with open(os.path.join(ROOT, "policies", spec.policy)) as f:
            original = f.read()
        ports = {"client": free_port(), "admin": free_port(), "standins": self.standins_port}
        text = rewrite(original, spec, ports, self.work)
        spec.path = os.path.join(self.work, spec.name.replace("/", "-") + ".yaml")
        with open(spec.path, "w") as f:
            f.write(text)
        check = subprocess.run([self.binary, "policy", "check", spec.path], env=self.env, capture_output=True, text=True)
        if check.returncode != 0:
            problems.append(f"the rewritten policy does not load: {check.stdout.strip()} {check.stderr.strip()}")
            return result
        shape = session_shape(text)
        contacts = [f"c{i}-{spec.policy[:3]}" for i in range(16)] + [f"ana+{i}@example.com" for i in range(4)] + ["zoë 7"]
        sessions = self.sessions(spec, shape, contacts)
        if spec.policy == "idp.yaml":
            self.write_jwks(rotated=False, path=self.idp_jwks)
        if spec.store == "redis":
            self.redis_command("FLUSHALL")
        log_path = os.path.join(self.work, spec.name.replace("/", "-") + ".log")
        argv = [self.binary, "serve", "--policy", spec.path, "--listen", f"127.0.0.1:{ports['client']}",
                "--admin", f"127.0.0.1:{ports['admin']}", "--log-level", "info"]
        if spec.store == "redis":
            argv += ["--redis", f"redis://127.0.0.1:{self.redis_port}"]
        stats_before = json.loads(http_get(self.standins_port, "/stats")[1])
        with open(log_path, "w") as log:
            proc = self.spawn(argv, stdout=log, stderr=subprocess.STDOUT)
        started = time.monotonic()
        try:
            wait_for(lambda: proc.poll() is not None or http_get(ports["admin"], "/readyz")[0] == 200, 30, "ready sidecar")
        except RuntimeError as e:
            problems.append(str(e))
        driver = Driver(spec, shape, sessions, ports, self.env["PUSHWARDEN_ADMIN_TOKEN"], spec.seconds, self.rate)
        rss = []
        driven = 0.0
        late_line = None
        reloads = {"ok": 0, "error": 0}
        died = None
        if proc.poll() is None and not problems:
            driver.start()
            t0 = time.monotonic()
            sample_every = 2.0 if spec.seconds >= 30 else 1.0
            next_sample, next_reload, rotated = t0, t0 + RELOAD_EVERY, False
            while time.monotonic() < t0 + spec.seconds:
                now = time.monotonic()
                if proc.poll() is not None:
                    break
                if now >= next_sample:
                    value = rss_kib(proc.pid)
                    if value:
                        rss.append(value)
                    next_sample += sample_every
                if spec.policy == "idp.yaml" and not rotated and now - t0 > spec.seconds * 0.4:
                    self.write_jwks(rotated=True, path=self.idp_jwks)   # the IdP adds a key
                    rotated = True
                if now >= next_reload and now < t0 + spec.seconds - 1.5:
                    n = reloads["ok"] + reloads["error"]
                    invalid = n % 4 == 3
                    with open(spec.path + ".tmp", "w") as f:
                        f.write(text + (f"soak_reload_{n}: refused\n" if invalid else f"# soak reload {n}\n"))
                    os.rename(spec.path + ".tmp", spec.path)
                    proc.send_signal(signal.SIGHUP)
                    reloads["error" if invalid else "ok"] += 1
                    next_reload += RELOAD_EVERY
                time.sleep(0.05)
            driver.join()
            driven = time.monotonic() - t0
            with open(spec.path, "w") as f:
                f.write(text)
            if spec.policy == "idp.yaml" and proc.poll() is None:
                # The key the IdP added mid-run is in force by now (each reload fetched the JWKS).
                late = next(c for i, c in enumerate(contacts) if shape["algorithms"][i % len(shape["algorithms"])] == "RS256")
                platform, token = driver.pool(late)[0]
                status, body = driver.request({}, ports["client"], "POST", f"/v1/apps/{shape['app']}/installations",
                                              {"platform": platform, "push_token": token},
                                              {"Authorization": f"Bearer {sessions[late]}"}, "register after the key rotation")
                late_line = f"a session signed with the key the JWKS added mid-run, after the run: {status}"
                if status != 202:
                    problems.append(f"a session signed with the key the JWKS added mid-run got {status}: {body[:200]!r}")
        metrics = {}
        if proc.poll() is None:
            try:
                metrics = parse_metrics(http_get(ports["admin"], "/metrics")[1])
            except OSError as e:
                problems.append(f"/metrics did not answer: {e!r}")
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                problems.append("did not stop within 20 s of SIGTERM (killed)")
            if rc != 0:
                problems.append(f"exit status {rc} after our SIGTERM")
            ending = f"exit {rc} after our SIGTERM"
        else:
            rc = proc.returncode
            died = (f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}")
            ending = f"DIED by itself after {time.monotonic() - started:.1f} s: {died}"
            problems.append(f"the process died: {died}")
        self.children.remove(proc)
        wall = time.monotonic() - started
        stats_after = json.loads(http_get(self.standins_port, "/stats")[1])
        injected = {k: stats_after.get(k, 0) - stats_before.get(k, 0) for k in stats_after}

        # The requests.
        by_status = collections.Counter()
        for (what, status), n in driver.counts.items():
            by_status[status] += n
        total = sum(by_status.values())
        statuses = ", ".join(f"{s if s else 'no answer'} x{n}" for s, n in sorted(by_status.items()))
        say(f"{total} requests in {driven:.0f} s: {statuses or 'none'}")
        by_what = collections.Counter()
        for (what, status), n in driver.counts.items():
            by_what[f"{what} {status}"] += n
        say("  by kind: " + ", ".join(f"{k} x{n}" for k, n in sorted(by_what.items())))
        if late_line:
            say(late_line)
        fives = sum(n for s, n in by_status.items() if s >= 500)
        if fives:
            problems.append(f"{fives} answers with a 5xx status")
            for what, status, body in driver.server_errors:
                say(f"  5xx: {what}: {status} {body}")
        if driver.no_answer and died is None:
            problems.append(f"{len(driver.no_answer)} requests got no answer: {driver.no_answer[:3]}")
        if total == 0 and died is None:
            problems.append("no traffic was driven")

        # Memory.
        if rss:
            verdict, detail = rss_verdict(rss, spec.seconds)
            say(f"rss MiB: first {rss[0] / 1024:.1f}, last {rss[-1] / 1024:.1f}, max {max(rss) / 1024:.1f} "
                f"({len(rss)} samples); {detail}")
            if verdict is False:
                problems.append("RSS kept growing: " + detail)

        # Background work, as the metrics count it.
        if metrics:
            app = shape["app"]
            got_ok = metric_sum(metrics, "pushwarden_policy_reloads_total", result="ok")
            got_err = metric_sum(metrics, "pushwarden_policy_reloads_total", result="error")
            say(f"reloads: {reloads['ok']} valid and {reloads['error']} refused sent; metrics count ok {got_ok:.0f}, error {got_err:.0f}")
            if (got_ok, got_err) != (reloads["ok"], reloads["error"]):
                problems.append(f"reloads sent ok/error {reloads['ok']}/{reloads['error']}, counted {got_ok:.0f}/{got_err:.0f}")
            removed = {r: metric_sum(metrics, "pushwarden_inventory_removed_total", app=app, reason=r)
                       for r in ("expired", "evicted", "erased")}
            say(f"inventory removed: expired (sweeper) {removed['expired']:.0f}, evicted {removed['evicted']:.0f}, "
                f"erased {removed['erased']:.0f}; dedupe hits {metric_sum(metrics, 'pushwarden_dedupe_hits_total', app=app):.0f}")
            calls = collections.Counter()
            for name, value in metrics.items():
                m = re.match(r'pushwarden_upstream_calls_total\{upstream="([^"]+)",operation="[^"]+",outcome="([^"]+)"\}', name)
                if m:
                    calls[f"{m.group(1)} {m.group(2)}"] += value
            say("upstream calls: " + ", ".join(f"{k} x{v:.0f}" for k, v in sorted(calls.items())))
            extra = []
            if spec.store == "redis":
                extra.append(f"outbox dead letters {metric_sum(metrics, 'pushwarden_outbox_dead_total', app=app):.0f}, "
                             f"depth now {metric_sum(metrics, 'pushwarden_outbox_depth', app=app):.0f}")
            jwks = {k.split('result="')[1].rstrip('"}'): v for k, v in metrics.items() if k.startswith("pushwarden_jwks_fetches_total{")}
            if jwks:
                extra.append("jwks fetches " + ", ".join(f"{k} x{v:.0f}" for k, v in sorted(jwks.items())))
            intro = {k.split('result="')[1].rstrip('"}'): v for k, v in metrics.items() if k.startswith("pushwarden_introspection_calls_total{")}
            if intro:
                extra.append("introspection calls " + ", ".join(f"{k} x{v:.0f}" for k, v in sorted(intro.items())))
            if extra:
                say("; ".join(extra))
            if removed["expired"] == 0 and died is None:
                problems.append("the expiry sweeper retired nothing (inventory.expire_after 3s)")
        faults = {k: v for k, v in injected.items() if v and " 202" not in k and "active=True" not in k and "jwks" not in k}
        say("injected by the stand-ins: " + (", ".join(f"{k} x{v}" for k, v in sorted(faults.items())) or "nothing"))

        # The log.
        levels = collections.Counter()
        unexplained, foreign, explained = [], [], 0
        warnings = collections.Counter()
        with open(log_path, errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                try:
                    entry = json.loads(line)
                    level = entry["level"]
                except (ValueError, KeyError, TypeError):
                    foreign.append(line)
                    continue
                levels[level] += 1
                if level == "warning":
                    warnings[entry.get("msg")] += 1
                if level in ("error", "critical", "fatal"):
                    if entry.get("msg") in RELOAD_REFUSAL_MESSAGES and reloads["error"]:
                        explained += 1
                    else:
                        unexplained.append(line)
        say("log lines: " + ", ".join(f"{k} x{v}" for k, v in sorted(levels.items()))
            + (f" ({explained} errors explained: the refused reloads)" if explained else ""))
        if warnings:
            say("  warnings: " + "; ".join(f"{k} x{v}" for k, v in warnings.most_common(6)))
        if unexplained:
            problems.append(f"{len(unexplained)} error lines no injected fault explains")
            for line in unexplained[:10]:
                say(f"  unexplained: {line[:600]}")
        if foreign:
            problems.append(f"{len(foreign)} lines on stderr that are not the JSON log")
            # A crash report (the Swift runtime's backtracer): its headline and the crashed thread.
            crashed = next((i for i, line in enumerate(foreign) if line.startswith("Thread ") and line.endswith(" crashed:")), None)
            shown = [line for line in foreign if "Program crashed" in line or "Fatal error" in line]
            shown += foreign[crashed:crashed + 16] if crashed is not None else foreign[:20]
            for line in shown:
                if line.strip():
                    say(f"  stderr: {line[:300]}")
        say(f"{ending}; {wall:.1f} s from start to exit")
        return result


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "standins":
        p = argparse.ArgumentParser()
        p.add_argument("cmd")
        p.add_argument("--port-file", required=True)
        p.add_argument("--jwks", required=True)
        p.add_argument("--introspect-token", required=True)
        p.add_argument("--voyado-key", required=True)
        die_with_parent()
        return standins(p.parse_args())
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--long-seconds", type=int, default=int(os.environ.get("SOAK_LONG_SECONDS", "75")))
    p.add_argument("--rate", type=float, default=float(os.environ.get("SOAK_RATE", "120")))
    p.add_argument("--only", default=os.environ.get("SOAK_ONLY", ""), help="comma-separated run names (example/redis,...)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="pushwarden-soak-")
    specs = plan(args.long_seconds)
    unplanned = sorted(set(f for f in os.listdir(os.path.join(ROOT, "policies")) if f.endswith(".yaml"))
                       - {s.policy for s in specs})
    if args.only:
        specs = [s for s in specs if s.name in args.only.split(",")]
    print(f"soak: binary {args.binary}")
    print(f"soak: expire_after {EXPIRE_AFTER}, SIGHUP every {RELOAD_EVERY:.0f} s, about {args.rate:.0f} requests/s from 4 threads")
    print("soak: no policy is skipped: each keeps its upstream or gets a loopback stand-in for it:")
    for s in specs:
        print(f"  {s.name:28} {s.seconds:3} s  upstream {s.note}")
    for f in unplanned:
        print(f"soak: FAIL: policies/{f} has no run: add it to plan() in {os.path.relpath(__file__, ROOT)}")
    soak = Soak(args.binary, work, args.rate)
    passed, failed = 0, []
    try:
        soak.start_shared()
        for spec in specs:
            print(f"--- run {spec.name}", flush=True)
            try:
                result = soak.run(spec)
            except Exception as e:  # a broken run is a failed run, and the others still run
                result = {"name": spec.name, "problems": [f"the soak itself failed: {e!r}"], "lines": []}
            for line in result["lines"]:
                print("  " + line)
            if result["problems"]:
                failed.append(spec.name)
                for problem in result["problems"]:
                    print(f"  FAIL: {problem}")
                print(f"--- {spec.name}: FAILED", flush=True)
            else:
                passed += 1
                print(f"--- {spec.name}: passed", flush=True)
    finally:
        soak.stop_all()
        if os.environ.get("SOAK_KEEP"):
            print(f"soak: policies and logs kept in {work}")
        else:
            subprocess.run(["rm", "-rf", work])
    if unplanned and not args.only:
        failed += [f"policies/{f} (not planned)" for f in unplanned]
    if failed:
        print("soak: failed runs: " + " ".join(failed))
    print(f"soak: {passed} passed, {len(failed)} failed ({time.monotonic() - started:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
