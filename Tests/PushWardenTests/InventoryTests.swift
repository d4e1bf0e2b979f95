import Foundation
import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// Each contact's installations (contract section 8) over real HTTP, real mock providers and a
/// real redis-server (or the memory store): what the inventory lists, where an unregister goes,
/// moves between contacts, erasure, the device cap and expiry.
@Suite struct InventoryTests {
    static let secrets: [SecretRef: String] = [
        .env("VOYADO_KEY"): "voyado-key", .env("VH_KEY"): VoidhashTests.key, .env("NN_TOKEN"): NativeNotifyTests.appToken,
        .env("PN_KEY"): PushNoticeTests.key,
    ]

    static func voyado(_ mock: MockVoyado, role: String = "primary") -> String {
        """
              - name: voyado
                provider: voyado
                role: \(role)
                base_path: \(mock.basePath)
                api_key: {env: VOYADO_KEY}
                retry: {attempts: 2, backoff: 10ms, max_backoff: 20ms}
        """
    }

    /// An APNs token as PushWarden keeps it (validation lowercases the hex).
    static func apns() -> String { Harness.apnsToken().lowercased() }
    static func android() -> String { "fcm-\(UUID().uuidString):APA91b-\(UUID().uuidString)" }
    static func ios(_ token: String) -> String { #"{"platform":"ios","push_token":"\#(token)"}"# }
    static func android(_ token: String) -> String { #"{"platform":"android","push_token":"\#(token)"}"# }
    static func unregister(_ token: String) -> String { #"{"push_token":"\#(token)"}"# }

    /// The registration operations behind the sidecar: what the server-to-server API calls.
    static func registrar(_ h: SidecarHarness) -> Registrar { h.sidecar.registrar }
    static func app(_ h: SidecarHarness) throws -> AppRuntime { try #require(h.sidecar.apps[id: h.app]) }

    static func list(_ h: SidecarHarness, _ contact: String) async throws -> [InstallationSummary] {
        try await registrar(h).installations(of: contact, in: try app(h))
    }

    @Test(arguments: [false, true]) func theInventoryListsWhatEachUpstreamTook(memoryStore: Bool) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), vh = try MockVoidhash(publishableKey: VoidhashTests.key)
        // Voidhash without an iOS bundle id takes only Android.
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado) + "\n" + VoidhashTests.block(vh, role: "shadow", ios: false),
                                         secrets: Self.secrets, memoryStore: memoryStore)
        let apns = Self.apns(), fcm = Self.android()
        #expect(try await h.post("/installations", Self.ios(apns)).outcome("vh") == "skipped")
        #expect(try await h.post("/installations", Self.android(fcm)).outcome("vh") == "forwarded")
        let listed = try await Self.list(h, "alice")
        #expect(listed.count == 2)
        let byToken = Dictionary(uniqueKeysWithValues: listed.map { ($0.token, $0) })
        #expect(byToken[Redact.token(apns)]?.upstreams == ["voyado"])
        #expect(byToken[Redact.token(apns)]?.platform == "ios")
        #expect(byToken[Redact.token(apns)]?.pushService == "apns")
        #expect(Set(byToken[Redact.token(fcm)]?.upstreams ?? []) == ["voyado", "vh"])
        #expect(listed[0].lastSeenMillis >= listed[1].lastSeenMillis)  // most recently seen first
        #expect(try await Self.list(h, "bob").isEmpty)
        await h.stop()
        await voyado.stop()
        await vh.stop()
    }

    @Test func anUnregisterGoesOnlyWhereTheTokenIsRegistered() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado) + "\n" + PushNoticeTests.upstream(pn, role: "shadow"),
                                         secrets: Self.secrets)
        // Push Notice takes only FCM tokens: an APNs token is registered at Voyado alone.
        let apns = Self.apns()
        #expect(try await h.post("/installations", Self.ios(apns)).outcome("pushnotice") == "skipped")
        let reply = try await h.post("/installations/unregister", Self.unregister(apns))
        #expect(reply.outcome("voyado") == "forwarded")
        #expect(reply.outcome("pushnotice") == "skipped")
        #expect(pn.received(method: "DELETE").isEmpty)
        #expect(try await Self.list(h, "alice").isEmpty)
        // A token the inventory does not know (registered before PushWarden kept one) goes to
        // every upstream that can address it.
        let unknown = Self.android()
        let fallback = try await h.post("/installations/unregister", Self.unregister(unknown))
        #expect(fallback.outcome("voyado") == "forwarded")
        #expect(fallback.outcome("pushnotice") == "forwarded")
        #expect(pn.received(method: "DELETE").count == 1)
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    @Test(arguments: [false, true]) func aTokenMovesToItsNewContactAndAStaleLogoutRemovesNothing(memoryStore: Bool) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), nn = try MockNativeNotify(appToken: NativeNotifyTests.appToken)
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado) + "\n" + NativeNotifyTests.upstream(nn, role: "shadow"),
                                         secrets: Self.secrets, memoryStore: memoryStore)
        let apns = Self.apns()
        #expect(try await h.post("/installations", Self.ios(apns), contact: "alice").status == 202)
        #expect(try await h.post("/installations", Self.ios(apns), contact: "bob").outcome("voyado") == "forwarded")
        #expect(try await Self.list(h, "alice").isEmpty)
        #expect(try await Self.list(h, "bob").map(\.token) == [Redact.token(apns)])
        // Alice's stale logout on the shared device: bound to Alice, it removes Bob's nowhere.
        let stale = try await h.post("/installations/unregister", Self.unregister(apns), contact: "alice")
        #expect(stale.status == 202)
        #expect(stale.outcome("voyado") == "skipped")
        #expect(stale.outcome("nn") == "skipped")
        #expect(voyado.received(path: "/installations/unregister").isEmpty)
        #expect(nn.deregistrations.isEmpty)
        #expect(nn.devices.count == 1)
        // Bob's own logout removes it, Native Notify by the deviceId it handed back.
        let deviceID = try #require(nn.devices.first?.deviceID)
        let own = try await h.post("/installations/unregister", Self.unregister(apns), contact: "bob")
        #expect(own.outcome("voyado") == "forwarded")
        #expect(own.outcome("nn") == "forwarded")
        #expect(nn.deregistrations.count == 1)
        #expect(nn.deregistrations.first?.bodyText.contains(deviceID) == true)
        #expect(try await Self.list(h, "bob").isEmpty)
        await h.stop()
        await voyado.stop()
        await nn.stop()
    }

    @Test func erasureRemovesEveryInstallationAtEveryProviderInItsOwnForm() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), vh = try MockVoidhash(publishableKey: VoidhashTests.key)
        let nn = try MockNativeNotify(appToken: NativeNotifyTests.appToken), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let fluxer = try MockFluxer()
        let upstreams = [Self.voyado(voyado), VoidhashTests.block(vh, role: "shadow"), NativeNotifyTests.upstream(nn, role: "shadow"),
                         PushNoticeTests.upstream(pn, role: "shadow"), FluxerTests.upstream(fluxer, role: "shadow")].joined(separator: "\n")
        let h = try await SidecarHarness(upstreams: upstreams, secrets: Self.secrets)
        let apns = Self.apns(), fcm1 = Self.android(), fcm2 = Self.android()
        for body in [Self.ios(apns), Self.android(fcm1), Self.android(fcm2)] {
            let reply = try await h.post("/installations", body, headers: FluxerTests.fluxerHeaders)
            #expect(reply.status == 202, "\(reply.text)")
            #expect(reply.outcome("fluxer") == "forwarded", "\(reply.text)")
        }
        #expect(try await Self.list(h, "alice").count == 3)
        let vhIDs = Set([apns, fcm1, fcm2].compactMap { vh.device(token: $0)?.id })
        let nnIDs = Set(nn.devices.map(\.deviceID))
        #expect(vhIDs.count == 3)
        #expect(nnIDs.count == 3)

        let report = try await Self.registrar(h).erase("alice", in: try Self.app(h), requestID: "erase-1")
        #expect(report.installations == 3)
        let outcomes = Dictionary(uniqueKeysWithValues: report.upstreams.map { ($0.0, $0.1) })
        #expect(outcomes["voyado"] == .forwarded)
        #expect(outcomes["vh"] == .forwarded)
        #expect(outcomes["nn"] == .forwarded)
        #expect(outcomes["pushnotice"] == .forwarded)
        // Fluxer takes only the user's own session, which an erasure does not have.
        #expect(outcomes["fluxer"] == .skipped)
        #expect(fluxer.unregisters.isEmpty)
        // Each provider got exactly the removals it needs, by its own identity.
        #expect(Set(voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue })
                == [apns, fcm1, fcm2])
        #expect(Set(vh.received(path: "/unregister").compactMap { $0.object?["pushDeviceTokenId"]?.stringValue }) == vhIDs)
        #expect(nn.deregistrations.count == 3)
        for deviceID in nnIDs { #expect(nn.deregistrations.contains { $0.bodyText.contains(deviceID) }) }
        // Push Notice takes FCM tokens only: the two Android ones.
        #expect(Set(pn.received(method: "DELETE").compactMap { $0.object?["token"]?.stringValue }) == [fcm1, fcm2])
        #expect(try await Self.list(h, "alice").isEmpty)

        // Idempotent: nothing left, nothing called.
        let again = try await Self.registrar(h).erase("alice", in: try Self.app(h), requestID: "erase-2")
        #expect(again.installations == 0)
        #expect(voyado.received(path: "/installations/unregister").count == 3)
        // Everything kept about the tokens is gone: registering one again is forwarded everywhere.
        let fresh = try await h.post("/installations", Self.android(fcm1), headers: FluxerTests.fluxerHeaders)
        for name in ["voyado", "vh", "nn", "pushnotice", "fluxer"] { #expect(fresh.outcome(name) == "forwarded", "\(name): \(fresh.text)") }
        await h.stop()
        for mock in [voyado] as [any ProviderMock] + [vh, nn, pn, fluxer] { await mock.stop() }
    }

    /// The server-to-server API over real HTTP on the admin listener, in front of the real
    /// inventory: list, erase, list again, erase again.
    @Test func theAdminListenerListsAndErasesAContact() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), vh = try MockVoidhash(publishableKey: VoidhashTests.key)
        var secrets = Self.secrets
        secrets[.env("TEST_ADMIN_TOKEN")] = ServerToServerTests.adminToken
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado) + "\n" + VoidhashTests.block(vh, role: "shadow"),
                                         secrets: secrets, topLevel: "admin: {token: {env: TEST_ADMIN_TOKEN}}")
        let contact = "user 42/ä"  // percent-encoded in the path
        let apns = Self.apns(), fcm = Self.android()
        for body in [Self.ios(apns), Self.android(fcm)] { #expect(try await h.post("/installations", body, contact: contact).status == 202) }
        func call(_ method: String) async throws -> Harness.Reply { try await h.installations(method, contact: "user%2042%2F%C3%A4") }
        let listed = try await call("GET")
        #expect(listed.status == 200, "\(listed.text)")
        let items = listed.json?["installations"]?.arrayValue ?? []
        #expect(Set(items.compactMap { $0.objectValue?["token"]?.stringValue }) == [Redact.token(apns), Redact.token(fcm)])
        #expect(!listed.text.contains(apns) && !listed.text.contains(fcm))
        let erased = try await call("DELETE")
        #expect(erased.status == 202, "\(erased.text)")
        #expect(erased.json?["installations"] == .number("2"))
        #expect(erased.json?["upstreams"]?.objectValue?["voyado"]?.stringValue == "forwarded")
        #expect(erased.json?["upstreams"]?.objectValue?["vh"]?.stringValue == "forwarded")
        #expect(voyado.received(path: "/installations/unregister").count == 2)
        #expect(vh.received(path: "/unregister").count == 2)
        #expect(h.logs.text.contains("contact erased"))
        #expect(!h.logs.text.contains(contact))
        #expect(try await call("GET").json?["installations"]?.arrayValue?.isEmpty == true)
        let again = try await call("DELETE")
        #expect(again.status == 202)
        #expect(again.json?["installations"] == .number("0"))
        await h.stop()
        await voyado.stop()
        await vh.stop()
    }

    /// Four erasures of one contact at once (an impatient backend retrying): each installation is
    /// unregistered once, and the reports add up to the installations there were.
    @Test(arguments: [false, true]) func overlappingErasuresRemoveEachInstallationOnce(memoryStore: Bool) async throws {
        // Each call takes 30 ms, so the four erasures surely overlap.
        let voyado = try MockVoyado(apiKey: "voyado-key", latencyMillis: 30)
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado), secrets: Self.secrets, memoryStore: memoryStore)
        let tokens = (0..<40).map { _ in Self.android() }
        for token in tokens { #expect(try await h.post("/installations", Self.android(token)).status == 202) }
        #expect(try await Self.list(h, "alice").count == 40)
        let registrar = Self.registrar(h), app = try Self.app(h)
        let reports = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<4 {
                group.addTask {
                    let report = try await registrar.erase("alice", in: app, requestID: "erase-\(index)")
                    return report.installations
                }
            }
            var counts: [Int] = []
            for try await count in group { counts.append(count) }
            return counts
        }
        #expect(reports.reduce(0, +) == 40, "reports \(reports)")
        let removed = voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue }
        #expect(removed.count == 40)
        #expect(Set(removed) == Set(tokens))
        #expect(try await Self.list(h, "alice").isEmpty)
        await h.stop()
        await voyado.stop()
    }

    /// A record another Redis writer planted: times at the ends of Int64 (once shown as years
    /// 292278994 and -292275055), control and bidi characters in the platform, the push service and
    /// an upstream name. The list shows none of it as stored: times clamped to RFC 3339's years,
    /// the strings as `unknown:` hashes, one log line naming the fields; the erasure still reaches it.
    @Test func oddStoredValuesAreNeverEchoed() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        var secrets = Self.secrets
        secrets[.env("TEST_ADMIN_TOKEN")] = ServerToServerTests.adminToken
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado), secrets: secrets, topLevel: "admin: {token: {env: TEST_ADMIN_TOKEN}}")
        let contact = "odd-" + UUID().uuidString
        let apns = Self.apns()
        #expect(try await h.post("/installations", Self.ios(apns), contact: contact).status == 202)

        let redis = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        defer { redis.close() }
        let key = ContactKeys(app: h.app, contactID: contact).inventory, field = TokenKeys(app: h.app, pushToken: apns).digest
        let stored = try #require(try await redis.send(["HGET", key, field]).string.flatMap { try? JSONValue.parse(Array($0.utf8)) }?.objectValue)
        let platform = "ios\u{202E}\u{1B}[31m", service = "\u{2066}apns\u{0}", upstream = "evil\u{200F}\u{9B}name"
        let planted = JSONObject([
            JSONMember("x", try #require(stored["x"])), JSONMember("p", .string(platform)), JSONMember("s", .string(service)),
            JSONMember("u", .array([.string("voyado"), .string(upstream)])),
            JSONMember("f", .number(String(Int64.max))), JSONMember("l", .number(String(Int64.min))),
        ])
        _ = try await redis.send(["HSET", key, field, JSONValue.object(planted).encodedString()])

        func call(_ method: String) async throws -> Harness.Reply { try await h.installations(method, contact: contact) }
        let listed = try await call("GET")
        #expect(listed.status == 200, "\(listed.text)")
        let item = try #require(listed.json?["installations"]?.arrayValue?.first?.objectValue, "\(listed.text)")
        #expect(item["token"]?.stringValue == Redact.token(apns))
        #expect(item["platform"]?.stringValue == "unknown:" + Redact.shortHash(platform))
        #expect(item["push_service"]?.stringValue == "unknown:" + Redact.shortHash(service))
        #expect(item["upstreams"] == .array([.string("voyado"), .string("unknown:" + Redact.shortHash(upstream))]))
        #expect(item["first_seen"]?.stringValue == "9999-12-31T23:59:59.999Z")
        #expect(item["last_seen"]?.stringValue == "0000-01-01T00:00:00.000Z")
        #expect(!TextRules.hasForbiddenCharacter(listed.text) && !listed.text.contains("\\u"), "\(listed.text)")

        let lines = h.logs.text.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)).objectValue }
        let warning = try #require(lines.first { $0["msg"]?.stringValue?.hasPrefix("inventory record holds values") == true })
        #expect(Set((warning["fields"]?.stringValue ?? "").split(separator: ",")) == ["platform", "push_service", "upstreams", "first_seen", "last_seen"])
        #expect(warning["contact"]?.stringValue == Redact.contact(contact))
        #expect(!h.logs.text.split(separator: "\n").contains { TextRules.hasForbiddenCharacter(String($0)) })

        let erased = try await call("DELETE")
        #expect(erased.status == 202, "\(erased.text)")
        #expect(erased.json?["installations"] == .number("1"))
        #expect(voyado.received(path: "/installations/unregister").count == 1)
        #expect(try await redis.send(["HLEN", key]) == .integer(0))
        await h.stop()
        await voyado.stop()
    }

    @Test func anErasureWhileAProviderIsDownIsDeliveredWhenItIsBack() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado) + "\n" + PushNoticeTests.upstream(pn, role: "shadow"),
                                         secrets: Self.secrets)
        let fcm = Self.android()
        #expect(try await h.post("/installations", Self.android(fcm)).outcome("pushnotice") == "forwarded")
        // Push Notice is down through the erasure's retries.
        pn.enqueue(.init(status: 503), .init(status: 503), .init(status: 503))
        let report = try await Self.registrar(h).erase("alice", in: try Self.app(h), requestID: "erase-down")
        let outcomes = Dictionary(uniqueKeysWithValues: report.upstreams.map { ($0.0, $0.1) })
        #expect(outcomes["voyado"] == .forwarded)
        #expect(outcomes["pushnotice"] == .queued)
        #expect(try await Self.list(h, "alice").isEmpty)
        // The outbox delivers the removal once Push Notice answers again.
        let deadline = Date().addingTimeInterval(20)
        while pn.subscriber(token: fcm)?.status != "inactive", Date() < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(pn.received(method: "DELETE").count == 4)
        #expect(pn.subscriber(token: fcm)?.status == "inactive")
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    @Test func registeringOneMoreThanTheCapEvictsTheLeastRecentlySeen() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado), secrets: Self.secrets,
                                         clientYAML: "      platforms: [ios, android]\n      max_installations: 2")
        let first = Self.apns(), second = Self.apns(), third = Self.apns()
        for token in [first, second] {
            #expect(try await h.post("/installations", Self.ios(token)).status == 202)
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(try await h.post("/installations", Self.ios(third)).status == 202)
        let listed = Set(try await Self.list(h, "alice").map(\.token))
        #expect(listed == [Redact.token(second), Redact.token(third)])
        #expect(voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue } == [first])
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains(#"pushwarden_inventory_removed_total{app="\#(h.app)",reason="evicted"} 1"#), "\(metrics.text)")
        await h.stop()
        await voyado.stop()
    }

    @Test(arguments: [false, true]) func anInstallationNotSeenForExpireAfterIsUnregisteredAndForgotten(memoryStore: Bool) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado) + "\n    inventory:\n      expire_after: 1500ms",
                                         secrets: Self.secrets, memoryStore: memoryStore)
        let idle = Self.apns(), active = Self.apns()
        #expect(try await h.post("/installations", Self.ios(idle)).status == 202)
        // The active device keeps registering (answered unchanged): it is never expired.
        let deadline = Date().addingTimeInterval(10)
        var kept = true
        while Date() < deadline {
            #expect(try await h.post("/installations", Self.ios(active)).status == 202)
            if voyado.received(path: "/installations/unregister").contains(where: { $0.object?["push_token"]?.stringValue == idle }) {
                kept = false
                break
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(!kept, "the idle installation was not expired")
        // Go on registering the active one past another expire_after.
        let more = Date().addingTimeInterval(2)
        while Date() < more {
            #expect(try await h.post("/installations", Self.ios(active)).status == 202)
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await Self.list(h, "alice").map(\.token) == [Redact.token(active)])
        #expect(!voyado.received(path: "/installations/unregister").contains { $0.object?["push_token"]?.stringValue == active })
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains(#"pushwarden_inventory_expired_total{app="\#(h.app)"} 1"#), "\(metrics.text)")
        await h.stop()
        await voyado.stop()
    }

    @Test func aFluxerRegistrationUnderAnotherUserSessionIsForwardedAgain() async throws {
        let fluxer = try MockFluxer(sessions: ["fluxer-user-session", "second-user-session"])
        let h = try await SidecarHarness(upstreams: FluxerTests.upstream(fluxer), secrets: Self.secrets)
        let fcm = Self.android()
        let first = try await h.post("/installations", Self.android(fcm), headers: ["X-Fluxer-Session": "fluxer-user-session"])
        #expect(first.outcome("fluxer") == "forwarded")
        #expect(try await h.post("/installations", Self.android(fcm), headers: ["X-Fluxer-Session": "fluxer-user-session"])
            .outcome("fluxer") == "unchanged")
        let other = try await h.post("/installations", Self.android(fcm), headers: ["X-Fluxer-Session": "second-user-session"])
        #expect(other.outcome("fluxer") == "forwarded")
        #expect(fluxer.registers.count == 2)
        await h.stop()
        await fluxer.stop()
    }

    /// The rule an erasure racing a registration of the same contact keeps: every provider
    /// registration it leaves behind is listed in the inventory.
    @Test func anErasureRacingRegistrationsNeverLeavesAnUnlistedRegistration() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado), secrets: Self.secrets)
        let tokens = (0..<12).map { _ in Self.apns() }
        for token in tokens.prefix(4) { #expect(try await h.post("/installations", Self.ios(token)).status == 202) }
        // Slow Voyado a little so registrations are in flight while the erasure runs.
        let app = try Self.app(h), registrar = Self.registrar(h)
        async let registrations: [Int] = withThrowingTaskGroup(of: Int.self) { group in
            for token in tokens.suffix(8) { group.addTask { try await h.post("/installations", Self.ios(token)).status } }
            var statuses: [Int] = []
            for try await status in group { statuses.append(status) }
            return statuses
        }
        let report = try await registrar.erase("alice", in: app, requestID: "race")
        #expect(try await registrations.allSatisfy { $0 == 202 })
        #expect(report.installations >= 4)
        // What Voyado still holds: registered after its last removal.
        var held: Set<String> = []
        for request in voyado.received {
            guard let token = request.object?["push_token"]?.stringValue else { continue }
            if request.path.hasSuffix("/unregister") { held.remove(token) } else { held.insert(token) }
        }
        let listed = Set(try await Self.list(h, "alice").map(\.token))
        #expect(held.map(Redact.token).allSatisfy(listed.contains), "held \(held.count), listed \(listed.count)")
        await h.stop()
        await voyado.stop()
    }
}
