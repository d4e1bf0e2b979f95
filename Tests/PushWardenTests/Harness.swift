import Foundation
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
import PushWarden
import PushWardenTestSupport
import RedisClient
import SessionAuth
import Testing

/// A running sidecar in front of a mock Voyado, on real loopback sockets, with a real store.
final class Harness: Sendable {
    enum StoreKind: Sendable { case redis, memory, unreachableRedis }

    let app: String
    let mock: MockVoyado
    let sidecar: Sidecar
    let client: HTTPClient
    let logs: LogSink
    let sessionSecret: [UInt8]
    let voyadoKey: String

    static let sessionRef = SecretRef.env("TEST_SESSION_SECRET")
    static let voyadoRef = SecretRef.env("TEST_VOYADO_KEY")

    /// - Parameters:
    ///   - clientYAML: replaces the app's `client:` block.
    ///   - retry: the upstream's retry block.
    init(store: StoreKind = .redis, clientYAML: String? = nil, retry: String = "{attempts: 3, backoff: 10ms, max_backoff: 50ms}",
         timeout: String = "2s", mock: MockVoyado? = nil, voyadoKey: String? = nil,
         sharedStore: (any DedupeStore)? = nil, sameAppAs other: Harness? = nil) async throws {
        app = other?.app ?? "app-" + UUID().uuidString.prefix(8).lowercased()
        let key = voyadoKey ?? mock?.apiKey ?? "vk_" + UUID().uuidString
        self.voyadoKey = key
        let mock = try mock ?? MockVoyado(apiKey: key)
        self.mock = mock
        sessionSecret = Array("test-session-secret-0123456789abcdef".utf8)
        let yaml = """
            version: 1
            apps:
              \(app):
                session:
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: TEST_SESSION_SECRET}
                  issuer: https://auth.test
                  audience: test-app
                  contact_claim: contact_id
                  leeway: 5s
                client:
            \(clientYAML ?? "      platforms: [ios, android]\n      max_body: 4KiB\n      max_events: 5")
                dedupe:
                  refresh_after: 1h
                upstreams:
                  - name: voyado
                    provider: voyado
                    base_path: \(mock.basePath)
                    api_key: {env: TEST_VOYADO_KEY}
                    timeout: \(timeout)
                    retry: \(retry)
            """
        let policy: Policy
        switch PolicyLoader.load(text: yaml, path: "test.yaml") {
        case .success(let p): policy = p
        case .failure(let diagnostics):
            Issue.record("policy: \(diagnostics.diagnostics.map(\.description))")
            throw diagnostics
        }
        logs = LogSink.memory()
        let chosenStore: any DedupeStore
        switch store {
        case .redis:
            chosenStore = try sharedStore ?? RedisStore(client: RedisClient(configuration: RedisConfiguration(url: RedisServer.shared.url)))
        case .memory:
            chosenStore = sharedStore ?? MemoryStore()
        case .unreachableRedis:
            chosenStore = RedisStore(client: RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: Harness.closedPort())))
        }
        let secrets = StaticSecrets([Harness.sessionRef: sessionSecret, Harness.voyadoRef: Array(key.utf8)])
        sidecar = try Sidecar(policy: policy,
                              configuration: ServeConfiguration(listen: HostPort(host: "127.0.0.1", port: 0),
                                                                admin: HostPort(host: "127.0.0.1", port: 0), threads: 2),
                              logger: Logger(label: "test", level: .debug, sink: logs), secrets: secrets, store: chosenStore)
        client = try HTTPClient()
    }

    func stop() async {
        await sidecar.shutdown(gracePeriodSeconds: 1)
        await mock.stop()  // idempotent: harnesses may share one mock
        client.shutdown()
    }

    func token(contact: String = "alice", expiresIn: Int = 600, audience: String = "test-app") -> String {
        let now = Int(Date().timeIntervalSince1970)
        let claims = JSONObject([
            JSONMember("sub", .string("user-" + contact)),
            JSONMember("contact_id", .string(contact)),
            JSONMember("iss", .string("https://auth.test")),
            JSONMember("aud", .string(audience)),
            JSONMember("iat", .number(String(now))),
            JSONMember("exp", .number(String(now + expiresIn))),
        ])
        return JWTMinter.mintHS256(claims: claims, secret: sessionSecret)
    }

    struct Reply: Sendable {
        var status: Int
        var headers: HTTPHeaders
        var body: [UInt8]
        var json: JSONObject? { (try? JSONValue.parse(body))?.objectValue }
        var text: String { String(decoding: body, as: UTF8.self) }
        var errorCode: String? { json?["error"]?.objectValue?["code"]?.stringValue }
        var errorField: String? { json?["error"]?.objectValue?["field"]?.stringValue }
        var outcome: String? { json?["upstreams"]?.objectValue?["voyado"]?.stringValue }
    }

    func post(_ route: String, _ body: String, token: String? = nil, contact: String = "alice",
              headers extra: HTTPHeaders = [:], app: String? = nil, method: String = "POST") async throws -> Reply {
        var headers: HTTPHeaders = ["Content-Type": "application/json"]
        if let token { headers.add("Authorization", "Bearer \(token)") } else { headers.add("Authorization", "Bearer \(self.token(contact: contact))") }
        for field in extra { headers.set(field.name, field.value) }
        let response = try await client.execute(HTTPClientRequest(
            method: method, url: "http://127.0.0.1:\(sidecar.port)/v1/apps/\(app ?? self.app)\(route)",
            headers: headers, body: Array(body.utf8), timeoutMillis: 10_000))
        return Reply(status: response.status, headers: response.headers, body: response.body)
    }

    func admin(_ path: String) async throws -> Reply {
        let response = try await client.execute(HTTPClientRequest(method: "GET", url: "http://127.0.0.1:\(sidecar.adminPort)\(path)"))
        return Reply(status: response.status, headers: response.headers, body: response.body)
    }

    static func apnsToken() -> String {
        (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
    }

    /// A loopback port nothing listens on.
    static func closedPort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
