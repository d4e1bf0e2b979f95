#!/usr/bin/env python3
"""Writes N HS256 session tokens (one per line) for the benchmark app, each for its own contact.

An independent implementation (Python's hmac), so the benchmark also exercises interoperability.
"""
import base64, hashlib, hmac, json, sys, time

def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

secret, count, out = sys.argv[1].encode(), int(sys.argv[2]), sys.argv[3]
now = int(time.time())
header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
with open(out, "w") as f:
    for i in range(count):
        claims = {"sub": f"contact-{i}", "iss": "https://auth.bench", "aud": "bench", "iat": now, "exp": now + 3 * 3600}
        payload = b64(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}".encode()
        signature = b64(hmac.new(secret, signing_input, hashlib.sha256).digest())
        f.write(f"{header}.{payload}.{signature}\n")
