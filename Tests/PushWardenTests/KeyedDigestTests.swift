import Foundation
import PWCore
import PWCrypto
import PWPolicy
@testable import PushWarden
@testable import RedisStores
@testable import Registration
import PushWardenTestSupport
import RedisClient
import Testing

/// `store.digest_key`: with it, a dump of Redis cannot be matched against a list of contact ids
/// or tokens, because every name and member that digests one is an HMAC under the key; and what a
/// build without the key wrote is still found (identities, inventory records), so turning the key
/// on loses no device. Real redis-server (one per test, so a scan sees only the test's own keys),
/// real mock providers, the real `pushwarden audit verify`.
@Suite(.serialized) struct KeyedDigestTests {
    static let storeKey = EncryptionAtRestTests.storeKey
    static let digestKey = Data(SecureRandom.bytes(32)).base64EncodedString()
    static var digests: KeyDigest { KeyDigest(secret: [UInt8](Data(base64Encoded: digestKey) ?? Data())) }

    /// The rate limiter names a counter in one string; it is the contact's key for the route and window.
    @Test func aCountersKeyIsItsContactsRateLimitKey() {
        for digests in [Self.digests, KeyDigest.unkeyed] {
            let key = digests.rateLimit("alice@example.com", app: "bench", route: "register", window: 1_733_450_000)
            #expect(key == digests.contact("alice@example.com", app: "bench").rateLimit(route: "register") + ":1733450000")
        }
    }

    static func harness(voyado: MockVoyado, voidhash: MockVoidhash, server: RedisServer, app: String?, digest: Bool,
                        audit: Ed25519PrivateKey? = nil, rateLimits: String? = nil, queued: MockVoyado? = nil,
                        expireAfter: String? = nil) async throws -> SidecarHarness {
        var secrets = InventoryTests.secrets
        secrets[.env("TEST_ADMIN_TOKEN")] = ServerToServerTests.adminToken
        secrets[.env("PW_STORE_KEY")] = storeKey
        secrets[.env("PW_DIGEST_KEY")] = digestKey
        var topLevel = "admin: {token: {env: TEST_ADMIN_TOKEN}}\nstore:\n  encryption_key: {env: PW_STORE_KEY}\n"
        if digest { topLevel += "  digest_key: {env: PW_DIGEST_KEY}\n" }
        if let audit {
            secrets[.env("TEST_AUDIT_KEY")] = String(decoding: try audit.pem(), as: UTF8.self)
            topLevel += "audit: {signing_key: {env: TEST_AUDIT_KEY}}\n"
        }
        let store = RedisStore(client: RedisClient(configuration: server.configuration()))
        var upstreams = InventoryTests.voyado(voyado) + "\n" + VoidhashTests.block(voidhash, role: "shadow")
        if let queued { upstreams += "\n" + OutboxTests.voyado(queued, name: "vq", role: "shadow") }
        if let expireAfter { upstreams += "\n    inventory:\n      expire_after: \(expireAfter)" }
        return try await SidecarHarness(upstreams: upstreams,
                                        secrets: secrets,
                                        clientYAML: "      platforms: [ios, android]" + (rateLimits.map { "\n      rate_limits: \($0)" } ?? ""),
                                        store: store, sameApp: app, topLevel: topLevel)
    }

    /// Every unkeyed digest an earlier build names these contacts and tokens by: of app and
    /// contact, of app and token, of app, upstream and token, and of the token alone (an outbox
    /// waiting mark).
    static func unkeyedDigests(app: String, contacts: [String], tokens: [String]) -> [String] {
        contacts.map { SHA256.hexHash(joining: app, $0) } + tokens.flatMap { token in
            [SHA256.hexHash(joining: app, token), SHA256.hexHash(Array(token.utf8))]
                + ["voyado", "vh", "vq"].map { SHA256.hexHash(joining: app, $0, token) }
        }
    }

    static func register(_ h: SidecarHarness, _ token: String, contact: String) async throws -> Harness.Reply {
        try await h.post("/installations", InventoryTests.android(token), contact: contact)
    }

    static func unregister(_ h: SidecarHarness, _ token: String, contact: String) async throws -> Harness.Reply {
        try await h.post("/installations/unregister", InventoryTests.unregister(token), contact: contact)
    }

    static func count(_ reply: Harness.Reply) -> Int? {
        if let list = reply.json?["installations"]?.arrayValue { return list.count }
        guard case .number(let text)? = reply.json?["installations"] else { return nil }
        return Int(text)
    }

    // MARK: A dump

    /// Registrations, a token that moves between contacts, an unregister, a listing, rate-limited
    /// requests and an erasure with its receipt: afterwards no key name and no value in Redis
    /// holds an unkeyed digest of a contact or a token, yet the keyed ones are there, rate limits
    /// are still per contact and the evidence trail verifies.
    @Test func withADigestKeyNoUnkeyedDigestOfAContactOrTokenIsInRedis() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let voyado = try MockVoyado(apiKey: "voyado-key"), voidhash = try MockVoidhash(publishableKey: VoidhashTests.key)
        let signing = try Ed25519PrivateKey.generate()
        // A queued upstream that is down: deliveries and their waiting marks stay in Redis.
        let down = try MockVoyado(apiKey: "voyado-key")
        for _ in 0..<200 { down.enqueue(.init(status: 503)) }
        let h = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: nil, digest: true, audit: signing,
                                       rateLimits: "{unregister: 2/min}", queued: down)
        let t1 = VoidhashTests.fcm(), t2 = VoidhashTests.fcm(), t3 = VoidhashTests.fcm()
        for (token, contact) in [(t1, "alice"), (t2, "alice"), (t3, "bob"), (t3, "alice")] {
            let reply = try await Self.register(h, token, contact: contact)
            #expect(reply.outcome("voyado") == "forwarded" && reply.outcome("vh") == "forwarded" && reply.outcome("vq") == "queued",
                    "\(reply.text)")
        }
        #expect(try await Self.register(h, t2, contact: "alice").outcome("voyado") == "unchanged", "dedupe under keyed names")
        let gone = try await Self.unregister(h, t1, contact: "alice")
        #expect(gone.outcome("vh") == "forwarded", "the identity is found under its keyed name: \(gone.text)")
        #expect(voidhash.device(token: t1) == nil)
        #expect(try await Self.unregister(h, t3, contact: "bob").outcome("vh") == "skipped", "t3 moved to alice: bob's logout is bound to bob")
        #expect(Self.count(try await h.installations("GET", contact: "alice")) == 2)

        // Rate limits are still per contact: alice's third unregister this minute is refused, bob is not held back.
        #expect(try await Self.unregister(h, VoidhashTests.fcm(), contact: "alice").status == 202)
        #expect(try await Self.unregister(h, VoidhashTests.fcm(), contact: "alice").status == 429)
        #expect(try await Self.unregister(h, VoidhashTests.fcm(), contact: "bob").status == 202)

        let erased = try await h.installations("DELETE", contact: "carol")
        #expect(erased.status == 202, "\(erased.text)")
        let body = try #require(erased.json?["receipt"]?.objectValue?["body"]?.stringValue)
        let receipt = try #require(AuditReceipt(body: body))
        #expect(receipt.contact == Self.digests.contact("carol", app: h.app).digest, "a receipt names the contact as the keys do")

        let contents = try await RedisContents.read(server.configuration())
        for needle in Self.unkeyedDigests(app: h.app, contacts: ["alice", "bob", "carol"], tokens: [t1, t2, t3]) {
            #expect(contents.occurrences(of: needle).isEmpty, "\(contents.occurrences(of: needle))")
        }
        // Not vacuous: the keyed names are there, in key names and in the holders' values.
        let alice = Self.digests.contact("alice", app: h.app).digest
        #expect(contents.items.contains { $0.key == "pw:v2:{c:\(alice)}:inv" }, "\(contents.items.map(\.key))")
        #expect(contents.items.contains { $0.key.hasPrefix("pw:v2:{c:\(alice)}:rate:unregister:") })
        #expect(contents.items.contains { $0.key == Self.digests.registration(t2, app: h.app, upstream: "vh").identity })
        #expect(!contents.occurrences(of: Self.digests.token(t3, app: h.app).digest).isEmpty)
        #expect(contents.items.contains { $0.key.hasSuffix(":q:" + Self.digests.hex(h.app, "vq", t2)) }, "the waiting mark is keyed")
        #expect(!h.logs.text.contains(Self.digestKey))
        #expect(h.logs.text.contains("hmac-sha256 (store.digest_key)"))

        let path = FileManager.default.temporaryDirectory.appendingPathComponent("audit-\(UUID().uuidString).pem").path
        try Data(try signing.publicKeyPEM()).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let run = try CommandLineTests.run(["audit", "verify", "--redis", server.url, "--key", path, "--app", h.app])
        #expect(run.status == 0 && run.stdout.contains("\(h.app): 1 receipts, intact"), "\(run.stdout)\(run.stderr)")
        await h.stop()
        await voyado.stop()
        await voidhash.stop()
        await down.stop()
    }

    // MARK: Keys of earlier builds

    /// A deployment turns `digest_key` on over a store an earlier build filled: the installations
    /// it recorded are listed, unregistered by the identities it kept (a logout still bound to its
    /// contact), registered again once (their dedupe entries are not found) and moved under the
    /// keyed names, and erased; afterwards nothing of the erased contact is left under an
    /// unkeyed name.
    @Test func whatABuildWithoutTheKeyStoredIsStillListedUnregisteredAndErased() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let voyado = try MockVoyado(apiKey: "voyado-key"), voidhash = try MockVoidhash(publishableKey: VoidhashTests.key)
        let before = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: nil, digest: false)
        let app = before.app
        let t1 = VoidhashTests.fcm(), t2 = VoidhashTests.fcm(), t3 = VoidhashTests.fcm(), t4 = VoidhashTests.fcm()
        for (token, contact) in [(t1, "alice"), (t2, "alice"), (t3, "alice"), (t4, "bob")] {
            #expect(try await Self.register(before, token, contact: contact).outcome("vh") == "forwarded")
        }
        await before.stop()
        let legacy = try await RedisContents.read(server.configuration())
        #expect(!legacy.occurrences(of: SHA256.hexHash(joining: app, "alice")).isEmpty, "the earlier build's names are unkeyed")

        let h = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: app, digest: true)
        let listed = try await h.installations("GET", contact: "alice")
        #expect(Self.count(listed) == 3, "\(listed.text)")

        // An unregister finds the identity and the record the earlier build kept.
        let gone = try await Self.unregister(h, t1, contact: "alice")
        #expect(gone.outcome("vh") == "forwarded", "\(gone.text)")
        #expect(voidhash.device(token: t1) == nil)
        // Still bound to its contact: bob holds t4 under the unkeyed names.
        #expect(try await Self.unregister(h, t4, contact: "alice").outcome("vh") == "skipped")
        #expect(voidhash.device(token: t4) != nil)

        // Its dedupe entry is not found under the keyed name: forwarded once more, then kept keyed.
        let again = try await Self.register(h, t2, contact: "alice")
        #expect(again.outcome("voyado") == "forwarded" && again.outcome("vh") == "forwarded", "\(again.text)")
        #expect(try await Self.register(h, t2, contact: "alice").outcome("voyado") == "unchanged")
        #expect(Self.count(try await h.installations("GET", contact: "alice")) == 2, "t2 once, t3")

        let erased = try await h.installations("DELETE", contact: "alice")
        #expect(erased.status == 202 && Self.count(erased) == 2, "\(erased.text)")
        #expect(voidhash.device(token: t2) == nil && voidhash.device(token: t3) == nil, "t3 unregistered by its unkeyed identity")
        #expect(Self.count(try await h.installations("GET", contact: "alice")) == 0)

        let contents = try await RedisContents.read(server.configuration())
        for needle in Self.unkeyedDigests(app: app, contacts: ["alice"], tokens: [t1, t2, t3]) {
            #expect(contents.occurrences(of: needle).isEmpty, "\(contents.occurrences(of: needle))")
        }
        // bob was not touched since: his installation stays under the unkeyed names until he is.
        #expect(!contents.occurrences(of: SHA256.hexHash(joining: app, "bob")).isEmpty)
        #expect(Self.count(try await h.installations("GET", contact: "bob")) == 1)
        await h.stop()
        await voyado.stop()
        await voidhash.stop()
    }

    /// An installation an earlier build recorded and nobody touches again still expires once the
    /// key is set: the sweeper reads its unkeyed `seen` entry, opens its record where it sits and
    /// unregisters it by the identity kept under the unkeyed name.
    @Test func anInstallationRecordedBeforeTheKeyStillExpires() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let voyado = try MockVoyado(apiKey: "voyado-key"), voidhash = try MockVoidhash(publishableKey: VoidhashTests.key)
        let before = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: nil, digest: false)
        let app = before.app, token = VoidhashTests.fcm()
        #expect(try await Self.register(before, token, contact: "alice").outcome("vh") == "forwarded")
        await before.stop()

        let h = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: app, digest: true, expireAfter: "1500ms")
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, voidhash.device(token: token) != nil { try await Task.sleep(for: .milliseconds(100)) }
        #expect(voidhash.device(token: token) == nil, "not expired")
        #expect(voyado.received(path: "/installations/unregister").contains { $0.object?["push_token"]?.stringValue == token })
        var remaining: Int?
        for _ in 0..<50 {
            remaining = Self.count(try await h.installations("GET", contact: "alice"))
            if remaining == 0 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(remaining == 0, "the record is forgotten with its installation")
        let contents = try await RedisContents.read(server.configuration())
        for needle in Self.unkeyedDigests(app: app, contacts: ["alice"], tokens: [token]) {
            #expect(contents.occurrences(of: needle).isEmpty, "\(contents.occurrences(of: needle))")
        }
        await h.stop()
        await voyado.stop()
        await voidhash.stop()
    }

    /// A token an earlier build recorded for bob, registered by alice after the key is set: bob's
    /// unkeyed record goes (the move is seen), so erasing bob later never unregisters alice's device.
    @Test func aTokenMovedAfterTheKeyIsSetLeavesItsEarlierHoldersRecord() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let voyado = try MockVoyado(apiKey: "voyado-key"), voidhash = try MockVoidhash(publishableKey: VoidhashTests.key)
        let before = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: nil, digest: false)
        let app = before.app, token = VoidhashTests.fcm()
        #expect(try await Self.register(before, token, contact: "bob").outcome("vh") == "forwarded")
        await before.stop()

        let h = try await Self.harness(voyado: voyado, voidhash: voidhash, server: server, app: app, digest: true)
        #expect(try await Self.register(h, token, contact: "alice").outcome("vh") == "forwarded")
        #expect(Self.count(try await h.installations("GET", contact: "bob")) == 0)
        let erased = try await h.installations("DELETE", contact: "bob")
        #expect(Self.count(erased) == 0, "\(erased.text)")
        #expect(voidhash.device(token: token) != nil, "alice's device stays registered")
        #expect(Self.count(try await h.installations("GET", contact: "alice")) == 1)
        await h.stop()
        await voyado.stop()
        await voidhash.stop()
    }
}
