import Foundation
import HTTPClient
import PWCore
import PWPolicy
import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import SessionAuth
import Testing

/// A running sidecar for any upstream set: the test writes the `upstreams:` YAML (pointing at
/// its own mock servers) and names the secrets it references. Real Redis by default.
final class SidecarHarness: Sendable {
    let app: String
    let sidecar: Sidecar
    let client: HTTPClient
    let logs: LogSink
    let sessionSecret: [UInt8] = Array("test-session-secret-0123456789abcdef".utf8)
    /// The policy it serves and the secrets it resolved, for a command run beside it.
    let policy: Policy
    let secrets: StaticSecrets

    /// - Parameters:
    ///   - upstreams: the YAML list under `upstreams:`, indented by six spaces per line as in
    ///     `      - name: x\n        provider: voyado\n...`.
    ///   - secrets: the values of the secrets that YAML references (`TEST_SESSION_SECRET` is added).
    ///   - platforms: the app's `client.platforms`.
    ///   - clientYAML: replaces the app's whole `client:` block (then `platforms` is ignored).
    ///   - store: the dedupe store (default: Redis, or memory with `memoryStore`).
    ///   - topLevel: top-level policy blocks after `apps` (`store:`), unindented.
    ///   - sessionYAML: replaces the app's `session:` keys (indented by six spaces per line).
    init(upstreams: String, secrets: [SecretRef: String] = [:], platforms: String = "[ios, android, web]",
         clientYAML: String? = nil, memoryStore: Bool = false, store: (any DedupeStore)? = nil, sameApp: String? = nil,
         topLevel: String = "", sessionYAML: String? = nil) async throws {
        app = sameApp ?? "app-" + UUID().uuidString.prefix(8).lowercased()
        let session = sessionYAML ?? """
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: TEST_SESSION_SECRET}
                  issuer: https://auth.test
                  audience: test-app
                  contact_claim: contact_id
                  leeway: 5s
            """
        var yaml = """
            version: 1
            apps:
              \(app):
                session:
            \(session)
                client:
            \(clientYAML ?? "      platforms: \(platforms)")
                dedupe:
                  refresh_after: 1h
                upstreams:
            \(upstreams)
            """
        if !topLevel.isEmpty { yaml += "\n" + topLevel }
        switch PolicyLoader.load(text: yaml, path: "test.yaml") {
        case .success(let p): policy = p
        case .failure(let diagnostics):
            Issue.record("policy: \(diagnostics.diagnostics.map(\.description))")
            throw diagnostics
        }
        logs = LogSink.memory()
        var values: [SecretRef: [UInt8]] = [.env("TEST_SESSION_SECRET"): sessionSecret]
        for (ref, value) in secrets { values[ref] = Array(value.utf8) }
        self.secrets = StaticSecrets(values)
        let store: any DedupeStore = try store ?? (memoryStore
            ? MemoryStore()
            : RedisStore(client: RedisClient(configuration: RedisConfiguration(url: RedisServer.shared.url))))
        sidecar = try Sidecar(policy: policy,
                              configuration: ServeConfiguration(listen: HostPort(host: "127.0.0.1", port: 0),
                                                                admin: HostPort(host: "127.0.0.1", port: 0), threads: 2),
                              logger: Logger(label: "test", level: .debug, sink: logs), secrets: StaticSecrets(values), store: store)
        client = try HTTPClient()
    }

    func stop() async {
        await sidecar.shutdown(gracePeriodSeconds: 1)
        client.shutdown()
    }

    func token(contact: String = "alice", expiresIn: Int = 600, audience: String = "test-app") -> String {
        let now = Int(Date().timeIntervalSince1970)
        return JWTMinter.mintHS256(claims: JSONObject([
            JSONMember("sub", .string("user-" + contact)),
            JSONMember("contact_id", .string(contact)),
            JSONMember("iss", .string("https://auth.test")),
            JSONMember("aud", .string(audience)),
            JSONMember("iat", .number(String(now))),
            JSONMember("exp", .number(String(now + expiresIn))),
        ]), secret: sessionSecret)
    }

    /// POSTs `body` to `/v1/apps/{app}{route}` with a session for `contact` (or `token`) and any
    /// extra headers.
    func post(_ route: String, _ body: String, token: String? = nil, contact: String = "alice", headers extra: HTTPHeaders = [:],
              app: String? = nil, method: String = "POST") async throws -> Harness.Reply {
        var headers: HTTPHeaders = ["Content-Type": "application/json", "Authorization": "Bearer \(token ?? self.token(contact: contact))"]
        for field in extra { headers.set(field.name, field.value) }
        let response = try await client.execute(HTTPClientRequest(
            method: method, url: "http://127.0.0.1:\(sidecar.port)/v1/apps/\(app ?? self.app)\(route)",
            headers: headers, body: Array(body.utf8), timeoutMillis: 10_000))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }

    /// `method` on a contact's installations (the server-to-server API) with the operator token;
    /// `contact` is the path segment, percent-encoded by the caller.
    func installations(_ method: String, contact: String, token: String = ServerToServerTests.adminToken) async throws -> Harness.Reply {
        let response = try await client.execute(HTTPClientRequest(
            method: method, url: "http://127.0.0.1:\(sidecar.adminPort)/v1/apps/\(app)/contacts/\(contact)/installations",
            headers: ["Authorization": "Bearer " + token], timeoutMillis: 10_000))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }

    func admin(_ path: String) async throws -> Harness.Reply {
        let response = try await client.execute(HTTPClientRequest(method: "GET", url: "http://127.0.0.1:\(sidecar.adminPort)\(path)"))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }
}

extension Harness.Reply {
    /// The outcome the response reports for one upstream.
    func outcome(_ upstream: String) -> String? { json?["upstreams"]?.objectValue?[upstream]?.stringValue }
}

/// Runs `body` against a sidecar (made by `makeHarness`) in front of `mock`, then stops both,
/// also when `body` throws.
func withSidecar<Mock: ProviderMock>(_ mock: Mock, _ makeHarness: (Mock) async throws -> SidecarHarness,
                                     _ body: (SidecarHarness, Mock) async throws -> Void) async throws {
    let h: SidecarHarness
    do {
        h = try await makeHarness(mock)
    } catch {
        await mock.stop()
        throw error
    }
    do {
        try await body(h, mock)
    } catch {
        await h.stop()
        await mock.stop()
        throw error
    }
    await h.stop()
    await mock.stop()
}

/// Registers `body` twice through `h`: the first reaches `upstream` (the mock), the second is
/// answered unchanged without a call, whatever the provider's request looks like.
func expectDuplicateMakesNoCall(_ h: SidecarHarness, _ mock: some ProviderMock, body: String, upstream: String,
                                sourceLocation: SourceLocation = #_sourceLocation) async throws {
    #expect(try await h.post("/installations", body).outcome(upstream) == "forwarded", sourceLocation: sourceLocation)
    let again = try await h.post("/installations", body)
    #expect(again.status == 202, sourceLocation: sourceLocation)
    #expect(again.outcome(upstream) == "unchanged", sourceLocation: sourceLocation)
    #expect(mock.received.count == 1, sourceLocation: sourceLocation)
}
