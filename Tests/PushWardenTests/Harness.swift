import Foundation
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import SessionAuth
import Testing

/// A running sidecar in front of a mock Voyado, on real loopback sockets, with a real store:
/// `SidecarHarness` with one Voyado upstream and its mock.
final class Harness: Sendable {
    enum StoreKind: Sendable { case redis, memory, unreachableRedis }

    let base: SidecarHarness
    let mock: MockVoyado
    let voyadoKey: String

    var app: String { base.app }
    var sidecar: Sidecar { base.sidecar }
    var client: HTTPClient { base.client }
    var logs: LogSink { base.logs }
    var sessionSecret: [UInt8] { base.sessionSecret }

    /// - Parameters:
    ///   - clientYAML: replaces the app's `client:` block.
    ///   - retry: the upstream's retry block.
    ///   - circuit: the upstream's circuit block (the policy's defaults when nil).
    init(store: StoreKind = .redis, clientYAML: String? = nil, retry: String = "{attempts: 3, backoff: 10ms, max_backoff: 50ms}",
         timeout: String = "2s", circuit: String? = nil, mock: MockVoyado? = nil, voyadoKey: String? = nil,
         sharedStore: (any DedupeStore)? = nil, sameAppAs other: Harness? = nil) async throws {
        let key = voyadoKey ?? mock?.apiKey ?? "vk_" + UUID().uuidString
        self.voyadoKey = key
        let mock = try mock ?? MockVoyado(apiKey: key)
        self.mock = mock
        let chosenStore: any DedupeStore
        switch store {
        case .redis:
            chosenStore = try sharedStore ?? RedisStore(client: RedisClient(configuration: RedisConfiguration(url: RedisServer.shared.url)))
        case .memory:
            chosenStore = sharedStore ?? MemoryStore()
        case .unreachableRedis:
            chosenStore = RedisStore(client: RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: Loopback.unusedPort() ?? 1)))
        }
        base = try await SidecarHarness(
            upstreams: """
                      - name: voyado
                        provider: voyado
                        base_path: \(mock.basePath)
                        api_key: {env: TEST_VOYADO_KEY}
                        timeout: \(timeout)
                        retry: \(retry)
                """ + (circuit.map { "\n        circuit: \($0)" } ?? ""),
            secrets: [.env("TEST_VOYADO_KEY"): key],
            clientYAML: clientYAML ?? "      platforms: [ios, android]\n      max_body: 4KiB\n      max_events: 5",
            store: chosenStore, sameApp: other?.app)
    }

    func stop() async {
        await base.stop()
        await mock.stop()  // idempotent: harnesses may share one mock
    }

    func token(contact: String = "alice", expiresIn: Int = 600, audience: String = "test-app") -> String {
        base.token(contact: contact, expiresIn: expiresIn, audience: audience)
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
        try await base.post(route, body, token: token, contact: contact, headers: extra, app: app, method: method)
    }

    func admin(_ path: String) async throws -> Reply { try await base.admin(path) }

    static func apnsToken() -> String {
        (0..<32).map { _ in String(format: "%02X", UInt8.random(in: 0...255)) }.joined()
    }
}
