import PWCore

/// What the benchmark's sidecar runs with, written once for `scripts/bench.sh` (through
/// `bench-tool policy`) and for `bench-tool profile`.
enum BenchPolicy {
    /// The benchmark's policy: app `bench` with HS256 sessions and, given a JWKS file, app
    /// `benches` with ES256 sessions; both register with one Voyado upstream on `mockPort`.
    /// Secrets come from `BENCH_SESSION_SECRET` and `BENCH_VOYADO_KEY`.
    /// Given `queuedMockPort`, also app `benchq` (HS256) whose upstream is `delivery: queued` to
    /// that port, for the outbox rows (accept, then drain once a mock listens there).
    /// Given `introspectPort`, also app `benchi` whose sessions are introspected at that port
    /// (`mock-upstream --introspect-port`, credential from `BENCH_INTROSPECT_TOKEN`), cached for an
    /// hour so that a warmed cache stays warm, registering with the same upstream.
    /// With `admin`, the server-to-server API is on, its token from `BENCH_ADMIN_TOKEN` (the erase row).
    /// With `reused` (and a JWKS file), app `benches` verifies every token on every request
    /// (`verified_cache: 0`: its row measures verification, though the pool's tokens come round
    /// again), and app `benchr`, the same ES256 sessions with accepted ones kept, is for the
    /// sessions-reused row. With `bytes`, app `benchm` (HS256, like `bench`) for the Redis-bytes
    /// row, whose installations no other row registers. With `importApp`, app `benchimp` (HS256)
    /// whose upstream is `delivery: queued` at `mockPort`, for the import rows: the sidecar's
    /// outbox workers deliver what `pushwarden import` queues.
    /// Every app limits each contact's requests (`client.rate_limits`), as the example policy does,
    /// at rates the rows never reach: what the rows measure is the limit's cost, not its refusals.
    /// App `benchn`, `bench` without the limits, is the row that shows their price.
    static func yaml(mockPort: Int, jwksPath: String? = nil, queuedMockPort: Int? = nil, introspectPort: Int? = nil,
                     admin: Bool = false, reused: Bool = false, bytes: Bool = false, importApp: Bool = false) -> String {
        var text = "version: 1\napps:\n"
        let hs256 = "      algorithms: [HS256]\n      hmac_secret: {env: BENCH_SESSION_SECRET}\n"
        text += app("bench", session: hs256, mockPort: mockPort)
        text += app("benchn", session: hs256, mockPort: mockPort, limited: false)
        if bytes { text += app("benchm", session: hs256, mockPort: mockPort) }
        if importApp { text += app("benchimp", session: hs256, mockPort: mockPort, extra: "        delivery: queued\n") }
        if let jwksPath {
            let es256 = "      algorithms: [ES256]\n      jwks_file: \(jwksPath)\n"
            text += app("benches", session: es256 + (reused ? "      verified_cache: 0\n" : ""), mockPort: mockPort)
            if reused { text += app("benchr", session: es256, mockPort: mockPort) }
        }
        if let introspectPort {
            text += app("benchi", type: "introspect", session: """
                      url: http://127.0.0.1:\(introspectPort)/internal/introspect
                      client_auth: {bearer: {env: BENCH_INTROSPECT_TOKEN}}
                      contact_field: contact_id
                      cache_ttl: 1h
                      timeout: 2s

                """, mockPort: mockPort, claims: false)
        }
        if let queuedMockPort {
            text += app("benchq", session: "      algorithms: [HS256]\n      hmac_secret: {env: BENCH_SESSION_SECRET}\n", mockPort: queuedMockPort,
                        extra: "        delivery: queued\n        retry: {attempts: 1, backoff: 50ms, max_backoff: 200ms}\n"
                            + "        circuit: {failures: 5, within: 10s, open_for: 500ms}\n")
        }
        if admin { text += "admin:\n  token: {env: BENCH_ADMIN_TOKEN}\n" }
        return text
    }

    /// Per contact and route: the example policy's routes at 50 times its rates (a pooled contact
    /// sends a few requests a second at most, in the longest row).
    static let rateLimits = "{register: 1000/min, unregister: 2000/min, events: 6000/min}"

    private static func app(_ name: String, type: String = "jwt", session: String, mockPort: Int, claims: Bool = true,
                            limited: Bool = true, extra: String = "") -> String {
        """
          \(name):
            session:
              type: \(type)
        \(session)\(claims ? "      issuer: https://auth.bench\n      audience: bench\n" : "")    client:
              platforms: [android, ios]
        \(limited ? "      rate_limits: \(rateLimits)\n" : "")    dedupe:
              refresh_after: 1d
            upstreams:
              - name: voyado
                provider: voyado
                base_path: http://127.0.0.1:\(mockPort)/api/v1/acme/abc123/default
                api_key: {env: BENCH_VOYADO_KEY}
                timeout: 5s
        \(extra)
        """
    }

    /// The claims of pooled session `index`: contact `contact-<index>`, valid for three hours
    /// from `now` (Unix seconds).
    static func claims(_ index: Int, now: Int) -> JSONObject {
        JSONObject([
            JSONMember("sub", .string("contact-\(index)")), JSONMember("iss", "https://auth.bench"), JSONMember("aud", "bench"),
            JSONMember("iat", .number(String(now))), JSONMember("exp", .number(String(now + 3 * 3600))),
        ])
    }
}
