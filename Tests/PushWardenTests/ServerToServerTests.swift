import Foundation
import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// The server-to-server API's HTTP edge (contract section 8) on a real sidecar over loopback
/// HTTP, in front of `RecordingAdministration`, which stands in for the inventory's operations
/// and records every call it gets.
@Suite struct ServerToServerTests {
    static let adminToken = "pw-admin-" + String(repeating: "0123456789abcdef", count: 2)

    // MARK: The answers

    @Test func listAnswersTheContactsInstallations() async throws {
        let fake = RecordingAdministration(installations: [
            InstallationSummary(token: "tok:1a2b3c4d", platform: "ios", pushService: "apns", upstreams: ["voyado", "pushnotice"],
                                firstSeenMillis: 1_777_622_400_000, lastSeenMillis: 1_782_987_642_456),
            InstallationSummary(token: "tok:0f0e0d0c", platform: "web", pushService: "web_push", upstreams: [],
                                firstSeenMillis: 0, lastSeenMillis: 999),
        ])
        try await withAdminSidecar(fake) { h in
            // `/` and a space and a non-ASCII letter, each percent-encoded, reach the operation decoded.
            let reply = try await h.admin("GET", contact: "ali%20ce%2Fb%C3%A9", headers: ["X-Request-Id": "list-1"])
            #expect(reply.status == 200)
            #expect(reply.headers["X-Request-Id"] == "list-1")
            #expect(reply.headers["Content-Type"] == "application/json")
            #expect(reply.text == #"{"installations":[{"token":"tok:1a2b3c4d","platform":"ios","push_service":"apns","upstreams":["voyado","pushnotice"],"first_seen":"2026-05-01T08:00:00.000Z","last_seen":"2026-07-02T10:20:42.456Z"},{"token":"tok:0f0e0d0c","platform":"web","push_service":"web_push","upstreams":[],"first_seen":"1970-01-01T00:00:00.000Z","last_seen":"1970-01-01T00:00:00.999Z"}]}"#)
            #expect(fake.calls == [.init(operation: "list", app: h.app, contact: "ali ce/bé", requestID: nil)])
        }
    }

    @Test func eraseAnswers202WithEachUpstreamsOutcomeAndWritesOneAuditLine() async throws {
        let contact = "erase-me-" + UUID().uuidString
        let fake = RecordingAdministration(report: ErasureReport(installations: 3, upstreams: [
            ("voyado", .forwarded), ("pushnotice", .queued), ("fluxer", .skipped),
            ("voidhash", .failed(.rejected(upstream: "voidhash", status: 400, code: "invalid_token"))),
        ]))
        try await withAdminSidecar(fake) { h in
            let reply = try await h.admin("DELETE", contact: contact, headers: ["X-Request-Id": "erase-1"])
            #expect(reply.status == 202)
            #expect(reply.headers["X-Request-Id"] == "erase-1")
            #expect(reply.text == #"{"request_id":"erase-1","installations":3,"upstreams":{"voyado":"forwarded","pushnotice":"queued","fluxer":"skipped","voidhash":"failed"},"failures":{"voidhash":{"code":"upstream_rejected","message":"voidhash refused the request","upstream_code":"invalid_token"}}}"#)
            #expect(fake.calls == [.init(operation: "erase", app: h.app, contact: contact, requestID: "erase-1")])

            let audit = h.logLines.filter { $0["logger"]?.stringValue == "audit" }
            #expect(audit.count == 1)
            let line = try #require(audit.first)
            #expect(line["level"] == "info")
            #expect(line["msg"] == "contact erased")
            #expect(line["app"]?.stringValue == h.app)
            #expect(line["contact"]?.stringValue == Redact.contact(contact))
            #expect(line["installations"] == "3")
            #expect(line["request_id"] == "erase-1")
            #expect(line["upstreams"] == "voyado=forwarded,pushnotice=queued,fluxer=skipped,voidhash=failed:upstream_rejected")
            #expect(line["remote"] == "127.0.0.1")
            #expect(!h.logs.text.contains(contact))
        }
    }

    @Test func aSecondEraseIsAnswered202Too() async throws {
        let fake = RecordingAdministration(report: ErasureReport(installations: 0, upstreams: [("voyado", .skipped)]))
        try await withAdminSidecar(fake) { h in
            for _ in 0..<2 {
                let reply = try await h.admin("DELETE", contact: "bob")
                #expect(reply.status == 202)
                #expect(reply.json?["installations"] == .number("0"))
                #expect(reply.json?["failures"] == nil)
                #expect(reply.json?["request_id"]?.stringValue == reply.headers["X-Request-Id"])
            }
            #expect(fake.calls.count == 2)
            #expect(h.logLines.filter { $0["logger"]?.stringValue == "audit" }.count == 2)
        }
    }

    /// An operation that cannot run (the store unreachable) is the contract's error, not a 202.
    @Test(arguments: ["GET", "DELETE"])
    func anUnavailableStoreIs503(_ method: String) async throws {
        let fake = RecordingAdministration(failure: ContractError(.upstreamUnavailable, "the store is unreachable; try again later", retryAfter: 2))
        try await withAdminSidecar(fake) { h in
            let reply = try await h.admin(method, contact: "carol")
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            #expect(reply.headers["Retry-After"] == "2")
            #expect(reply.json?["error"]?.objectValue?["request_id"]?.stringValue == reply.headers["X-Request-Id"])
            #expect(h.logLines.filter { $0["logger"]?.stringValue == "audit" }.count == 0)
            #expect(!h.logs.text.contains("carol"))
        }
    }

    // MARK: Who may call

    static let authorizations: [(String, String?, Int)] = [
        ("none", nil as String?, 401),
        ("wrong token, same length", "Bearer " + String(adminToken.reversed()), 401),
        ("a prefix of the token", "Bearer " + String(adminToken.dropLast()), 401),
        ("the token and one more byte", "Bearer " + adminToken + "x", 401),
        ("another scheme", "Basic " + adminToken, 401),
        ("the scheme alone", "Bearer", 401),
        ("the right token", "Bearer " + adminToken, 200),
        ("the scheme in lower case", "bearer " + adminToken, 200),
        ("the scheme in upper case, extra spaces", "BEARER   " + adminToken, 200),
    ]

    /// One sidecar for every case (the machine is shared): each case's calls are counted apart.
    @Test func theAdminTokenIsRequired() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            for (name, authorization, status) in Self.authorizations {
                let before = fake.calls.count
                for method in ["GET", "DELETE"] {
                    let reply = try await h.admin(method, contact: "dave", authorization: authorization)
                    let expected = method == "DELETE" && status == 200 ? 202 : status
                    #expect(reply.status == expected, "\(name) \(method)")
                    #expect(reply.headers["X-Request-Id"] != nil)
                    if status == 401 {
                        #expect(reply.errorCode == "unauthorized", "\(name)")
                        #expect(reply.headers["WWW-Authenticate"] == "Bearer", "\(name)")
                    }
                }
                #expect(fake.calls.count - before == (status == 200 ? 2 : 0), "\(name)")
            }
            // Refusals are logged with their reason; the token never is.
            let refused = h.logLines.filter { $0["msg"] == "admin token refused" }.compactMap { $0["reason"]?.stringValue }
            #expect(Set(refused) == ["no Authorization header", "wrong token", "not a Bearer token"])
            #expect(!h.logs.text.contains(Self.adminToken))
        }
    }

    @Test func twoAuthorizationHeadersAreRefused() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            var headers: HTTPHeaders = ["Authorization": "Bearer " + Self.adminToken]
            headers.add("Authorization", "Bearer " + Self.adminToken)
            let reply = try await h.admin("GET", contact: "erin", authorization: nil, headers: headers)
            #expect(reply.status == 401)
            #expect(fake.calls.isEmpty)
        }
    }

    /// Without the policy's `admin` block the routes do not exist, whatever the caller sends.
    @Test func withoutAnAdminBlockTheRoutesAnswer404() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake, adminBlock: false) { h in
            for method in ["GET", "DELETE", "POST"] {
                let reply = try await h.admin(method, contact: "frank")
                #expect(reply.status == 404)
                #expect(reply.errorCode == "not_found")
                #expect(reply.headers["WWW-Authenticate"] == nil)
            }
            #expect(fake.calls.isEmpty)
        }
    }

    /// Until the inventory wires its operations in (`serve`'s sidecar passes none), the routes
    /// answer 404 even with the token configured.
    @Test func theClientListenerHasNoSuchRoutes() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            for method in ["GET", "DELETE"] {
                let reply = try await h.request(method, port: h.sidecar.port, path: "/v1/apps/\(h.app)/contacts/hank/installations",
                                                headers: ["Authorization": "Bearer " + Self.adminToken])
                #expect(reply.status == 404)
                #expect(reply.errorCode == "not_found")
                #expect(reply.headers["X-Request-Id"] != nil)
            }
            #expect(fake.calls.isEmpty)
        }
    }

    // MARK: Bad requests

    static let badContacts: [(String, String?)] = [
        ("%zz", "contact has a malformed percent-encoding (% must be followed by two hex digits)"),
        ("ab%4", "contact has a malformed percent-encoding (% must be followed by two hex digits)"),
        ("ab%", "contact has a malformed percent-encoding (% must be followed by two hex digits)"),
        ("a%00b", "contact must not contain U+0000"),
        ("a%0Ab", "contact must not contain U+000A"),
        ("a%E2%80%AEb", "contact must not contain U+202E"),
        ("%C3", "contact is not valid UTF-8 once percent-decoded"),
        ("%FF%FE", "contact is not valid UTF-8 once percent-decoded"),
        ("%C0%AF", "contact is not valid UTF-8 once percent-decoded"),
        ("%20%20", "contact must not be blank"),
        ("", "contact must not be empty"),
        ("a%22b", nil),
        (String(repeating: "a", count: 257), "contact exceeds 256 bytes"),
        (String(repeating: "%61", count: 257), "contact exceeds 256 bytes"),
        (String(repeating: "%C3%A9", count: 128) + "a", "contact exceeds 256 bytes"),
    ]

    @Test func badContactsAre400() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            for (segment, message) in Self.badContacts {
                let before = fake.calls.count
                for method in ["GET", "DELETE"] {
                    let reply = try await h.admin(method, contact: segment)
                    if let message {
                        #expect(reply.status == 400, "\(segment)")
                        #expect(reply.errorCode == "invalid_request", "\(segment)")
                        #expect(reply.errorField == "contact", "\(segment)")
                        #expect(reply.json?["error"]?.objectValue?["message"]?.stringValue == message, "\(segment)")
                        #expect(reply.headers["X-Request-Id"] != nil)
                    } else {
                        #expect(reply.status < 300, "\(segment)")
                    }
                }
                #expect(fake.calls.count - before == (message == nil ? 2 : 0), "\(segment)")
            }
        }
    }

    @Test func aContactOf256BytesIsAccepted() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            let contact = String(repeating: "é", count: 128)
            #expect(contact.utf8.count == 256)
            let reply = try await h.admin("GET", contact: String(repeating: "%C3%A9", count: 128))
            #expect(reply.status == 200)
            #expect(fake.calls.map(\.contact) == [contact])
        }
    }

    @Test func anUnknownAppIs404() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            for method in ["GET", "DELETE"] {
                let reply = try await h.request(method, path: "/v1/apps/no-such-app/contacts/ivan/installations")
                #expect(reply.status == 404)
                #expect(reply.errorCode == "not_found")
                #expect(reply.json?["error"]?.objectValue?["message"]?.stringValue == "unknown app")
            }
            // Nor does the app id match another spelling of it.
            let upper = try await h.request("GET", path: "/v1/apps/\(h.app.uppercased())/contacts/ivan/installations")
            #expect(upper.status == 404)
            #expect(fake.calls.isEmpty)
        }
    }

    @Test func otherMethodsAre405() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            for method in ["POST", "PUT", "PATCH", "OPTIONS"] {
                let reply = try await h.admin(method, contact: "judy")
                #expect(reply.status == 405, "\(method)")
                #expect(reply.errorCode == "method_not_allowed", "\(method)")
                #expect(reply.headers["Allow"] == "GET, DELETE", "\(method)")
                #expect(reply.headers.values("Allow").count == 1, "\(method)")
            }
            #expect(fake.calls.isEmpty)
        }
    }

    @Test func aBodyIsRefused() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            let reply = try await h.admin("DELETE", contact: "kim", body: Array(#"{"why":"gdpr"}"#.utf8))
            #expect(reply.status == 413)
            #expect(reply.errorCode == "payload_too_large")
            #expect(fake.calls.isEmpty)
        }
    }

    /// Other paths under `/v1` on the admin listener are no routes, with or without the token.
    @Test func nearMissesAre404() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            for path in ["/v1/apps/\(h.app)/contacts/x/installations/", "/v1/apps/\(h.app)/contacts/x", "/v1/apps/\(h.app)/installations/x",
                         "/v1/apps/\(h.app)/coverage/",
                         "/v1/apps/\(h.app)/contacts/x/y/installations", "/v2/apps/\(h.app)/contacts/x/installations"] {
                let reply = try await h.request("GET", path: path)
                #expect(reply.status == 404, "\(path)")
                #expect(reply.errorCode == "not_found")
            }
            #expect(fake.calls.isEmpty)
        }
    }

    // MARK: The listener

    /// An erasure that takes its time (here: until the test lets it finish) runs in a task of its
    /// own: `/healthz` on the same one-thread listener is answered meanwhile. Were the listener held
    /// by the erasure, `/healthz` would never answer and the gate never open.
    @Test func aSlowEraseDoesNotHoldUpHealthz() async throws {
        let gate = AsyncStream<Void>.makeStream()
        let fake = RecordingAdministration(gate: gate.stream)
        try await withAdminSidecar(fake) { h in
            let erase = Task { try await h.admin("DELETE", contact: "leo") }
            // Until the erase has begun.
            let began = ContinuousClock.now
            while fake.calls.isEmpty, ContinuousClock.now - began < .seconds(30) { try await Task.sleep(for: .milliseconds(10)) }
            #expect(fake.calls.count == 1)
            do {
                for _ in 0..<5 {
                    let health = try await h.request("GET", path: "/healthz", authorization: nil, timeoutMillis: 10_000)
                    #expect(health.status == 200)
                }
                let ready = try await h.request("GET", path: "/readyz", authorization: nil, timeoutMillis: 10_000)
                #expect(ready.status == 200)
            } catch {
                // Let a held listener go, so that the sidecar can stop and the failure shows.
                gate.continuation.finish()
                throw error
            }
            #expect(fake.finished == 0)
            gate.continuation.finish()
            #expect(try await erase.value.status == 202)
            #expect(fake.finished == 1)
        }
    }

    // MARK: The token from the policy

    @Test func aReloadSwapsTheToken() async throws {
        let fake = RecordingAdministration()
        try await withAdminSidecar(fake) { h in
            let newToken = "pw-admin-next-" + String(repeating: "fedcba9876543210", count: 2)
            #expect(try await h.admin("GET", contact: "mia").status == 200)

            let rotated = try AdminHarness.policy(app: h.app, adminBlock: "admin:\n  token: {env: TEST_ADMIN_TOKEN_NEXT}\n")
            guard case .success = await h.sidecar.reload(rotated, sha256: "rotated") else {
                Issue.record("reload refused")
                return
            }
            #expect(try await h.admin("GET", contact: "mia").status == 401)
            #expect(try await h.admin("GET", contact: "mia", authorization: "Bearer " + newToken).status == 200)

            // A token too short is refused at reload; the running one stays.
            let short = try AdminHarness.policy(app: h.app, adminBlock: "admin:\n  token: {env: TEST_ADMIN_TOKEN_SHORT}\n")
            guard case .failure(let error) = await h.sidecar.reload(short, sha256: "short") else {
                Issue.record("a short token was put in force")
                return
            }
            #expect(error.description == "test.yaml:3:10: admin.token: the admin token from env:TEST_ADMIN_TOKEN_SHORT is 31 bytes; at least 32 are required (openssl rand -hex 32 makes one)")
            #expect(try await h.admin("GET", contact: "mia", authorization: "Bearer " + newToken).status == 200)

            let without = try AdminHarness.policy(app: h.app, adminBlock: "")
            guard case .success = await h.sidecar.reload(without, sha256: "without") else {
                Issue.record("reload refused")
                return
            }
            #expect(try await h.admin("GET", contact: "mia", authorization: "Bearer " + newToken).status == 404)
        }
    }

    @Test(arguments: [
        ("TEST_ADMIN_TOKEN_SHORT", "test.yaml:3:10: admin.token: the admin token from env:TEST_ADMIN_TOKEN_SHORT is 31 bytes; at least 32 are required (openssl rand -hex 32 makes one)"),
        ("TEST_ADMIN_TOKEN_SPACE", "test.yaml:3:10: admin.token: the admin token from env:TEST_ADMIN_TOKEN_SPACE must be visible ASCII without spaces (openssl rand -hex 32 makes one)"),
        ("TEST_ADMIN_TOKEN_UNSET", "test.yaml:3:10: admin.token: secret env:TEST_ADMIN_TOKEN_UNSET: not provided"),
    ])
    func aTokenThatCannotServeStopsTheStart(_ name: String, _ expected: String) throws {
        let refusal = try #require(Self.startRefusal(try AdminHarness.policy(app: "shop", adminBlock: "admin:\n  token: {env: \(name)}\n")),
                                   "started with \(name)")
        #expect(refusal == expected)
        for value in AdminHarness.secrets.values { #expect(!refusal.contains(String(decoding: value, as: UTF8.self))) }
    }

    /// Why a sidecar on `policy` refuses to start, or nil when it started (it is stopped again).
    static func startRefusal(_ policy: Policy) -> String? {
        do {
            let sidecar = try Sidecar(policy: policy, configuration: AdminHarness.configuration, logger: Logger(label: "t", level: .error, sink: .memory()),
                                      secrets: StaticSecrets(AdminHarness.secrets), store: MemoryStore(), administration: RecordingAdministration())
            Task { await sidecar.shutdown(gracePeriodSeconds: 0) }
            return nil
        } catch {
            return error.description
        }
    }

    // MARK: Tokens per app (one policy, several tenants)

    static let shopToken = "pw-shop-" + String(repeating: "0a1b2c3d4e5f6a7b", count: 2)
    static let blogToken = "pw-blog-" + String(repeating: "9f8e7d6c5b4a3f2e", count: 2)

    /// The body of `reply` with its request id taken out, so two refusals can be compared whole.
    static func withoutRequestID(_ reply: Harness.Reply) -> String {
        reply.text.replacingOccurrences(of: reply.headers["X-Request-Id"] ?? "\u{0}", with: "")
    }

    /// An app token lists and erases its own app's contacts and nothing else: for another app
    /// (known or not) it gets the very answer a wrong token gets, so it learns nothing of the
    /// other tenants. The operator's token (`admin.token`) reaches every app.
    @Test func anAppTokenReachesOnlyItsOwnApp() async throws {
        let fake = RecordingAdministration()
        try await withTenantSidecar(fake, policy: try AdminHarness.tenants()) { h in
            let wrong = try await h.request("GET", path: "/v1/apps/shop/contacts/zoe/installations",
                                            authorization: "Bearer " + String(Self.shopToken.reversed()))
            #expect(wrong.status == 401)
            for (token, own, other) in [(Self.shopToken, "shop", "blog"), (Self.blogToken, "blog", "shop")] {
                let bearer = "Bearer " + token
                #expect(try await h.request("GET", path: "/v1/apps/\(own)/contacts/zoe/installations", authorization: bearer).status == 200)
                #expect(try await h.request("DELETE", path: "/v1/apps/\(own)/contacts/zoe/installations", authorization: bearer).status == 202)
                for app in [other, "no-such-app", own.uppercased()] {
                    for method in ["GET", "DELETE", "POST"] {
                        let reply = try await h.request(method, path: "/v1/apps/\(app)/contacts/zoe/installations", authorization: bearer)
                        #expect(reply.status == 401, "\(own)'s token, \(method) \(app)")
                        #expect(reply.headers["WWW-Authenticate"] == "Bearer")
                        #expect(Self.withoutRequestID(reply) == Self.withoutRequestID(wrong), "\(own)'s token, \(method) \(app)")
                    }
                }
            }
            let operatorToken = "Bearer " + Self.adminToken
            for app in ["shop", "blog"] {
                #expect(try await h.request("GET", path: "/v1/apps/\(app)/contacts/zoe/installations", authorization: operatorToken).status == 200)
            }
            #expect(try await h.request("GET", path: "/v1/apps/no-such-app/contacts/zoe/installations", authorization: operatorToken).status == 404)
            #expect(fake.calls.map { "\($0.operation) \($0.app)" } == ["list shop", "erase shop", "list blog", "erase blog", "list shop", "list blog"])
            let refused = h.logLines.filter { $0["msg"] == "admin token refused" }
            #expect(Set(refused.compactMap { $0["reason"]?.stringValue }) == ["wrong token", "token of another app"])
            let audit = h.logLines.filter { $0["logger"]?.stringValue == "audit" }.compactMap { $0["credential"]?.stringValue }
            #expect(audit == ["app token", "app token"])
            for token in [Self.adminToken, Self.shopToken, Self.blogToken] { #expect(!h.logs.text.contains(token)) }
        }
    }

    /// App tokens alone (no top-level `admin`) open the routes: each app to its own token; an
    /// app without one is reached by nobody.
    @Test func appTokensWithoutAnOperatorToken() async throws {
        let fake = RecordingAdministration()
        try await withTenantSidecar(fake, policy: try AdminHarness.tenants(operatorToken: false, blog: nil)) { h in
            #expect(try await h.request("GET", path: "/v1/apps/shop/contacts/zoe/installations", authorization: "Bearer " + Self.shopToken).status == 200)
            for token in [Self.shopToken, Self.blogToken, Self.adminToken] {
                let reply = try await h.request("GET", path: "/v1/apps/blog/contacts/zoe/installations", authorization: "Bearer " + token)
                #expect(reply.status == 401)
                #expect(reply.errorCode == "unauthorized")
            }
            #expect(fake.calls.map(\.app) == ["shop"])
        }
    }

    /// A reload puts changed app tokens in force with the rest of the policy; a policy in which
    /// two tenants would share a token (or an app the operator's) is refused, and the running
    /// tokens stay.
    @Test func aReloadSwapsAppTokens() async throws {
        let fake = RecordingAdministration()
        try await withTenantSidecar(fake, policy: try AdminHarness.tenants()) { h in
            let path = "/v1/apps/blog/contacts/zoe/installations"
            #expect(try await h.request("GET", path: path, authorization: "Bearer " + Self.blogToken).status == 200)
            guard case .success = await h.sidecar.reload(try AdminHarness.tenants(blog: "TEST_BLOG_ADMIN_TOKEN_NEXT"), sha256: "next") else {
                Issue.record("reload refused")
                return
            }
            let next = "Bearer " + "pw-blog-next-" + String(repeating: "0123456789abcdef", count: 2)
            #expect(try await h.request("GET", path: path, authorization: "Bearer " + Self.blogToken).status == 401)
            #expect(try await h.request("GET", path: path, authorization: next).status == 200)
            #expect(try await h.request("GET", path: "/v1/apps/shop/contacts/zoe/installations", authorization: "Bearer " + Self.shopToken).status == 200)

            for (shop, blog, expected) in [
                ("TEST_SHOP_ADMIN_TOKEN", "TEST_SHOP_ADMIN_TOKEN",
                 "test.yaml:28:14: apps.blog.admin.token: the admin token from env:TEST_SHOP_ADMIN_TOKEN has the same value as the one from env:TEST_SHOP_ADMIN_TOKEN (apps.shop.admin.token): every app needs a token of its own, other than the operator's"),
                ("TEST_ADMIN_TOKEN", "TEST_BLOG_ADMIN_TOKEN",
                 "test.yaml:16:14: apps.shop.admin.token: the admin token from env:TEST_ADMIN_TOKEN has the same value as the one from env:TEST_ADMIN_TOKEN (admin.token): every app needs a token of its own, other than the operator's"),
                ("TEST_ADMIN_TOKEN_SHORT", "TEST_BLOG_ADMIN_TOKEN",
                 "test.yaml:16:14: apps.shop.admin.token: the admin token from env:TEST_ADMIN_TOKEN_SHORT is 31 bytes; at least 32 are required (openssl rand -hex 32 makes one)"),
            ] {
                guard case .failure(let error) = await h.sidecar.reload(try AdminHarness.tenants(shop: shop, blog: blog), sha256: "bad") else {
                    Issue.record("put in force: shop \(shop), blog \(blog)")
                    continue
                }
                #expect(error.description == expected)
                #expect(try await h.request("GET", path: path, authorization: next).status == 200)
            }
        }
    }

    /// An app token that cannot serve stops the start, as the operator's does.
    @Test func aShortAppTokenStopsTheStart() throws {
        #expect(Self.startRefusal(try AdminHarness.tenants(shop: "TEST_ADMIN_TOKEN_SHORT"))
            == "test.yaml:16:14: apps.shop.admin.token: the admin token from env:TEST_ADMIN_TOKEN_SHORT is 31 bytes; at least 32 are required (openssl rand -hex 32 makes one)")
    }

    @Test func timestampsAreRFC3339UTC() {
        #expect(RFC3339.utc(epochMillis: 0) == "1970-01-01T00:00:00.000Z")
        #expect(RFC3339.utc(epochMillis: 1_782_987_642_456) == "2026-07-02T10:20:42.456Z")
        #expect(RFC3339.utc(epochMillis: -1) == "1969-12-31T23:59:59.999Z")
        #expect(RFC3339.utc(epochMillis: 951_782_400_000) == "2000-02-29T00:00:00.000Z")
        // RFC 3339's years are 0000-9999: anything beyond (a planted record) is clamped to an end.
        #expect(RFC3339.utc(epochMillis: -62_167_219_200_000) == "0000-01-01T00:00:00.000Z")
        #expect(RFC3339.utc(epochMillis: 253_402_300_799_999) == "9999-12-31T23:59:59.999Z")
        #expect(RFC3339.utc(epochMillis: Int64.max) == "9999-12-31T23:59:59.999Z")
        #expect(RFC3339.utc(epochMillis: Int64.min) == "0000-01-01T00:00:00.000Z")
        #expect(RFC3339.utc(epochMillis: 253_402_300_800_000) == "9999-12-31T23:59:59.999Z")
    }

    /// What the network cannot carry to the decoder (raw bytes that must be percent-encoded).
    @Test(arguments: [
        ("a b", nil), ("é", nil), ("a/b", nil), ("a?b", nil), ("a#b", nil), ("a\"b", nil), ("a%2Fb", "a/b"), ("%e2%82%ac", "€"),
        ("A-z_0.9~!$&'()*+,;=:@", "A-z_0.9~!$&'()*+,;=:@"),
    ] as [(String, String?)])
    func contactSegmentsAreDecodedStrictly(_ segment: String, _ expected: String?) {
        switch ContactRoutes.decodeContact(Substring(segment)) {
        case .success(let contact): #expect(contact == expected, "\(segment)")
        case .failure(let error):
            #expect(expected == nil, "\(segment): \(error.message)")
            #expect(error.code == .invalidRequest)
        }
    }
}

// MARK: - Support

/// Stands in for the inventory's operations: answers what it was given and records each call.
final class RecordingAdministration: ContactAdministration {
    struct Call: Sendable, Equatable {
        var operation: String
        var app: String
        var contact: String
        var requestID: String?
    }

    private let recorded = Mutex<[Call]>([])
    private let finishedCount = Atomic<Int>(0)
    let installations: [InstallationSummary]
    let report: ErasureReport
    let failure: ContractError?
    /// An erasure waits until this stream ends.
    let gate: AsyncStream<Void>?

    init(installations: [InstallationSummary] = [], report: ErasureReport = ErasureReport(installations: 1, upstreams: [("voyado", .forwarded)]),
         failure: ContractError? = nil, gate: AsyncStream<Void>? = nil) {
        self.installations = installations
        self.report = report
        self.failure = failure
        self.gate = gate
    }

    var calls: [Call] { recorded.withLock { $0 } }
    var finished: Int { finishedCount.load(ordering: .relaxed) }

    func installations(of contactID: String, in app: AppRuntime) async throws(ContractError) -> [InstallationSummary] {
        recorded.withLock { $0.append(Call(operation: "list", app: app.policy.id, contact: contactID, requestID: nil)) }
        if let failure { throw failure }
        return installations
    }

    func erase(_ contactID: String, in app: AppRuntime, requestID: String) async throws(ContractError) -> ErasureReport {
        recorded.withLock { $0.append(Call(operation: "erase", app: app.policy.id, contact: contactID, requestID: requestID)) }
        if let gate { for await _ in gate {} }
        _ = finishedCount.wrappingAdd(1, ordering: .relaxed)
        if let failure { throw failure }
        return report
    }
}

/// A sidecar whose policy has (or lacks) the `admin` block, its one app on a dry-run upstream,
/// on loopback ports, with the memory store.
final class AdminHarness: Sendable {
    let app: String
    let sidecar: Sidecar
    let client: HTTPClient
    let logs: LogSink

    static let configuration = ServeConfiguration(listen: HostPort(host: "127.0.0.1", port: 0), admin: HostPort(host: "127.0.0.1", port: 0),
                                                  threads: 1)
    static let secrets: [SecretRef: [UInt8]] = [
        .env("TEST_SESSION_SECRET"): Array("test-session-secret-0123456789abcdef".utf8),
        .env("TEST_ADMIN_TOKEN"): Array(ServerToServerTests.adminToken.utf8),
        .env("TEST_ADMIN_TOKEN_NEXT"): Array(("pw-admin-next-" + String(repeating: "fedcba9876543210", count: 2)).utf8),
        .env("TEST_ADMIN_TOKEN_SHORT"): Array(String(repeating: "s", count: 31).utf8),
        .env("TEST_ADMIN_TOKEN_SPACE"): Array(("pw admin " + String(repeating: "0123456789abcdef", count: 2)).utf8),
        .env("TEST_SHOP_ADMIN_TOKEN"): Array(ServerToServerTests.shopToken.utf8),
        .env("TEST_BLOG_ADMIN_TOKEN"): Array(ServerToServerTests.blogToken.utf8),
        .env("TEST_BLOG_ADMIN_TOKEN_NEXT"): Array(("pw-blog-next-" + String(repeating: "0123456789abcdef", count: 2)).utf8),
    ]

    init(administration: (any ContactAdministration)?, adminBlock: Bool) async throws {
        app = "app-" + UUID().uuidString.prefix(8).lowercased()
        let policy = try Self.policy(app: app, adminBlock: adminBlock ? "admin:\n  token: {env: TEST_ADMIN_TOKEN}\n" : "")
        logs = LogSink.memory()
        let logger = Logger(label: "test", level: .debug, sink: logs)
        if let administration {
            sidecar = try Sidecar(policy: policy, configuration: Self.configuration, logger: logger, secrets: StaticSecrets(Self.secrets),
                                  store: MemoryStore(), administration: administration)
        } else {
            sidecar = try Sidecar(policy: policy, configuration: Self.configuration, logger: logger, secrets: StaticSecrets(Self.secrets),
                                  store: MemoryStore())
        }
        client = try HTTPClient()
    }

    /// A sidecar in front of `administration` serving `policy` (app `app` for `admin(...)`).
    init(policy: Policy, app: String, administration: any ContactAdministration) throws {
        self.app = app
        logs = LogSink.memory()
        sidecar = try Sidecar(policy: policy, configuration: Self.configuration, logger: Logger(label: "test", level: .debug, sink: logs),
                              secrets: StaticSecrets(Self.secrets), store: MemoryStore(), administration: administration)
        client = try HTTPClient()
    }

    /// Two tenants, `shop` and `blog`, each with its own `admin.token` from the variable named
    /// (none when nil), and the operator's `admin.token` unless `operatorToken` is false.
    static func tenants(operatorToken: Bool = true, shop: String? = "TEST_SHOP_ADMIN_TOKEN",
                        blog: String? = "TEST_BLOG_ADMIN_TOKEN") throws -> Policy {
        var yaml = "version: 1\n" + (operatorToken ? "admin:\n  token: {env: TEST_ADMIN_TOKEN}\n" : "") + "apps:\n"
        for (app, variable) in [("shop", shop), ("blog", blog)] {
            yaml += """
                  \(app):
                    session:
                      type: jwt
                      algorithms: [HS256]
                      hmac_secret: {env: TEST_SESSION_SECRET}
                    client:
                      platforms: [ios]
                    upstreams:
                      - name: voyado
                        provider: dry_run

                """
            if let variable { yaml += "    admin:\n      token: {env: \(variable)}\n" }
        }
        return try PolicyLoader.load(text: yaml, path: "test.yaml").get()
    }

    /// The policy with `adminBlock` (YAML at the top level, after `version`) and app `app`.
    static func policy(app: String, adminBlock: String) throws -> Policy {
        let yaml = """
            version: 1
            \(adminBlock)apps:
              \(app):
                session:
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: TEST_SESSION_SECRET}
                client:
                  platforms: [ios, android, web]
                upstreams:
                  - name: voyado
                    provider: dry_run

            """
        return try PolicyLoader.load(text: yaml, path: "test.yaml").get()
    }

    func stop() async {
        await sidecar.shutdown(gracePeriodSeconds: 1)
        client.shutdown()
    }

    /// The log lines written so far, parsed.
    var logLines: [JSONObject] {
        logs.text.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)).objectValue }
    }

    /// `method` on `/v1/apps/{app}/contacts/{contact}/installations` at the admin listener, with
    /// the admin token unless `authorization` says otherwise; `contact` is sent as given.
    func admin(_ method: String, contact: String, authorization: String? = "Bearer " + ServerToServerTests.adminToken,
               headers: HTTPHeaders = [:], body: [UInt8] = [], timeoutMillis: Int = 30_000) async throws -> Harness.Reply {
        try await request(method, path: "/v1/apps/\(app)/contacts/\(contact)/installations", authorization: authorization, headers: headers,
                          body: body, timeoutMillis: timeoutMillis)
    }

    func request(_ method: String, port: Int? = nil, path: String, authorization: String? = "Bearer " + ServerToServerTests.adminToken,
                 headers extra: HTTPHeaders = [:], body: [UInt8] = [], timeoutMillis: Int = 30_000) async throws -> Harness.Reply {
        var headers = extra
        if let authorization { headers.set("Authorization", authorization) }
        let response = try await client.execute(HTTPClientRequest(
            method: method, url: "http://127.0.0.1:\(port ?? sidecar.adminPort)\(path)", headers: headers, body: body,
            timeoutMillis: timeoutMillis))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }
}

/// Runs `body` against an `AdminHarness` in front of `administration`, stopping it afterwards,
/// also when `body` throws.
func withAdminSidecar(_ administration: RecordingAdministration, adminBlock: Bool = true,
                      _ body: (AdminHarness) async throws -> Void) async throws {
    try await running(try await AdminHarness(administration: administration, adminBlock: adminBlock), body)
}

/// Runs `body` against an `AdminHarness` serving `policy`, stopping it afterwards, also when
/// `body` throws.
func withTenantSidecar(_ administration: RecordingAdministration, policy: Policy, _ body: (AdminHarness) async throws -> Void) async throws {
    try await running(try AdminHarness(policy: policy, app: "shop", administration: administration), body)
}

/// Runs `body` against `h` and stops it afterwards, also when `body` throws.
private func running(_ h: AdminHarness, _ body: (AdminHarness) async throws -> Void) async throws {
    do {
        try await body(h)
    } catch {
        await h.stop()
        throw error
    }
    await h.stop()
}
