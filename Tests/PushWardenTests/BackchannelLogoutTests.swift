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
import SessionAuth
import Testing

/// OpenID Connect Back-Channel Logout (contract section 10) over real HTTP, a real redis-server
/// and mock providers: an identity provider with its own ES256 keys signs the sessions and the
/// logout tokens; the logout removes exactly what its session registered, everywhere.
@Suite struct BackchannelLogoutTests {
    /// The identity provider's signing key and the JWKS file the policy names (made once).
    static let idpKey = try! PrivateKey.generateP256()
    static let jwksFile: String = {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pw-bcl-\(UUID().uuidString).json").path
        let jwks = JSONValue.object(JSONObject([JSONMember("keys", .array([.object(idpKey.publicKeyJWK(kid: "idp-1"))]))]))
        try! jwks.encodedString().write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }()
    static let issuer = "https://idp.test"
    static let audience = "shop-app"

    static func session(scope: String = "session") -> String {
        """
              type: jwt
              algorithms: [ES256]
              jwks_file: \(jwksFile)
              issuer: \(issuer)
              audience: \(audience)
              leeway: 5s
              backchannel_logout: {sid_claim: sid, scope: \(scope)}
        """
    }

    static func harness(_ voyado: MockVoyado, _ pn: MockPushNotice? = nil, scope: String = "session", topLevel: String = "",
                        sameApp: String? = nil, secrets extra: [SecretRef: String] = [:], memoryStore: Bool = false) async throws -> SidecarHarness {
        var upstreams = InventoryTests.voyado(voyado)
        if let pn { upstreams += "\n" + PushNoticeTests.upstream(pn, role: "shadow") }
        return try await SidecarHarness(upstreams: upstreams, secrets: InventoryTests.secrets.merging(extra) { $1 }, memoryStore: memoryStore,
                                        sameApp: sameApp, topLevel: topLevel, sessionYAML: session(scope: scope))
    }

    /// A session of `contact` at the identity provider, in its session `sid`.
    static func sessionToken(_ contact: String, sid: String?) throws -> String {
        let now = Int(Date().timeIntervalSince1970)
        var claims = JSONObject([
            JSONMember("iss", .string(issuer)), JSONMember("aud", .string(audience)), JSONMember("sub", .string(contact)),
            JSONMember("iat", .number(String(now))), JSONMember("exp", .number(String(now + 600))),
        ])
        if let sid { claims["sid"] = .string(sid) }
        return try JWTMinter.mintES256(claims: claims, key: idpKey, kid: "idp-1")
    }

    /// A logout token as the specification's example has it; `change` edits the claims.
    static func logoutToken(sub: String?, sid: String?, jti: String = UUID().uuidString, key: PrivateKey = idpKey,
                            change: @Sendable (inout JSONObject) -> Void = { _ in }) throws -> String {
        var claims = JSONObject([
            JSONMember("iss", .string(issuer)), JSONMember("aud", .string(audience)),
            JSONMember("iat", .number(String(Int(Date().timeIntervalSince1970)))), JSONMember("jti", .string(jti)),
            JSONMember("events", .object(JSONObject([JSONMember(SessionVerifier.logoutEvent, .object(JSONObject()))]))),
        ])
        if let sub { claims["sub"] = .string(sub) }
        if let sid { claims["sid"] = .string(sid) }
        change(&claims)
        let header = JSONObject([JSONMember("alg", "ES256"), JSONMember("typ", "logout+jwt"), JSONMember("kid", "idp-1")])
        let input = JWTMinter.signingInput(header: header, claims: claims)
        return input + "." + Base64URL.encode(try key.signES256(message: input.utf8))
    }

    /// The identity provider's POST.
    static func logOut(_ h: SidecarHarness, _ token: String, app: String? = nil) async throws -> Harness.Reply {
        let body = "logout_token=" + Introspector.formEncode(token)
        let response = try await h.client.execute(HTTPClientRequest(
            method: "POST", url: "http://127.0.0.1:\(h.sidecar.port)/v1/apps/\(app ?? h.app)/backchannel-logout",
            headers: ["Content-Type": "application/x-www-form-urlencoded"], body: Array(body.utf8), timeoutMillis: 10_000))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }

    static func register(_ h: SidecarHarness, _ token: String, contact: String, sid: String?) async throws -> Harness.Reply {
        try await h.post("/installations", InventoryTests.ios(token), token: try sessionToken(contact, sid: sid))
    }

    static func unregistered(_ voyado: MockVoyado) -> [String] {
        voyado.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue }
    }

    static func listed(_ h: SidecarHarness, _ contact: String) async throws -> Set<String> {
        Set(try await InventoryTests.list(h, contact).map(\.token))
    }

    static func expectLoggedOut(_ reply: Harness.Reply, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(reply.status == 200, "\(reply.text)", sourceLocation: sourceLocation)
        #expect(reply.headers["Cache-Control"] == "no-store", sourceLocation: sourceLocation)
        #expect(reply.body.isEmpty, sourceLocation: sourceLocation)
    }

    // MARK: What a logout removes

    @Test(arguments: [false, true]) func oneSessionsLogoutLeavesTheContactsOtherSessionRegistered(memoryStore: Bool) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado, memoryStore: memoryStore)
        let contact = "alice-" + UUID().uuidString
        let phone = InventoryTests.apns(), tablet = InventoryTests.apns()
        #expect(try await Self.register(h, phone, contact: contact, sid: "sid-phone").status == 202)
        #expect(try await Self.register(h, tablet, contact: contact, sid: "sid-tablet").status == 202)

        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "sid-phone")))
        #expect(Self.unregistered(voyado) == [phone])
        #expect(try await Self.listed(h, contact) == [Redact.token(tablet)])
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains(#"pushwarden_backchannel_logouts_total{app="\#(h.app)",result="logged_out"} 1"#), "\(metrics.text)")
        #expect(metrics.text.contains(#"pushwarden_inventory_removed_total{app="\#(h.app)",reason="logged_out"} 1"#))
        #expect(h.logs.text.contains("back-channel logout"))
        #expect(!h.logs.text.contains(contact) && !h.logs.text.contains("sid-phone"))
        await h.stop()
        await voyado.stop()
    }

    /// A token with only `sid` finds its contact through the session index.
    @Test(arguments: [false, true]) func aSidOnlyLogoutFindsItsSession(memoryStore: Bool) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado, memoryStore: memoryStore)
        let contact = "bob-" + UUID().uuidString, sid = "sid-" + UUID().uuidString
        let phone = InventoryTests.apns(), tablet = InventoryTests.apns()
        #expect(try await Self.register(h, phone, contact: contact, sid: sid).status == 202)
        #expect(try await Self.register(h, tablet, contact: contact, sid: "other-" + sid).status == 202)
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: nil, sid: sid)))
        #expect(Self.unregistered(voyado) == [phone])
        #expect(try await Self.listed(h, contact) == [Redact.token(tablet)])
        // A session nobody registered under: 200, nothing to do.
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: nil, sid: "never-seen-" + sid)))
        #expect(Self.unregistered(voyado).count == 1)
        await h.stop()
        await voyado.stop()
    }

    /// A device that registered under one session and, unchanged, again under a new one (the
    /// person signed in again): the record follows the new session.
    @Test func aDedupeHitUnderANewSessionMovesTheRecordToIt() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado)
        let contact = "carol-" + UUID().uuidString
        let phone = InventoryTests.apns()
        #expect(try await Self.register(h, phone, contact: contact, sid: "first").outcome("voyado") == "forwarded")
        #expect(try await Self.register(h, phone, contact: contact, sid: "second").outcome("voyado") == "unchanged")
        // The record is written off the answer's path.
        try await Task.sleep(for: .milliseconds(200))
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "first")))
        #expect(Self.unregistered(voyado).isEmpty)
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "second")))
        #expect(Self.unregistered(voyado) == [phone])
        await h.stop()
        await voyado.stop()
    }

    @Test func aSubOnlyLogoutRemovesEveryDeviceOfTheContact() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado)
        let contact = "dave-" + UUID().uuidString, other = "erin-" + UUID().uuidString
        let tokens = [InventoryTests.apns(), InventoryTests.apns(), InventoryTests.apns()]
        for (index, token) in tokens.enumerated() {
            #expect(try await Self.register(h, token, contact: contact, sid: index == 2 ? nil : "sid-\(index)").status == 202)
        }
        let kept = InventoryTests.apns()
        #expect(try await Self.register(h, kept, contact: other, sid: "sid-0").status == 202)
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: nil)))
        #expect(Set(Self.unregistered(voyado)) == Set(tokens))
        #expect(try await Self.listed(h, contact).isEmpty)
        #expect(try await Self.listed(h, other) == [Redact.token(kept)])
        await h.stop()
        await voyado.stop()
    }

    @Test func scopeContactLogsOutEveryDeviceOfTheSubject() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado, scope: "contact")
        let contact = "frank-" + UUID().uuidString, sid = "sid-" + UUID().uuidString
        let phone = InventoryTests.apns(), tablet = InventoryTests.apns()
        #expect(try await Self.register(h, phone, contact: contact, sid: sid).status == 202)
        #expect(try await Self.register(h, tablet, contact: contact, sid: "other").status == 202)
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: nil, sid: sid)))
        #expect(Set(Self.unregistered(voyado)) == [phone, tablet])
        #expect(try await Self.listed(h, contact).isEmpty)
        await h.stop()
        await voyado.stop()
    }

    /// A provider down through the logout: its removal waits in the outbox and arrives later.
    @Test func aLogoutWhileAProviderIsDownIsDeliveredWhenItIsBack() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        let h = try await Self.harness(voyado, pn)
        let contact = "gina-" + UUID().uuidString
        let fcm = InventoryTests.android()
        #expect(try await h.post("/installations", InventoryTests.android(fcm), token: try Self.sessionToken(contact, sid: "s1"))
            .outcome("pushnotice") == "forwarded")
        pn.enqueue(.init(status: 503), .init(status: 503), .init(status: 503))
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "s1")))
        #expect(Self.unregistered(voyado) == [fcm])
        #expect(try await Self.listed(h, contact).isEmpty)
        let deadline = Date().addingTimeInterval(20)
        while pn.subscriber(token: fcm)?.status != "inactive", Date() < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(pn.subscriber(token: fcm)?.status == "inactive")
        await h.stop()
        await voyado.stop()
        await pn.stop()
    }

    // MARK: Tokens refused

    static let refusals: [(String, @Sendable (inout JSONObject) -> Void)] = [
        ("a nonce", { $0["nonce"] = "n-0S6_WzA2Mj" }),
        ("no events", { $0["events"] = nil }),
        ("events without the logout member", { $0["events"] = .object(JSONObject([JSONMember("http://schemas.openid.net/event/other", .object(JSONObject()))])) }),
        ("the logout member not an object", { $0["events"] = .object(JSONObject([JSONMember(SessionVerifier.logoutEvent, "yes")])) }),
        ("another issuer", { $0["iss"] = "https://evil.test" }),
        ("another audience", { $0["aud"] = "other-app" }),
        ("no iat", { $0["iat"] = nil }),
        ("iat an hour ago", { $0["iat"] = .number(String(Int(Date().timeIntervalSince1970) - 3600)) }),
        ("no jti", { $0["jti"] = nil }),
        ("neither sid nor sub", { $0["sid"] = nil; $0["sub"] = nil }),
    ]

    @Test func onTheMemoryStoreAReplayIsRefusedAndALoggedOutSessionCannotRegister() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado, memoryStore: true)
        let contact = "mia-" + UUID().uuidString
        #expect(try await Self.register(h, InventoryTests.apns(), contact: contact, sid: "s1").status == 202)
        let token = try Self.logoutToken(sub: contact, sid: "s1")
        Self.expectLoggedOut(try await Self.logOut(h, token))
        #expect(try await Self.logOut(h, token).status == 400)
        #expect(try await Self.register(h, InventoryTests.apns(), contact: contact, sid: "s1").status == 401)
        await h.stop()
        await voyado.stop()
    }

    @Test func refusedTokensAre400AndRemoveNothing() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado)
        let contact = "hank-" + UUID().uuidString
        let phone = InventoryTests.apns()
        #expect(try await Self.register(h, phone, contact: contact, sid: "s1").status == 202)
        func expectRefused(_ reply: Harness.Reply, _ name: String) {
            #expect(reply.status == 400, "\(name)")
            #expect(reply.text == #"{"error":"invalid_request"}"#, "\(name)")
            #expect(reply.headers["Cache-Control"] == "no-store", "\(name)")
        }
        for (name, change) in Self.refusals {
            expectRefused(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "s1", change: change)), name)
        }
        // Signed by a key that is not the identity provider's.
        let foreign = try PrivateKey.generateP256()
        expectRefused(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "s1", key: foreign)), "a foreign key")
        // A session token is no logout token.
        expectRefused(try await Self.logOut(h, try Self.sessionToken(contact, sid: "s1")), "a session token")
        // Not a form with one token.
        for body in ["", "logout_token=", "token=abc", "logout_token=%zz", "logout_token=a&logout_token=b"] {
            let response = try await h.client.execute(HTTPClientRequest(
                method: "POST", url: "http://127.0.0.1:\(h.sidecar.port)/v1/apps/\(h.app)/backchannel-logout",
                headers: ["Content-Type": "application/x-www-form-urlencoded"], body: Array(body.utf8), timeoutMillis: 10_000))
            expectRefused(Harness.Reply(status: response.status, headers: response.headers, body: response.body), body)
        }
        #expect(Self.unregistered(voyado).isEmpty)
        #expect(try await Self.listed(h, contact) == [Redact.token(phone)])
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains(#"pushwarden_backchannel_logouts_total{app="\#(h.app)",result="invalid"} \#(Self.refusals.count + 7)"#),
                "\(metrics.text)")
        await h.stop()
        await voyado.stop()
    }

    /// The same `jti` again, at this replica or another sharing the Redis: `400`, nothing removed.
    @Test func aReplayedJtiIsRefusedAcrossReplicas() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado)
        let replica = try await Self.harness(voyado, sameApp: h.app)
        let contact = "ivy-" + UUID().uuidString
        let first = InventoryTests.apns(), second = InventoryTests.apns()
        #expect(try await Self.register(h, first, contact: contact, sid: "s1").status == 202)
        // Everywhere: a replay would remove whatever the contact registered since.
        let token = try Self.logoutToken(sub: contact, sid: nil)
        Self.expectLoggedOut(try await Self.logOut(h, token))
        #expect(Self.unregistered(voyado) == [first])
        // The person signs in again.
        #expect(try await Self.register(h, second, contact: contact, sid: "s2").status == 202)
        for sidecar in [h, replica] {
            let reply = try await Self.logOut(sidecar, token)
            #expect(reply.status == 400)
            #expect(reply.text == #"{"error":"invalid_request"}"#)
        }
        #expect(Self.unregistered(voyado) == [first])
        #expect(try await Self.listed(h, contact) == [Redact.token(second)])
        let metrics = try await replica.admin("/metrics")
        #expect(metrics.text.contains(#"pushwarden_backchannel_logouts_total{app="\#(h.app)",result="replayed"} 1"#), "\(metrics.text)")
        await replica.stop()
        await h.stop()
        await voyado.stop()
    }

    @Test func anAppWithoutBackchannelLogoutAnswers501() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: InventoryTests.secrets)
        let reply = try await Self.logOut(h, try Self.logoutToken(sub: "alice", sid: "s1"))
        #expect(reply.status == 501)
        #expect(reply.errorCode == "invalid_request")
        // Unknown apps, other methods and media types get the client API's answers.
        #expect(try await Self.logOut(h, "x", app: "no-such-app").status == 404)
        let json = try await h.post("/backchannel-logout", "{}")
        #expect(json.status == 415)
        #expect(try await h.post("/backchannel-logout", "", method: "GET").status == 405)
        let large = try await h.client.execute(HTTPClientRequest(
            method: "POST", url: "http://127.0.0.1:\(h.sidecar.port)/v1/apps/\(h.app)/backchannel-logout",
            headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: Array(("logout_token=" + String(repeating: "a", count: 26 * 1024)).utf8), timeoutMillis: 10_000))
        #expect(large.status == 413)
        #expect(voyado.received.isEmpty)
        await h.stop()
        await voyado.stop()
    }

    /// With `store.encryption_key`, the session id is sealed with the token: Redis holds neither
    /// as written, and the logout still finds the installation.
    @Test func theSessionIDIsSealedWhenEncryptionIsOn() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado, topLevel: EncryptionAtRestTests.storeBlock(),
                                       secrets: [.env("PW_STORE_KEY"): EncryptionAtRestTests.storeKey])
        let contact = "jill-" + UUID().uuidString, sid = "sid-sealed-" + UUID().uuidString
        let phone = InventoryTests.apns()
        #expect(try await Self.register(h, phone, contact: contact, sid: sid).status == 202)
        let contents = try await RedisContents.read(RedisServer.shared.configuration())
        for value in [sid, phone, contact] { #expect(contents.occurrences(of: value).isEmpty, "\(contents.occurrences(of: value))") }
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: nil, sid: sid)))
        #expect(Self.unregistered(voyado) == [phone])
        await h.stop()
        await voyado.stop()
    }

    /// With `audit.signing_key`, each logout appends a signed receipt to the app's evidence trail,
    /// naming the contact by its digest only, which `audit verify` finds intact.
    @Test func aLogoutAppendsAReceiptToTheEvidenceTrail() async throws {
        let key = try Ed25519PrivateKey.generate()
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado, topLevel: "audit: {signing_key: {env: TEST_AUDIT_KEY}}",
                                       secrets: [.env("TEST_AUDIT_KEY"): String(decoding: try key.pem(), as: UTF8.self)])
        let contact = "kim-" + UUID().uuidString
        #expect(try await Self.register(h, InventoryTests.apns(), contact: contact, sid: "s1").status == 202)
        let reply = try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "s1"))
        Self.expectLoggedOut(reply)

        let redis = RedisClient(configuration: RedisServer.shared.configuration())
        defer { redis.close() }
        guard case .array(let entries) = try await redis.send(["XRANGE", AuditTrail.Keys(app: h.app).receipts, "-", "+"]) else {
            Issue.record("no receipts stream")
            return
        }
        #expect(entries.count == 1)
        guard case .array(let entry)? = entries.first, entry.count == 2, case .array(let fields) = entry[1] else {
            Issue.record("unexpected entry \(entries)")
            return
        }
        let body = try #require(fields.count >= 2 ? fields[1].string : nil)
        let receipt = try #require(AuditReceipt(body: body))
        #expect(body.contains(#""kind":"backchannel_logout""#), "\(body)")
        #expect(receipt.installations == 1)
        #expect(receipt.contact == ContactKeys(app: h.app, contactID: contact).digest)
        #expect(receipt.requestID == reply.headers["X-Request-Id"])
        #expect(!body.contains(contact))
        let run = try AuditTrailTests.verify(h, key: key)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        await h.stop()
        await voyado.stop()
    }

    /// The stolen phone's app still holds its session token and registers on every launch: once
    /// the identity provider logged that session out, its registrations are refused (`401`) on
    /// every replica; the person's new session registers as before.
    @Test func aLoggedOutSessionCannotRegisterAgain() async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await Self.harness(voyado)
        let replica = try await Self.harness(voyado, sameApp: h.app)
        let contact = "lee-" + UUID().uuidString
        let stolen = InventoryTests.apns(), laptop = InventoryTests.apns()
        #expect(try await Self.register(h, stolen, contact: contact, sid: "phone").status == 202)
        #expect(try await Self.register(h, laptop, contact: contact, sid: "laptop").status == 202)
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: "phone")))
        for sidecar in [h, replica] {
            let again = try await Self.register(sidecar, stolen, contact: contact, sid: "phone")
            #expect(again.status == 401)
            #expect(again.errorCode == "unauthorized")
        }
        #expect(try await Self.listed(h, contact) == [Redact.token(laptop)])
        #expect(try await Self.register(h, stolen, contact: contact, sid: "phone-new").outcome("voyado") == "forwarded")
        // A logout of every session (only `sub`) ends each session whose device it removed.
        Self.expectLoggedOut(try await Self.logOut(h, try Self.logoutToken(sub: contact, sid: nil)))
        #expect(try await Self.register(replica, laptop, contact: contact, sid: "laptop").status == 401)
        #expect(try await Self.listed(h, contact).isEmpty)
        await replica.stop()
        await h.stop()
        await voyado.stop()
    }
}
