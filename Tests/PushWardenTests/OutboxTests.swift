import Foundation
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// Durable delivery through the Redis Streams outbox, against a real redis-server and real mock
/// providers on loopback (docs/architecture.md, the outbox).
@Suite(.serialized) struct OutboxTests {
    static func voyado(_ mock: MockVoyado, name: String = "voyado", role: String = "primary", delivery: String = "queued",
                       queue: String = "{max_age: 1h, claim_after: 5s}") -> String {
        """
              - name: \(name)
                provider: voyado
                role: \(role)
                delivery: \(delivery)
                base_path: \(mock.basePath)
                api_key: {env: VOYADO_KEY}
                timeout: 1s
                retry: {attempts: 1, backoff: 20ms, max_backoff: 100ms}
                queue: \(queue)
                circuit: {failures: 3, within: 10s, open_for: 500ms}
        """
    }

    static func harness(_ upstreams: String, key: String) async throws -> SidecarHarness {
        try await SidecarHarness(upstreams: upstreams, secrets: [.env("VOYADO_KEY"): key])
    }

    static func fcm() -> String { "fcm-" + UUID().uuidString }

    /// A sidecar whose one upstream is a queued Voyado mock, a client of the shared Redis beside
    /// it, and that upstream's outbox: where most tests here start.
    struct QueuedVoyado {
        let mock: MockVoyado
        let h: SidecarHarness
        let redis: RedisClient
        let target: OutboxTarget

        init(latencyMillis: Int = 0) async throws {
            mock = try MockVoyado(apiKey: "vk", latencyMillis: latencyMillis)
            h = try await OutboxTests.harness(OutboxTests.voyado(mock), key: "vk")
            redis = RedisClient(configuration: RedisServer.shared.configuration())
            target = OutboxStreams.Upstream(app: h.app, upstream: "voyado", shards: Outbox.queuedShards)
        }

        /// Registers an Android `token`.
        func register(_ token: String) async throws -> Harness.Reply {
            try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#)
        }

        /// Entries waiting in `token`'s shard.
        func waiting(_ token: String) async throws -> Int {
            guard case .integer(let n) = try await redis.send(["XLEN", target.stream(target.shard(of: token))]) else { return -1 }
            return Int(n)
        }

        func stop() async {
            await h.stop()
            await mock.stop()
            redis.close()
        }
    }

    /// Polls `condition` every 50 ms for up to `seconds`.
    static func eventually(_ seconds: Double = 10, _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return try await condition()
    }

    static func bodies(_ mock: MockVoyado, _ path: String) -> [String] {
        mock.received(path: path).map { String(decoding: $0.body, as: UTF8.self) }
    }

    /// A dead letter another Redis writer planted, with escape sequences and bidirectional
    /// controls in its request id, reason, status and code: `pushwarden outbox list` prints none of
    /// them to the operator's terminal, and the worker would not log the request id.
    @Test func plantedDeadLettersAreListedWithoutTheirControls() async throws {
        let app = "app-" + UUID().uuidString.prefix(8).lowercased()
        let planted = "req\u{1B}]0;pwned\u{7}\u{202E}"
        let entry = OutboxEntry(operation: .unregister, app: app, upstream: "voyado", contactID: "alice", requestID: planted,
                                acceptedAtMillis: 1, pushToken: "fcm-planted", installation: nil)
        #expect(try OutboxEntry.decode(entry.encoded()).get().requestID == "-")
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        defer { client.close() }
        let stream = OutboxStreams.Upstream(app: app, upstream: "voyado", shards: 1).dead
        _ = try await client.send(["XADD", stream, "*", "e", entry.encoded(), "reason", "\u{1B}[2J\u{202E}gone", "status", "4\u{1B}[0m00",
                                   "code", "x\u{2066}\u{9B}31m"])
        var listed: [String] = []
        #expect(try await OutboxCommand.run(.list, redisURL: RedisServer.shared.url, app: app, upstream: nil) { listed.append($0) }.handled == 1)
        #expect(!listed.contains { TextRules.hasForbiddenCharacter($0) }, "\(listed.map(\.debugDescription))")
        #expect(listed.first?.contains("reason unknown:" + Redact.shortHash("\u{1B}[2J\u{202E}gone")) == true, "\(listed)")
        #expect(listed.first?.contains("request -") == true, "\(listed)")
        _ = try await OutboxCommand.run(.drop, redisURL: RedisServer.shared.url, app: app, upstream: nil) { _ in }
    }

    @Test func aQueuedRegistrationIsAcceptedThenDeliveredOnce() async throws {
        // Each delivery takes 500 ms: the second request surely comes while the first waits.
        let q = try await QueuedVoyado(latencyMillis: 500)
        let token = Self.fcm()
        let first = try await q.register(token)
        #expect(first.status == 202)
        #expect(first.outcome("voyado") == "queued")
        // The same registration while it waits is not queued again.
        #expect(try await q.register(token).outcome("voyado") == "queued")
        // Delivered: the dedupe entry is committed like a sync forward's.
        #expect(await Self.eventually { (try? await q.register(token).outcome("voyado")) == "unchanged" })
        // Nothing is left in the outbox, so no second delivery can come.
        #expect(await Self.eventually { (try? await q.waiting(token)) == 0 })
        #expect(q.mock.received(path: "/installations").count == 1)
        await q.stop()
    }

    /// The append leaves in the same write as the inventory record: when Redis refuses it (here
    /// the token's waiting mark is not a string), the client is told the upstream is unavailable,
    /// with the contract's envelope, never `queued`; its retry, once Redis takes it, is queued.
    @Test func anAppendRedisRefusesIsNotAnsweredQueued() async throws {
        let q = try await QueuedVoyado()
        let token = Self.fcm()
        let mark = q.target.place(of: token, digests: .unkeyed).mark
        _ = try await q.redis.send(["HSET", mark, "not", "a string"])
        let refused = try await q.register(token)
        #expect(refused.status == 503)
        #expect(refused.json?["error"]?.objectValue?["code"]?.stringValue == "upstream_unavailable", "\(refused.text)")
        #expect(refused.headers["Retry-After"] == "1")
        #expect(q.h.logs.text.contains("outbox unavailable; delivery not queued"))
        _ = try await q.redis.send(["DEL", mark])
        #expect(try await q.register(token).outcome("voyado") == "queued")
        #expect(await Self.eventually { q.mock.received(path: "/installations").count == 1 })
        await q.stop()
    }

    /// Redis lost a shard's stream and its consumer group under running workers (restarted
    /// without persistence, or the key deleted by hand): the next registration makes the stream
    /// again, and its worker makes the group again and delivers it.
    @Test func aShardWhoseStreamWentIsReadAgain() async throws {
        let q = try await QueuedVoyado()
        #expect(try await q.register(Self.fcm()).outcome("voyado") == "queued")
        #expect(await Self.eventually { q.mock.received(path: "/installations").count == 1 })
        let token = Self.fcm()
        #expect(try await q.redis.send(["DEL", q.target.stream(q.target.shard(of: token))]) == .integer(1))
        #expect(try await q.register(token).outcome("voyado") == "queued")
        #expect(await Self.eventually { q.mock.received(path: "/installations").count == 2 })
        await q.stop()
    }

    /// While a registration waits (the provider is down), the same one is answered `queued`
    /// without a second entry; an unregister clears the waiting mark, so the same registration
    /// after it is queued again, behind it. The mark names the token only by its hash.
    @Test func aWaitingRegistrationIsQueuedOnceAndAnUnregisterClearsItsMark() async throws {
        let q = try await QueuedVoyado()
        for _ in 0..<400 { q.mock.enqueue(.init(status: 503)) }
        let token = Self.fcm()
        let mark = q.target.place(of: token, digests: .unkeyed).mark
        for _ in 0..<3 { #expect(try await q.register(token).outcome("voyado") == "queued") }
        #expect(try await q.waiting(token) == 1)
        #expect(!mark.contains(token))
        #expect(try await q.redis.send(["EXISTS", mark]) == .integer(1))
        #expect(try await q.h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("voyado") == "queued")
        #expect(try await q.waiting(token) == 2)
        #expect(try await q.redis.send(["EXISTS", mark]) == .integer(0))
        #expect(try await q.register(token).outcome("voyado") == "queued")
        #expect(try await q.waiting(token) == 3)
        await q.stop()
    }

    @Test func anOutageIsWaitedOutAndTheOrderOfOneTokenKept() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await Self.harness(Self.voyado(mock), key: "vk")
        for _ in 0..<6 { mock.enqueue(.init(status: 503)) }
        let token = Self.fcm()
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("voyado") == "queued")
        #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("voyado") == "queued")
        // Every 503 was retried; then the register and the unregister arrive, in that order.
        #expect(await Self.eventually(15) { mock.received(path: "/installations/unregister").count == 1 })
        let calls = mock.received.map(\.path)
        let lastRegister = try #require(calls.lastIndex { $0.hasSuffix("/installations") })
        let unregister = try #require(calls.lastIndex { $0.hasSuffix("/installations/unregister") })
        #expect(lastRegister < unregister, "\(calls)")
        #expect(calls.filter { $0.hasSuffix("/installations") }.count == 7)  // 6 refused, 1 taken
        await h.stop()
        await mock.stop()
    }

    @Test func aSyncUnregisterDuringAnOutageIsQueuedAndArrivesLater() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await Self.harness(Self.voyado(mock, delivery: "sync"), key: "vk")
        let token = Self.fcm()
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("voyado") == "forwarded")
        mock.enqueue(.init(status: 503), .init(status: 503))
        let logout = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
        #expect(logout.status == 202)
        #expect(logout.outcome("voyado") == "queued")
        #expect(await Self.eventually { mock.received(path: "/installations/unregister").count == 3 })
        #expect(Self.bodies(mock, "/installations/unregister").last?.contains(token) == true)
        await h.stop()
        await mock.stop()
    }

    @Test func aQueuedShadowBesideAHealthyPrimary() async throws {
        let primary = try MockVoyado(apiKey: "vk")
        let shadow = try MockVoyado(apiKey: "vk")
        let h = try await Self.harness(Self.voyado(primary, delivery: "sync") + "\n" + Self.voyado(shadow, name: "shadow", role: "shadow"),
                                       key: "vk")
        let token = Self.fcm()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome("voyado") == "forwarded")
        #expect(reply.outcome("shadow") == "queued")
        #expect(primary.received(path: "/installations").count == 1)
        #expect(await Self.eventually { Self.bodies(shadow, "/installations").contains { $0.contains(token) } })
        await h.stop()
        await primary.stop()
        await shadow.stop()
    }

    /// What Redis holds in an app's dead-letter stream for an upstream.
    static func deadLetters(app: String, upstream: String) async throws -> [[String: String]] {
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close() }
        let streams = OutboxStreams(client: client)
        return try await streams.deadLetters(of: OutboxStreams.Upstream(app: app, upstream: upstream, shards: 1), count: 100).map(\.1)
    }

    @Test func aProviderRefusalIsDeadLetteredAtOnceWithItsAnswer() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await Self.harness(Self.voyado(mock), key: "vk")
        mock.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"],
                           body: #"{"error":{"code":"invalid_platform","message":"x"}}"#))
        let token = Self.fcm()
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("voyado") == "queued")
        #expect(await Self.eventually { ((try? await Self.deadLetters(app: h.app, upstream: "voyado")) ?? []).count == 1 })
        let dead = try #require(try await Self.deadLetters(app: h.app, upstream: "voyado").first)
        #expect(dead["status"] == "400")
        #expect(dead["code"] == "invalid_platform")
        #expect(mock.received(path: "/installations").count == 1)  // final at once: no retry
        let metrics = try await h.admin("/metrics").text
        #expect(metrics.contains(#"pushwarden_outbox_dead_total{app="\#(h.app)",upstream="voyado"} 1"#), "\(metrics)")
        // Left the outbox: the same registration is queued again, not answered from a stale mark.
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("voyado") == "queued")
        await h.stop()
        await mock.stop()
    }

    /// `pushwarden outbox list|replay|drop`: tokens as short hashes; a replayed delivery is
    /// delivered; a dropped one is gone.
    @Test func deadLettersAreListedReplayedAndDropped() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await Self.harness(Self.voyado(mock), key: "vk")
        let refusal = MockVoyado.Scripted(status: 400, headers: ["Content-Type": "application/json"],
                                          body: #"{"error":{"code":"invalid_platform","message":"x"}}"#)
        mock.enqueue(refusal, refusal)
        let first = Self.fcm(), second = Self.fcm()
        for token in [first, second] {
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("voyado") == "queued")
        }
        #expect(await Self.eventually { ((try? await Self.deadLetters(app: h.app, upstream: "voyado")) ?? []).count == 2 })
        let url = RedisServer.shared.url
        var listed: [String] = []
        #expect(try await OutboxCommand.run(.list, redisURL: url, app: h.app, upstream: nil) { listed.append($0) }.handled == 2)
        #expect(listed.contains { $0.contains(Redact.token(first)) && $0.contains("status 400") && $0.contains("code invalid_platform") })
        #expect(!listed.joined().contains(first) && !listed.joined().contains(second))
        // Replay: both go back into the outbox and are delivered now that the provider takes them.
        #expect(try await OutboxCommand.run(.replay, redisURL: url, app: h.app, upstream: "voyado") { _ in }.handled == 2)
        #expect(await Self.eventually { Set(Self.bodies(mock, "/installations").filter { $0.contains(first) || $0.contains(second) }).count >= 2 })
        #expect(await Self.eventually { mock.received(path: "/installations").count == 4 })
        #expect(try await Self.deadLetters(app: h.app, upstream: "voyado").isEmpty)
        // Drop: dead-lettered again, then deleted.
        mock.enqueue(refusal)
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#).outcome("voyado") == "queued")
        #expect(await Self.eventually { ((try? await Self.deadLetters(app: h.app, upstream: "voyado")) ?? []).count == 1 })
        #expect(try await OutboxCommand.run(.drop, redisURL: url, app: h.app, upstream: nil) { _ in }.handled == 1)
        #expect(try await Self.deadLetters(app: h.app, upstream: "voyado").isEmpty)
        await h.stop()
        await mock.stop()
    }

    @Test func aDeliveryOlderThanMaxAgeIsDeadLettered() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await Self.harness(Self.voyado(mock, queue: "{max_age: 1s, claim_after: 5s}"), key: "vk")
        for _ in 0..<200 { mock.enqueue(.init(status: 503)) }
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#).outcome("voyado") == "queued")
        #expect(await Self.eventually(10) {
            ((try? await Self.deadLetters(app: h.app, upstream: "voyado")) ?? []).first?["reason"] == "max_age"
        })
        await h.stop()
        await mock.stop()
    }

    /// An entry written by hand that does not hold together is dead-lettered with a log line; the
    /// worker goes on with the next.
    @Test func aMalformedEntryIsDeadLetteredAndTheWorkerGoesOn() async throws {
        let q = try await QueuedVoyado()
        for shard in 0..<Outbox.queuedShards {
            _ = try await q.redis.send(["XADD", q.target.stream(shard), "*", "e", #"{"v":1,"op":"teleport"}"#])
        }
        #expect(await Self.eventually { ((try? await Self.deadLetters(app: q.h.app, upstream: "voyado")) ?? []).count == Outbox.queuedShards })
        let token = Self.fcm()
        #expect(try await q.register(token).outcome("voyado") == "queued")
        #expect(await Self.eventually { Self.bodies(q.mock, "/installations").contains { $0.contains(token) } })
        #expect(q.h.logs.text.contains("outbox entry malformed"))
        await q.stop()
    }

    /// Redis restarted (append-only file, as docs/operations.md asks for) while deliveries wait: none lost.
    @Test func aRedisRestartWithAnAppendOnlyFileLosesNothing() async throws {
        let aof = ["--appendonly", "yes", "--appendfsync", "always"]
        let first = try RedisServer.start(arguments: aof)
        let port = first.port, directory = first.directory
        let client = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: port))
        defer { client.close() }
        let mock = try MockVoyado(apiKey: "vk")
        for _ in 0..<100_000 { mock.enqueue(.init(status: 503)) }
        let h = try await SidecarHarness(upstreams: Self.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk"], store: RedisStore(client: client))
        let tokens = (0..<30).map { _ in Self.fcm() }
        for token in tokens {
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#)
            #expect(reply.outcome("voyado") == "queued", "\(reply.status) \(reply.text)")
        }
        try await Task.sleep(for: .milliseconds(500))  // read and failed at least once: pending in the group
        first.stop(keepingData: true)
        let second = try RedisServer.start(port: port, arguments: aof, directory: directory)
        defer { second.stop() }
        mock.reset()
        #expect(await Self.eventually(20) {
            let delivered = Set(Self.bodies(mock, "/installations").compactMap { body in tokens.first { body.contains($0) } })
            return delivered.count == tokens.count
        })
        await h.stop()
        await mock.stop()
    }

    /// An entry's accept time as written by hand: anything outside the epoch to year 9999 is
    /// malformed (the worker dead-letters it) instead of reaching the age arithmetic.
    @Test(arguments: ["-9223372036854775808", "-1", "9223372036854775807", "253402300800000", "1e3", "1.5", "99999999999999999999"])
    func anAcceptTimeOutOfRangeIsMalformed(_ written: String) throws {
        let text = OutboxFixture.entry(app: "shop", token: Self.fcm()).encoded()
        let forged = try #require(text.range(of: #""accepted_ms":[0-9]+"#, options: .regularExpression))
        let decoded = OutboxEntry.decode(text.replacingCharacters(in: forged, with: #""accepted_ms":\#(written)"#))
        #expect(decoded == .failure(.invalid("accepted_ms")), "\(written)")
    }

    @Test(arguments: [Int64(0), 253_402_300_799_999])
    func theBoundsOfTheAcceptTimeDecode(_ millis: Int64) {
        var entry = OutboxFixture.entry(app: "shop", token: Self.fcm())
        entry.acceptedAtMillis = millis
        #expect(OutboxEntry.decode(entry.encoded()) == .success(entry))
    }

    /// What `outbox replay` places by when given the policy: 8 shards for a queued upstream, 1 for
    /// a sync one's fallback unregisters, none for a provider that takes the user's own session.
    @Test func theOutboxesOfAPolicyAreTheOnesWorkersRead() throws {
        let yaml = """
            version: 1
            apps:
              shop:
                session: {type: jwt, algorithms: [HS256], hmac_secret: {env: S}}
                client: {platforms: [android]}
                upstreams:
                  - {name: q, provider: voyado, base_path: "https://v.test/api", api_key: {env: K}, role: primary, delivery: queued}
                  - {name: s, provider: voyado, base_path: "https://v.test/api", api_key: {env: K}, role: shadow}
                  - {name: f, provider: fluxer, base_url: "https://f.test", session_header: X-Fluxer-Session, role: shadow}
                  - {name: d, provider: dry_run, emulates: fluxer, role: shadow}
            """
        let policy: Policy
        switch PolicyLoader.load(text: yaml, path: "targets.yaml") {
        case .success(let loaded): policy = loaded
        case .failure(let diagnostics): Issue.record("\(diagnostics.diagnostics.map(\.description))"); return
        }
        let targets = Outbox.targets(of: policy).map { "\($0.app)/\($0.upstream):\($0.shards)" }
        #expect(targets == ["shop/q:8", "shop/s:1"])
    }

    @Test func queuedWithoutRedisIsRefusedAtStart() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        await #expect(throws: ConfigurationError.self) {
            _ = try await SidecarHarness(upstreams: Self.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk"], memoryStore: true)
        }
        await mock.stop()
    }
}
