import Foundation
import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import SessionAuth
import Synchronization
import Testing

/// `session.type: introspect` (docs/configuration.md, sessions) against a real RFC 7662 endpoint on
/// loopback (`MockIntrospection`): sessions, refusals, the cache (hits, `cache_ttl`, `exp`,
/// refusals for 5 s) on a clock the test moves, one call for concurrent lookups of one token, 503
/// with `Retry-After` when the endpoint cannot answer, both client credentials and the cookie.
@Suite(.serialized) struct IntrospectionTests {
    /// The sessions' wall clock, moved by the test.
    final class ManualClock: WallClock, Sendable {
        private let time = Mutex<Double>(Date().timeIntervalSince1970)
        func now() -> Double { time.withLock { $0 } }
        func advance(_ seconds: Double) { time.withLock { $0 += seconds } }
    }

    /// A sidecar with one introspect app (`shop`, dry-run upstream) in front of an endpoint.
    final class Setup: Sendable {
        let sidecar: Sidecar
        let client: HTTPClient
        let logs: LogSink
        let clock = ManualClock()

        init(url: String, clientAuth: String = "{bearer: {env: INTROSPECT_TOKEN}}", source: String = "header: Authorization",
             cacheTTL: String = "60s", timeout: String = "500ms", secrets: [SecretRef: String] = [.env("INTROSPECT_TOKEN"): "introspect-test-credential"]) throws {
            let yaml = """
                version: 1
                apps:
                  shop:
                    session:
                      type: introspect
                      url: \(url)
                      client_auth: \(clientAuth)
                      \(source)
                      contact_field: contact_id
                      cache_ttl: \(cacheTTL)
                      timeout: \(timeout)
                    client:
                      platforms: [ios]
                    upstreams:
                      - name: voyado
                        provider: dry_run

                """
            let policy = try PolicyLoader.load(text: yaml, path: "introspect.yaml").get()
            logs = LogSink.memory()
            sidecar = try Sidecar(policy: policy, configuration: ServeConfiguration(listen: HostPort(host: "127.0.0.1", port: 0),
                                                                                   admin: HostPort(host: "127.0.0.1", port: 0), threads: 2),
                                  logger: Logger(label: "test", level: .debug, sink: logs),
                                  secrets: StaticSecrets(secrets.mapValues { Array($0.utf8) }), store: MemoryStore(), clock: clock)
            client = try HTTPClient()
        }

        func stop() async {
            await sidecar.shutdown(gracePeriodSeconds: 1)
            client.shutdown()
        }

        /// A registration with `headers` (the session) and `contact` as the client's contact_id.
        func register(headers: HTTPHeaders, contact: String? = nil) async throws -> Harness.Reply {
            var all = headers
            all.set("Content-Type", "application/json")
            let apns = String(repeating: "ab", count: 32)
            let contactField = contact.map { #","contact_id":"\#($0)""# } ?? ""
            let response = try await client.execute(HTTPClientRequest(
                method: "POST", url: "http://127.0.0.1:\(sidecar.port)/v1/apps/shop/installations", headers: all,
                body: Array(#"{"platform":"ios","push_token":"\#(apns)"\#(contactField)}"#.utf8), timeoutMillis: 10_000))
            return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
        }

        func register(token: String, contact: String? = nil) async throws -> Harness.Reply {
            try await register(headers: ["Authorization": "Bearer \(token)"], contact: contact)
        }

        func metrics() async throws -> String {
            let response = try await client.execute(HTTPClientRequest(method: "GET", url: "http://127.0.0.1:\(sidecar.adminPort)/metrics"))
            return String(decoding: response.body, as: UTF8.self)
        }
    }

    static func token(_ contact: String) -> String { "tok.\(contact).\(UUID().uuidString)" }

    /// Runs `body` with a mock endpoint and a sidecar in front of it, stopping both afterwards.
    static func with(_ mock: MockIntrospection, setup: (MockIntrospection) throws -> Setup = { try Setup(url: $0.url) },
                     _ body: (MockIntrospection, Setup) async throws -> Void) async throws {
        let s: Setup
        do { s = try setup(mock) } catch {
            await mock.stop()
            throw error
        }
        do { try await body(mock, s) } catch {
            await s.stop()
            await mock.stop()
            throw error
        }
        await s.stop()
        await mock.stop()
    }

    @Test func activeAnswerIsASessionAndTheSecondRequestACacheHit() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            let token = Self.token("alice")
            #expect(try await s.register(token: token, contact: "alice").status == 202)
            // The contact is the answer's: another one is a mismatch, and answered from the cache.
            #expect(try await s.register(token: token, contact: "bob").errorCode == "contact_mismatch")
            #expect(mock.calls == 1)
            #expect(mock.introspected == [token])
            let call = try #require(mock.server.received.first)
            #expect(call.method == "POST" && call.query.isEmpty && !call.path.contains("tok."))
            #expect(call.headers["Authorization"] == "Bearer introspect-test-credential")
            #expect(call.headers["Content-Type"] == "application/x-www-form-urlencoded")
            #expect(try await s.metrics().contains(#"pushwarden_introspection_calls_total{app="shop",result="active"} 1"#))
        }
    }

    @Test func tokenIsPercentEncodedInTheFormAndNeverLogged() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            let token = "tok.carol.a+b/c=d&e%f~g!h"
            #expect(try await s.register(token: token, contact: "carol").status == 202)
            #expect(mock.introspected == [token])
            #expect(mock.server.received.first?.bodyText == "token=tok.carol.a%2Bb%2Fc%3Dd%26e%25f~g%21h")
            mock.behave(.inactive)
            let refused = Self.token("dave")
            #expect(try await s.register(token: refused).status == 401)
            mock.behave(.status(503))
            let unavailable = Self.token("erin")
            #expect(try await s.register(token: unavailable).status == 503)
            let logged = s.logs.text
            #expect(logged.contains("introspection endpoint answered 503"), "the unavailable answer is logged")
            for secret in [token, refused, unavailable, "introspect-test-credential"] { #expect(!logged.contains(secret)) }
        }
    }

    @Test func inactiveIsRefusedAndTheRefusalCachedFiveSeconds() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            mock.behave(.inactive)
            let token = Self.token("alice")
            let first = try await s.register(token: token)
            #expect(first.status == 401)
            #expect(first.errorCode == "unauthorized")
            mock.behave(.active)
            s.clock.advance(4)
            #expect(try await s.register(token: token).status == 401, "still the cached refusal")
            #expect(mock.calls == 1)
            s.clock.advance(1.5)
            #expect(try await s.register(token: token).status == 202, "the refusal expired after 5 s")
            #expect(mock.calls == 2)
        }
    }

    @Test func activeWithoutContactIsRefused() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            mock.behave(.noContact)
            #expect(try await s.register(token: Self.token("alice")).status == 401)
            #expect(mock.calls == 1)
        }
    }

    @Test func integerContactIsItsDecimalTextAndAFloatIsRefused() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            mock.behave(.numberContact("12345"))
            #expect(try await s.register(token: Self.token("x"), contact: "12345").status == 202)
            mock.behave(.numberContact("12345.0"))
            #expect(try await s.register(token: Self.token("y")).status == 401)
            mock.behave(.numberContact("true"))
            #expect(try await s.register(token: Self.token("z")).status == 401)
        }
    }

    @Test func endpoint4xxIsUnauthorized() async throws {
        // A wrong credential of PushWarden's own: the endpoint's 401 is the client's 401 (and logged).
        try await Self.with(MockIntrospection(credential: .bearer("another-credential"))) { mock, s async throws in
            #expect(try await s.register(token: Self.token("alice")).status == 401)
            #expect(mock.calls == 1)
            #expect(s.logs.text.contains("introspection endpoint refused the request"))
        }
    }

    @Test func endpoint5xxIs503WithRetryAfterAndIsNotCached() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            mock.behave(.status(500))
            let token = Self.token("alice")
            let reply = try await s.register(token: token)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "auth_unavailable")
            #expect(reply.headers["Retry-After"] == "5")
            mock.behave(.active)
            #expect(try await s.register(token: token).status == 202, "an unavailable answer is never cached")
            #expect(mock.calls == 2)
            #expect(try await s.metrics().contains(#"pushwarden_introspection_calls_total{app="shop",result="unavailable"} 1"#))
        }
    }

    @Test func endpointDownIs503WithRetryAfter() async throws {
        let setup = try Setup(url: MockIntrospection.closedURL())
        let reply = try await setup.register(token: Self.token("alice"))
        await setup.stop()
        #expect(reply.status == 503)
        #expect(reply.errorCode == "auth_unavailable")
        #expect(reply.headers["Retry-After"] == "5")
    }

    @Test func slowEndpointTimesOutAs503() async throws {
        try await Self.with(MockIntrospection(latencyMillis: 1_500), setup: { try Setup(url: $0.url, timeout: "200ms") }) { mock, s async throws in
            let started = Date()
            let reply = try await s.register(token: Self.token("alice"))
            #expect(reply.status == 503)
            #expect(reply.headers["Retry-After"] == "5")
            #expect(Date().timeIntervalSince(started) < 1.2, "answered at the timeout, not when the endpoint answered")
            #expect(s.logs.text.contains("introspection endpoint timed out"))
        }
    }

    @Test func cachedAnswerServesTheDownEndpointUntilCacheTTL() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            let token = Self.token("alice")
            #expect(try await s.register(token: token).status == 202)
            mock.behave(.status(502))
            s.clock.advance(59)
            #expect(try await s.register(token: token).status == 202, "cached for cache_ttl (60s)")
            #expect(mock.calls == 1)
            s.clock.advance(2)
            #expect(try await s.register(token: token).status == 503, "past cache_ttl the endpoint is asked again")
            #expect(mock.calls == 2)
        }
    }

    @Test func answerIsNeverUsedPastItsExp() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            let exp = Int(s.clock.now()) + 10
            mock.behave(.activeUntil(exp: exp))
            let token = Self.token("alice")
            #expect(try await s.register(token: token).status == 202)
            s.clock.advance(8)
            #expect(try await s.register(token: token).status == 202)
            #expect(mock.calls == 1, "within exp: cached")
            s.clock.advance(3)
            // Past exp (though within cache_ttl): the endpoint is asked again, and its answer is now expired.
            #expect(try await s.register(token: token).status == 401)
            #expect(mock.calls == 2)
        }
    }

    @Test func concurrentRequestsWithOneTokenMakeOneCall() async throws {
        // Answers take 300 ms: every request arrives while the first call is still under way.
        try await Self.with(MockIntrospection(latencyMillis: 300)) { mock, s async throws in
            let token = Self.token("alice")
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<100 { group.addTask { try await s.register(token: token).status } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.count == 100)
            #expect(statuses.allSatisfy { $0 == 202 })
            #expect(mock.calls == 1)
        }
    }

    @Test func basicClientAuth() async throws {
        let password = "p@ss:w/rd é+"
        try await Self.with(MockIntrospection(credential: .basic(user: "pushwarden", password: password)), setup: {
            try Setup(url: $0.url, clientAuth: "{basic: {user: pushwarden, password: {env: INTROSPECT_PASSWORD}}}",
                      secrets: [.env("INTROSPECT_PASSWORD"): password])
        }) { mock, s async throws in
            #expect(try await s.register(token: Self.token("alice")).status == 202)
            #expect(mock.server.received.first?.headers["Authorization"]?.hasPrefix("Basic ") == true)
            #expect(mock.introspected.count == 1)
        }
    }

    @Test func tokenFromTheCookieOnly() async throws {
        try await Self.with(MockIntrospection(), setup: { try Setup(url: $0.url, source: "cookie: sid") }) { mock, s async throws in
            let token = Self.token("alice")
            #expect(try await s.register(headers: ["Cookie": "theme=dark; sid=\(token)"], contact: "alice").status == 202)
            #expect(mock.introspected == [token])
            #expect(try await s.register(token: Self.token("bob")).status == 401, "the Authorization header is not read")
            #expect(mock.calls == 1)
        }
    }

    @Test func noTokenIsRefusedWithoutACall() async throws {
        try await Self.with(MockIntrospection()) { mock, s async throws in
            #expect(try await s.register(headers: [:]).status == 401)
            #expect(try await s.register(headers: ["Authorization": "Basic abc"]).status == 401)
            #expect(mock.calls == 0)
        }
    }
}
