import Foundation
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// Dead-token reports on the admin listener over real HTTP, in front of the real inventory, real
/// mock providers and a real redis-server (or the memory store): removal at each upstream that
/// holds the token, stale and unknown reports, per-report refusals, the mass-death guard across
/// replicas, its quarantine and `tokens quarantine list|release|drop`, and removal through the
/// outbox while a provider is down.
@Suite struct DeadTokenTests {
    static var secrets: [SecretRef: String] {
        var secrets = InventoryTests.secrets
        secrets[.env("TEST_ADMIN_TOKEN")] = ServerToServerTests.adminToken
        return secrets
    }

    static let admin = "admin: {token: {env: TEST_ADMIN_TOKEN}}"

    /// Voyado (primary) and Push Notice (shadow, FCM tokens only), and the guard's policy.
    static func upstreams(_ voyado: MockVoyado, _ pn: MockPushNotice, guard policy: String? = nil) -> String {
        InventoryTests.voyado(voyado) + "\n" + PushNoticeTests.upstream(pn, role: "shadow")
            + (policy.map { "\n    dead_tokens: " + $0 } ?? "")
    }

    static func report(_ h: SidecarHarness, _ body: String, token: String = ServerToServerTests.adminToken,
                       contentType: String = "application/json", method: String = "POST",
                       requestID: String? = nil) async throws -> Harness.Reply {
        var headers: HTTPHeaders = ["Authorization": "Bearer " + token, "Content-Type": contentType]
        if let requestID { headers.set("X-Request-Id", requestID) }
        let response = try await h.client.execute(HTTPClientRequest(
            method: method, url: "http://127.0.0.1:\(h.sidecar.adminPort)/v1/apps/\(h.app)/tokens/dead",
            headers: headers, body: Array(body.utf8), timeoutMillis: 20_000))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }

    static func reports(_ items: [String]) -> String { #"{"reports":["# + items.joined(separator: ",") + "]}" }

    static func dead(_ token: String, reason: String = "unregistered", observedAt: String? = nil) -> String {
        #"{"push_token":"\#(token)","reason":"\#(reason)""# + (observedAt.map { #","observed_at":\#($0)"# } ?? "") + "}"
    }

    static func tokens(_ h: SidecarHarness, _ contact: String = "alice") async throws -> Set<String> {
        Set(try await InventoryTests.list(h, contact).map(\.token))
    }

    static func metric(_ h: SidecarHarness, _ result: String) -> String? {
        let prefix = "pushwarden_dead_tokens_total{app=\"\(h.app)\",result=\"\(result)\"} "
        return h.sidecar.metrics.render().split(separator: "\n").first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    static func logLines(_ h: SidecarHarness) -> [JSONObject] {
        h.logs.text.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)).objectValue }
    }

    // MARK: Reports

    @Test(arguments: [false, true])
    func aDeadReportRemovesAtEachHoldingUpstreamAndTheNextRegistrationIsForwardedAgain(memoryStore: Bool) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await SidecarHarness(upstreams: Self.upstreams(voyado, pn), secrets: Self.secrets, memoryStore: memoryStore,
                                         topLevel: Self.admin)
        let fcm = InventoryTests.android(), apns = InventoryTests.apns(), kept = InventoryTests.android(), later = InventoryTests.android()
        for body in [InventoryTests.android(fcm), InventoryTests.ios(apns), InventoryTests.android(kept), InventoryTests.android(later)] {
            #expect(try await h.post("/installations", body).status == 202)
        }
        let never = InventoryTests.android()
        let reply = try await Self.report(h, Self.reports([
            Self.dead(fcm),
            // Registered after the sender saw it die: kept.
            Self.dead(kept, reason: "expired", observedAt: #""2020-01-01T00:00:00Z""#),
            Self.dead(never, reason: "invalid"),
            Self.dead(kept, reason: "payload_too_large"),
            #"{"reason":"unregistered"}"#,
            Self.dead(kept, observedAt: #""yesterday""#),
            // Seen dead a minute after it was registered (epoch milliseconds): removed.
            Self.dead(apns, reason: "expired", observedAt: String(Int(Date().timeIntervalSince1970 * 1000) + 60_000)),
            Self.dead(later, observedAt: #""2999-01-01T00:00:00.5+02:00""#),
        ]), requestID: "dead-1")
        #expect(reply.status == 202, "\(reply.text)")
        #expect(reply.headers["X-Request-Id"] == "dead-1")
        #expect(reply.text == #"{"request_id":"dead-1","removed":3,"stale":1,"unknown":1,"quarantined":0,"refused":["#
            + #"{"index":3,"code":"invalid_reason","field":"reports[3].reason","message":"reports[3].reason must be one of unregistered, expired, invalid; other failures are no evidence that a token is dead"},"#
            + #"{"index":4,"code":"invalid_request","field":"reports[4].push_token","message":"reports[4].push_token is required and must be a string"},"#
            + #"{"index":5,"code":"invalid_request","field":"reports[5].observed_at","message":"reports[5].observed_at must be an RFC 3339 timestamp (2026-07-01T10:00:00Z) or epoch milliseconds"}]}"#)
        // Each upstream that held a removed token was called, in its own form; nothing else.
        #expect(Set(voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue }) == [fcm, apns, later])
        #expect(Set(pn.received(method: "DELETE").compactMap { $0.object?["token"]?.stringValue }) == [fcm, later])
        #expect(try await Self.tokens(h) == [Redact.token(kept)])
        #expect(Self.metric(h, "removed") == "3")
        #expect(Self.metric(h, "stale") == "1")
        #expect(Self.metric(h, "unknown") == "1")
        #expect(Self.metric(h, "refused") == "3")

        // Everything kept about the token is gone: registering it again is forwarded everywhere.
        let again = try await h.post("/installations", InventoryTests.android(fcm))
        #expect(again.outcome("voyado") == "forwarded", "\(again.text)")
        #expect(again.outcome("pushnotice") == "forwarded", "\(again.text)")
        // A second report of a removed token is unknown; the one registered again is removed again.
        let second = try await Self.report(h, Self.reports([Self.dead(apns), Self.dead(fcm)]))
        #expect(second.json?["unknown"] == .number("1"))
        #expect(second.json?["removed"] == .number("1"))

        let audit = Self.logLines(h).filter { $0["msg"] == "dead tokens reported" }
        #expect(audit.count == 2)
        #expect(audit.first?["removed"] == "3")
        #expect(audit.first?["logger"] == "audit")
        for token in [fcm, apns, kept, later, never] { #expect(!h.logs.text.contains(token)) }
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    @Test func badRequestsAndWrongTokensAreRefusedWhole() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await SidecarHarness(upstreams: Self.upstreams(voyado, pn), secrets: Self.secrets, topLevel: Self.admin)
        let fcm = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(fcm)).status == 202)
        let one = Self.reports([Self.dead(fcm)])

        let tooMany = try await Self.report(h, Self.reports(Array(repeating: Self.dead(fcm), count: 1001)))
        #expect(tooMany.status == 400)
        #expect(tooMany.errorCode == "invalid_request")
        #expect(tooMany.errorField == "reports")
        #expect(tooMany.json?["error"]?.objectValue?["message"]?.stringValue == "at most 1000 reports per request, found 1001")

        for (token, name) in [(String(ServerToServerTests.adminToken.reversed()), "wrong"), ("", "empty")] {
            let refused = try await Self.report(h, one, token: token)
            #expect(refused.status == 401, "\(name)")
            #expect(refused.errorCode == "unauthorized", "\(name)")
        }
        #expect(try await Self.report(h, one, method: "GET").status == 405)
        #expect(try await Self.report(h, one, contentType: "text/plain").status == 415)
        let notJSON = try await Self.report(h, "{reports")
        #expect(notJSON.status == 400 && notJSON.errorCode == "invalid_json")
        let unknown = try await Self.report(h, #"{"reports":[],"dry_run":true}"#)
        #expect(unknown.status == 400 && unknown.errorCode == "unknown_field")
        let notList = try await Self.report(h, #"{"reports":{}}"#)
        #expect(notList.status == 400 && notList.errorField == "reports")
        // A thousand reports of the longest tokens fit.
        let largest = try await Self.report(h, Self.reports((0..<1000).map { Self.dead(String(format: "%04d", $0) + String(repeating: "a", count: 996)) }))
        #expect(largest.status == 202 && largest.json?["unknown"] == .number("1000"), "\(largest.status) \(largest.text.prefix(200))")
        let tooLarge = try await Self.report(h, Self.reports(Array(repeating: Self.dead(String(repeating: "a", count: 1000)), count: 1600)))
        #expect(tooLarge.status == 413 && tooLarge.errorCode == "payload_too_large")
        // Nothing of that removed anything.
        #expect(voyado.received(path: "/installations/unregister").isEmpty)
        #expect(try await Self.tokens(h) == [Redact.token(fcm)])
        let empty = try await Self.report(h, #"{"reports":[]}"#)
        #expect(empty.text.hasSuffix(#""removed":0,"stale":0,"unknown":0,"quarantined":0,"refused":[]}"#), "\(empty.text)")
        #expect(!h.logs.text.contains(ServerToServerTests.adminToken))
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    // MARK: The mass-death guard

    @Test func theGuardQuarantinesPastTheShareWithNoUpstreamCallAndReleaseThenRemoves() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await SidecarHarness(upstreams: Self.upstreams(voyado, pn, guard: "{min_count: 2, max_share: 10%}"),
                                         secrets: Self.secrets, topLevel: Self.admin)
        let tokens = (0..<6).map { _ in InventoryTests.android() }
        for token in tokens { #expect(try await h.post("/installations", InventoryTests.android(token)).status == 202) }

        // Six installations, 10%: the guard lets min_count (2) through in a minute and holds the rest.
        let first = try await Self.report(h, Self.reports(tokens.prefix(5).map { Self.dead($0) }))
        #expect(first.status == 202, "\(first.text)")
        #expect(first.json?["removed"] == .number("2"))
        #expect(first.json?["quarantined"] == .number("3"))
        #expect(voyado.received(path: "/installations/unregister").count == 2)
        #expect(try await Self.tokens(h).count == 4)
        // While reports are held, every further one is held too, with no upstream call.
        let next = try await Self.report(h, Self.reports([Self.dead(tokens[5])]))
        #expect(next.json?["quarantined"] == .number("1"))
        #expect(voyado.received(path: "/installations/unregister").count == 2)
        #expect(pn.received(method: "DELETE").count == 2)
        #expect(Self.metric(h, "quarantined") == "4")
        let warnings = Self.logLines(h).filter { $0["msg"]?.stringValue?.hasPrefix("dead-token reports held by the mass-death guard") == true }
        #expect(warnings.count == 1)
        #expect(warnings.first?["level"] == "warning")

        func quarantine(_ action: QuarantineCommand.Action, _ selected: Set<String>? = nil) async throws -> (QuarantineCommand.Report, [String]) {
            let lines = Mutex<[String]>([])
            let report = try await QuarantineCommand.run(action, policy: h.policy, redisURL: RedisServer.shared.url, app: h.app, tokens: selected,
                                                         secrets: h.secrets, logger: Logger(label: "test", level: .warning, sink: h.logs)) { line in
                lines.withLock { $0.append(line) }
            }
            return (report, lines.withLock { $0 })
        }
        let held = tokens.suffix(4)
        let (listed, lines) = try await quarantine(.list)
        #expect(listed.handled == 4)
        #expect(Set(lines.dropLast().map { String($0.prefix(12)) }) == Set(held.map(Redact.token)))
        #expect(lines.last == "4 held")
        for token in tokens { #expect(!lines.joined().contains(token)) }

        // Drop one: it stays registered; release another, then the rest: removed everywhere, but
        // for the one its device registered again while it was held.
        let (dropped, _) = try await quarantine(.drop, [Redact.token(tokens[2])])
        #expect(dropped.handled == 1)
        let (one, oneLines) = try await quarantine(.release, [Redact.token(tokens[3])])
        #expect(one.handled == 1 && one.failed == 0, "\(oneLines)")
        #expect(oneLines.first == Redact.token(tokens[3]) + "  removed")
        try await Task.sleep(for: .milliseconds(5))
        let updated = #"{"platform":"android","push_token":"\#(tokens[4])","app_version":"2.0.0"}"#
        #expect(try await h.post("/installations", updated).outcome("voyado") == "forwarded")
        let (rest, restLines) = try await quarantine(.release)
        #expect(rest.handled == 2)
        #expect(restLines.contains(Redact.token(tokens[4]) + "  stale"), "\(restLines)")
        #expect(Set(voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue })
                == Set(tokens).subtracting([tokens[2], tokens[4]]))
        #expect(try await Self.tokens(h) == [Redact.token(tokens[2]), Redact.token(tokens[4])])
        #expect(try await quarantine(.list).1 == ["0 held"])
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    /// With `store.encryption_key` and `store.digest_key`, a held report keeps its token sealed
    /// under a keyed name, and the command opens it again to release it.
    @Test func heldReportsAreSealedAndStillReleased() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        var secrets = Self.secrets
        secrets[.env("PW_STORE_KEY")] = EncryptionAtRestTests.storeKey
        secrets[.env("PW_DIGEST_KEY")] = EncryptionAtRestTests.otherKey
        let h = try await SidecarHarness(upstreams: Self.upstreams(voyado, pn, guard: "{min_count: 0, max_share: 0.01%}"), secrets: secrets,
                                         topLevel: Self.admin + "\nstore:\n  encryption_key: {env: PW_STORE_KEY}\n  digest_key: {env: PW_DIGEST_KEY}")
        let fcm = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(fcm)).status == 202)
        #expect(try await Self.report(h, Self.reports([Self.dead(fcm)])).json?["quarantined"] == .number("1"))
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        let stored = try await client.send(["HGETALL", DeadTokenKeys(app: h.app).held])
        client.close()
        guard case .array(let items) = stored else { Issue.record("no held reports"); return }
        #expect(items.count == 2)
        let field = items.first?.string ?? "", record = items.last?.string ?? ""
        #expect(!record.contains(fcm) && record.contains("pwe2:"), "\(record)")
        #expect(field != KeyDigest.unkeyed.token(fcm, app: h.app).digest)
        let run = try await QuarantineCommand.run(.release, policy: h.policy, redisURL: RedisServer.shared.url, app: h.app, secrets: h.secrets,
                                                  logger: Logger(label: "test", level: .warning, sink: h.logs)) { _ in }
        #expect(run.handled == 1 && run.failed == 0)
        #expect(voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue } == [fcm])
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    /// With `audit.signing_key`, every removal on a report appends a signed receipt naming the
    /// contact by its digest, and the trail still verifies.
    @Test func eachRemovalAppendsAReceiptToTheEvidenceTrail() async throws {
        let key = try Ed25519PrivateKey.generate()
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await AuditTrailTests.sidecar(voyado, key: key)
        let tokens = [InventoryTests.android(), InventoryTests.android()]
        for token in tokens { #expect(try await h.post("/installations", InventoryTests.android(token), contact: "alice").status == 202) }
        let reply = try await Self.report(h, Self.reports(tokens.map { Self.dead($0) }), requestID: "dead-audit")
        #expect(reply.json?["removed"] == .number("2"), "\(reply.text)")
        let audit = Self.logLines(h).first { $0["msg"] == "dead tokens reported" }
        #expect(audit?["receipts"] == "1,2")
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        let entries = try await client.send(["XRANGE", AuditTrail.Keys(app: h.app).receipts, "-", "+"])
        client.close()
        guard case .array(let items) = entries else { Issue.record("no receipts"); return }
        let bodies = items.compactMap { item -> AuditReceipt? in
            guard case .array(let parts) = item, parts.count == 2, case .array(let fields) = parts[1], fields.count >= 2 else { return nil }
            return fields[1].string.flatMap { AuditReceipt(body: $0) }
        }
        #expect(bodies.map(\.kind) == ["dead_token", "dead_token"])
        #expect(bodies.allSatisfy { $0.contact == ContactKeys(app: h.app, contactID: "alice").digest && $0.installations == 1 })
        #expect(bodies.allSatisfy { $0.requestID == "dead-audit" && $0.upstreams.map(\.1) == ["forwarded"] })
        let run = try AuditTrailTests.verify(h, key: key)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        await h.stop()
        await voyado.stop()
    }

    /// The command as an operator runs it: what it needs, and an empty quarantine.
    @Test func theQuarantineCommandLine() throws {
        let environment = ["PUSHWARDEN_DEMO_SESSION_SECRET": String(repeating: "s", count: 32), "PUSHWARDEN_REDIS_URL": "", "PUSHWARDEN_POLICY": ""]
        let missing = try CommandLineTests.run(["tokens", "quarantine", "list", "--policy", "policies/example.yaml", "--app", "demo"],
                                               environment: environment)
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("tokens quarantine needs --redis URL"), "\(missing.stderr)")
        let verb = try CommandLineTests.run(["tokens", "quarantine", "purge"], environment: environment)
        #expect(verb.status == 2 && verb.stderr.contains("usage: pushwarden tokens quarantine list|release|drop"))
        let unknownApp = try CommandLineTests.run(["tokens", "quarantine", "list", "--policy", "policies/example.yaml", "--app", "nope",
                                                   "--redis", RedisServer.shared.url], environment: environment)
        #expect(unknownApp.status == 1 && unknownApp.stderr.contains("the policy has no app nope"), "\(unknownApp.stderr)")
        let empty = try CommandLineTests.run(["tokens", "quarantine", "list", "--policy", "policies/example.yaml", "--app", "demo",
                                              "--redis", RedisServer.shared.url], environment: environment)
        #expect(empty.status == 0, "\(empty.stderr)")
        #expect(empty.stdout == "0 held\n")
    }

    /// Two replicas sharing a Redis count their removals together: the second replica's report
    /// finds the minute's allowance spent by the first.
    @Test func theGuardsCountIsSharedByReplicas() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let upstreams = Self.upstreams(voyado, pn, guard: "{min_count: 3, max_share: 1%}")
        let one = try await SidecarHarness(upstreams: upstreams, secrets: Self.secrets, topLevel: Self.admin)
        let two = try await SidecarHarness(upstreams: upstreams, secrets: Self.secrets, sameApp: one.app, topLevel: Self.admin)
        let tokens = (0..<6).map { _ in InventoryTests.android() }
        for token in tokens { #expect(try await one.post("/installations", InventoryTests.android(token)).status == 202) }
        let first = try await Self.report(one, Self.reports(tokens.prefix(3).map { Self.dead($0) }))
        #expect(first.json?["removed"] == .number("3"), "\(first.text)")
        let second = try await Self.report(two, Self.reports(tokens.suffix(3).map { Self.dead($0) }))
        #expect(second.json?["removed"] == .number("0"), "\(second.text)")
        #expect(second.json?["quarantined"] == .number("3"))
        #expect(voyado.received(path: "/installations/unregister").count == 3)
        await one.stop()
        await two.stop()
        await voyado.stop()
        await pn.stop()
    }

    // MARK: Delivery

    @Test func anUpstreamOutageDuringADeadTokenRemovalDeliversLaterThroughTheOutbox() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await SidecarHarness(upstreams: Self.upstreams(voyado, pn), secrets: Self.secrets, topLevel: Self.admin)
        let fcm = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(fcm)).outcome("pushnotice") == "forwarded")
        // Push Notice is down through the removal's retries.
        pn.enqueue(.init(status: 503), .init(status: 503), .init(status: 503))
        let reply = try await Self.report(h, Self.reports([Self.dead(fcm)]))
        #expect(reply.json?["removed"] == .number("1"), "\(reply.text)")
        #expect(try await Self.tokens(h).isEmpty)
        let deadline = Date().addingTimeInterval(20)
        while pn.subscriber(token: fcm)?.status != "inactive", Date() < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(pn.subscriber(token: fcm)?.status == "inactive")
        #expect(voyado.received(path: "/installations/unregister").count == 1)
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }
}

/// The guard's shared state on a real redis-server, minute by minute: what the HTTP tests cannot
/// wait for.
@Suite struct DeadTokenStoreTests {
    @Test(arguments: [false, true]) func theLastMinuteCountsAndHeldReportsHoldEverything(cluster: Bool) async throws {
        if cluster {
            try await RedisCluster.use { cluster in try await Self.lastMinute(url: cluster.url) }
        } else {
            try await Self.lastMinute(url: RedisServer.shared.url)
        }
    }

    /// On one Redis and on a cluster alike: an app's guard keys share one hash tag.
    static func lastMinute(url: String) async throws {
        let redis = RedisStore(client: RedisClient(configuration: try RedisConfiguration(url: url)))
        let store = RedisDeadTokenStore(store: redis)
        let keys = DeadTokenKeys(app: "guard-" + UUID().uuidString)
        let minute: Int64 = 29_000_000 * 60_000
        #expect(try await store.admit(8, limit: 10, app: keys, nowMillis: minute + 1_000) == 8)
        #expect(try await store.admit(8, limit: 10, app: keys, nowMillis: minute + 2_000) == 2)
        // Half a minute on, half of the previous minute's 10 still counts.
        #expect(try await store.admit(8, limit: 10, app: keys, nowMillis: minute + 90_000) == 5)
        // Two minutes on, nothing counts any more, but a held report holds every removal.
        try await store.hold([HeldReport(field: "f", record: "r")], app: keys)
        #expect(try await store.admit(8, limit: 10, app: keys, nowMillis: minute + 240_000) == 0)
        #expect(try await store.heldCount(app: keys) == 1)
        #expect(try await store.unhold("f", ifStill: "other", app: keys) == false)
        #expect(try await store.unhold("f", ifStill: "r", app: keys))
        #expect(try await store.admit(8, limit: 10, app: keys, nowMillis: minute + 240_000) == 8)
        #expect(try await store.installationCount(app: AppInventoryKeys(app: "none-" + UUID().uuidString)) == 0)
        // The embedded store decides alike.
        let memory = MemoryDeadTokenStore(inventory: nil)
        #expect(try await memory.admit(8, limit: 10, app: keys, nowMillis: minute + 1_000) == 8)
        #expect(try await memory.admit(8, limit: 10, app: keys, nowMillis: minute + 90_000) == 6)
        try await memory.hold([HeldReport(field: "f", record: "r")], app: keys)
        #expect(try await memory.admit(8, limit: 10, app: keys, nowMillis: minute + 240_000) == 0)
        redis.client.close()
    }
}
