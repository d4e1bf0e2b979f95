import Foundation
import HTTPServer
import PWCore
import PWPolicy
import Synchronization

/// A real HTTP server that behaves as PushNotice's client integration guide (seed 004) says:
/// `POST`/`DELETE /api/v1/apps/{slug}/subscribers`, the app's `pnp_` key in any of the three
/// documented places, `403` for a slug the key does not belong to, registration idempotent on
/// `(app, token)`, `previous_token` moving the row, unsubscribe always `200 {"ok":true}`.
/// It records what it received, keeps its subscriber table for tests to inspect, and can be
/// told to answer with scripted statuses.
///
/// Where the document is silent the mock decides: a payload without a string `token` (or, on
/// register, without `platform` `ios`, `android` or `web`) is `422`
/// `{"ok":false,"error":{"code":"validation_failed","message":...}}`; unparsable JSON is `422`
/// `invalid_json`; a successful register answers `200 {"ok":true,"subscriber_id":N}`.
public final class MockPushNotice: ProviderMock {
    public static let kind = ProviderKind.pushNotice
    public typealias Received = MockRequest
    public typealias Scripted = MockAnswer

    /// One row of the dashboard's Subscribers tab.
    public struct Subscriber: Sendable, Equatable {
        public var id: Int
        public var token: String
        public var platform: String
        public var status: String
        public var groups: [String]
        public var appVersion: String?
        public var locale: String?
        public var deviceModel: String?
    }

    private struct State {
        var subscribers: [Subscriber] = []
        var nextID = 1
    }

    private let state = Mutex(State())
    public let server: MockServer
    public let apiKey: String
    public let slug: String
    /// The groups operators created in the dashboard; `Master` holds every device.
    public let knownGroups: [String]

    /// - Parameters:
    ///   - apiKey: the key the mock accepts, belonging to `slug` only.
    ///   - knownGroups: existing groups besides `Master`; other names are ignored, as documented.
    public init(apiKey: String = "pnp_test_0123456789abcdef", slug: String = "ktso", knownGroups: [String] = ["Test", "Music Team"],
                host: String = "127.0.0.1", port: Int = 0, threads: Int = 2) throws {
        self.apiKey = apiKey
        self.slug = slug
        self.knownGroups = knownGroups
        server = try MockServer(host: host, port: port, threads: threads)
        server.respond(as: self) { $0.documented($1) }
    }

    public var subscribersPath: String { "/api/v1/apps/\(slug)/subscribers" }

    public func received(method: String) -> [Received] { received.filter { $0.method == method } }
    public var subscribers: [Subscriber] { state.withLock { $0.subscribers } }
    public func subscriber(token: String) -> Subscriber? { subscribers.first { $0.token == token } }
    public func reset() {
        server.reset()
        state.withLock { $0 = State() }
    }

    /// The behaviour the seed document describes.
    private func documented(_ request: HTTPRequest) -> HTTPResponse {
        let prefix = "/api/v1/apps/"
        let path = request.head.path
        guard path.hasPrefix(prefix), path.hasSuffix("/subscribers") else { return Self.error(404, "not_found", "no such route") }
        let pathSlug = String(path.dropFirst(prefix.count).dropLast("/subscribers".count))
        guard let key = presentedKey(request.head), key == apiKey else {
            return Self.error(401, "unauthorized", "missing or invalid API key")
        }
        guard pathSlug == slug else { return Self.error(403, "forbidden", "the API key does not belong to this app") }
        guard request.head.method == "POST" || request.head.method == "DELETE" else {
            return Self.error(405, "method_not_allowed", "use POST or DELETE")
        }
        guard let body = (try? JSONValue.parse(request.body))?.objectValue else {
            return Self.error(422, "invalid_json", "the body must be a JSON object")
        }
        guard let token = body["token"]?.stringValue, !token.isEmpty else {
            return Self.error(422, "validation_failed", "token is required")
        }
        if request.head.method == "DELETE" {
            state.withLock { state in
                if let index = state.subscribers.firstIndex(where: { $0.token == token }) { state.subscribers[index].status = "inactive" }
            }
            return Self.json(200, #"{"ok":true}"#)
        }
        guard let platform = body["platform"]?.stringValue, ["ios", "android", "web"].contains(platform) else {
            return Self.error(422, "validation_failed", "platform must be ios, android or web")
        }
        let groups = ["Master"] + (body["groups"]?.arrayValue ?? []).compactMap(\.stringValue).filter { knownGroups.contains($0) }
        let previous = body["previous_token"]?.stringValue
        let id: Int = state.withLock { state in
            let existing = state.subscribers.firstIndex { $0.token == token }
            let moved: Int? = previous.flatMap { previous in state.subscribers.firstIndex { $0.token == previous } }
            if let moved, existing != nil { state.subscribers[moved].status = "inactive" }
            let i: Int
            if let existing {
                i = existing
            } else if let moved {
                state.subscribers[moved].token = token
                i = moved
            } else {
                state.subscribers.append(Subscriber(id: state.nextID, token: token, platform: platform, status: "active", groups: ["Master"]))
                state.nextID += 1
                i = state.subscribers.count - 1
            }
            state.subscribers[i].platform = platform
            state.subscribers[i].status = "active"
            for group in groups where !state.subscribers[i].groups.contains(group) { state.subscribers[i].groups.append(group) }
            state.subscribers[i].appVersion = body["app_version"]?.stringValue ?? state.subscribers[i].appVersion
            state.subscribers[i].locale = body["locale"]?.stringValue ?? state.subscribers[i].locale
            state.subscribers[i].deviceModel = body["device_model"]?.stringValue ?? state.subscribers[i].deviceModel
            return state.subscribers[i].id
        }
        return Self.json(200, #"{"ok":true,"subscriber_id":\#(id)}"#)
    }

    /// The key from any of the document's three places: Bearer, `X-Api-Key`, `?api_key=`.
    private func presentedKey(_ head: HTTPRequestHead) -> String? {
        if let authorization = head.headers["Authorization"], authorization.hasPrefix("Bearer ") {
            return String(authorization.dropFirst("Bearer ".count))
        }
        if let key = head.headers["X-Api-Key"] { return key }
        for pair in head.query.split(separator: "&") where pair.hasPrefix("api_key=") {
            return String(pair.dropFirst("api_key=".count))
        }
        return nil
    }

    static func json(_ status: Int, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: Array(text.utf8))
    }

    static func error(_ status: Int, _ code: String, _ message: String) -> HTTPResponse {
        let body = JSONValue.object(JSONObject([
            JSONMember("ok", .bool(false)),
            JSONMember("error", .object(JSONObject([JSONMember("code", .string(code)), JSONMember("message", .string(message))]))),
        ]))
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }
}
