import Foundation
import HTTPServer
import PWCore
import PWPolicy
import Synchronization

/// A real HTTP server that behaves as Fluxer's mobile devices document (seed 002) says: register
/// and unregister under `/v1/users/@me/mobile-devices`, a user session in `Authorization` (bot and
/// OAuth2 credentials refused with 403 `ACCESS_DENIED`, an account with a required action with 403
/// `ACCOUNT_SUSPICIOUS_ACTIVITY`), the two registration forms told apart from the body, its length
/// limits, `URL_NOT_PUBLICLY_ROUTABLE`, registrations per user keyed by the four values, and its
/// per-user rate limits (20/min register, 40/min unregister). It records what it received and can
/// be told to answer with scripted statuses.
public final class MockFluxer: ProviderMock {
    public static let kind = ProviderKind.fluxer
    public typealias Received = MockRequest
    public typealias Scripted = MockAnswer

    /// One stored registration, as Fluxer keeps it.
    public struct Registration: Sendable, Equatable {
        public var deviceID: String
        public var platform: String
        public var token: String
        public var encryptionKey: String?
        public var authSecret: String?
        public var appID: String
        public var providerEnvironment: String?
        public var userAgent: String?
    }

    private struct State {
        /// user session → device_id → registration.
        var registrations: [String: [String: Registration]] = [:]
        /// (user session, bucket) → times of admitted requests in the last minute.
        var buckets: [String: [Double]] = [:]
    }

    private let state = Mutex(State())
    public let server: MockServer
    /// User sessions the mock accepts (the value of `Authorization`, verbatim).
    public let sessions: Set<String>
    /// Sessions of accounts with an outstanding required action.
    public let suspicious: Set<String>
    let rateLimited: Bool

    /// - Parameters:
    ///   - sessions: the user sessions accepted; anything else is 401, `Bot ...`/`Bearer ...` 403.
    ///   - rateLimited: apply the document's per-user rate limits.
    public init(sessions: Set<String> = ["fluxer-user-session"], suspicious: Set<String> = [], rateLimited: Bool = true,
                host: String = "127.0.0.1", port: Int = 0, threads: Int = 2) throws {
        self.sessions = sessions
        self.suspicious = suspicious
        self.rateLimited = rateLimited
        server = try MockServer(host: host, port: port, threads: threads)
        server.respond(as: self) { $0.documented($1) }
    }

    public static let registerPath = "/v1/users/@me/mobile-devices"
    public static let unregisterPath = "/v1/users/@me/mobile-devices/unregister"

    public var registers: [Received] { received(path: Self.registerPath) }
    public var unregisters: [Received] { received(path: Self.unregisterPath) }
    /// What is stored for a user, by device_id.
    public func registrations(session: String) -> [String: Registration] { state.withLock { $0.registrations[session] ?? [:] } }
    public func reset() {
        server.reset()
        state.withLock { $0 = State() }
    }

    /// The behaviour the seed document describes.
    private func documented(_ request: HTTPRequest) -> HTTPResponse {
        let path = request.head.path
        guard path == Self.registerPath || path == Self.unregisterPath else {
            return Self.error(404, "UNKNOWN_ENDPOINT", "Unknown endpoint")
        }
        guard request.head.method == "POST" else { return Self.error(405, "METHOD_NOT_ALLOWED", "Method not allowed") }
        guard let credential = request.head.headers["Authorization"], !credential.isEmpty else {
            return Self.error(401, "UNAUTHORIZED", "Unauthorized")
        }
        if credential.hasPrefix("Bot ") || credential.hasPrefix("Bearer ") {
            return Self.error(403, "ACCESS_DENIED", "Access denied")
        }
        if suspicious.contains(credential) {
            return Self.error(403, "ACCOUNT_SUSPICIOUS_ACTIVITY", "Your account requires an action")
        }
        guard sessions.contains(credential) else { return Self.error(401, "UNAUTHORIZED", "Unauthorized") }
        let register = path == Self.registerPath
        if rateLimited, let wait = admit(credential, bucket: register ? "user:push:subscribe" : "user:push:unsubscribe",
                                         limit: register ? 20 : 40) {
            let body = #"{"code":"RATE_LIMITED","message":"You are being rate limited.","retry_after":\#(wait),"global":false}"#
            return HTTPResponse(status: 429, headers: ["Content-Type": "application/json", "Retry-After": String(Int(wait.rounded(.up)))],
                                body: Array(body.utf8))
        }
        guard let body = (try? JSONValue.parse(request.body))?.objectValue else {
            return Self.invalid("body", "BASE_TYPE_JSON", "Invalid JSON body")
        }
        return register ? self.register(body, user: credential) : unregister(body, user: credential)
    }

    private func register(_ body: JSONObject, user: String) -> HTTPResponse {
        let known: Set = ["platform", "token", "encryption_key", "auth_secret", "app_id", "provider_environment", "user_agent"]
        if let extra = body.keys.first(where: { !known.contains($0) }) {
            return Self.invalid(extra, "UNKNOWN_FIELD", "Unknown field")
        }
        guard let platform = body["platform"]?.stringValue, Self.platforms.contains(platform) else {
            return Self.invalid("platform", "BASE_TYPE_CHOICES", "Value must be one of \(Self.platforms)")
        }
        guard let token = body["token"]?.stringValue, (1...4096).contains(token.utf8.count) else {
            return Self.invalid("token", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 4096 in length")
        }
        let key = body["encryption_key"], secret = body["auth_secret"]
        for (field, value) in [("encryption_key", key), ("auth_secret", secret)] {
            guard let value else { continue }
            guard let text = value.stringValue, (1...1024).contains(text.utf8.count), Self.isBase64URL(text) else {
                return Self.invalid(field, "BASE_TYPE_BAD_LENGTH", "Must be 1 to 1024 base64url characters")
            }
        }
        // Sent together or not at all: refused at the missing field.
        if key != nil && secret == nil { return Self.invalid("auth_secret", "BASE_TYPE_REQUIRED", "This field is required") }
        if secret != nil && key == nil { return Self.invalid("encryption_key", "BASE_TYPE_REQUIRED", "This field is required") }
        let hasKeys = key != nil
        if let host = Self.urlHost(token) {
            guard hasKeys else { return Self.invalid("encryption_key", "BASE_TYPE_REQUIRED", "A Web Push registration needs both keys") }
            guard token.lowercased().hasPrefix("https://") else { return Self.invalid("token", "INVALID_URL", "Register an https endpoint") }
            guard Self.isPublic(host) else {
                return Self.invalid("token", "URL_NOT_PUBLICLY_ROUTABLE", "The endpoint host is not publicly routable")
            }
        } else {
            if hasKeys { return Self.invalid("token", "INVALID_URL", "A Web Push registration's token must be a URL") }
            if platform == "ios_apns_voip" || platform == "android_unified_push" {
                return Self.invalid("encryption_key", "BASE_TYPE_REQUIRED", "\(platform) is always a Web Push registration")
            }
        }
        var appID = "stable"
        if let value = body["app_id"] {
            guard let text = value.stringValue, !text.isEmpty else { return Self.invalid("app_id", "BASE_TYPE_STRING", "Must be a string") }
            appID = text
        }
        var environment: String?
        if let value = body["provider_environment"] {
            guard let text = value.stringValue, ["production", "development"].contains(text) else {
                return Self.invalid("provider_environment", "BASE_TYPE_CHOICES", "Value must be production or development")
            }
            environment = text
        }
        var userAgent: String?
        if let value = body["user_agent"] {
            guard let text = value.stringValue, (1...1024).contains(text.utf8.count) else {
                return Self.invalid("user_agent", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 1024 in length")
            }
            userAgent = text
        }
        let stored = Self.storedEnvironment(platform: platform, sent: environment)
        let id = Self.deviceID(platform: platform, appID: appID, environment: stored, token: token)
        state.withLock {
            $0.registrations[user, default: [:]][id] = Registration(
                deviceID: id, platform: platform, token: token, encryptionKey: key?.stringValue, authSecret: secret?.stringValue,
                appID: appID, providerEnvironment: stored, userAgent: userAgent)
        }
        return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: Array(#"{"device_id":"\#(id)"}"#.utf8))
    }

    private func unregister(_ body: JSONObject, user: String) -> HTTPResponse {
        guard let platform = body["platform"]?.stringValue, Self.platforms.contains(platform) else {
            return Self.invalid("platform", "BASE_TYPE_CHOICES", "Value must be one of \(Self.platforms)")
        }
        guard let token = body["token"]?.stringValue, (1...4096).contains(token.utf8.count) else {
            return Self.invalid("token", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 4096 in length")
        }
        let appID = body["app_id"]?.stringValue ?? "stable"
        let environment = Self.storedEnvironment(platform: platform, sent: body["provider_environment"]?.stringValue)
        let id = Self.deviceID(platform: platform, appID: appID, environment: environment, token: token)
        _ = state.withLock { $0.registrations[user]?.removeValue(forKey: id) }
        return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: Array(#"{"success":true}"#.utf8))
    }

    // MARK: Rules

    static let platforms = ["android_fcm", "ios_apns", "ios_apns_voip", "android_unified_push"]

    /// iOS registrations without an environment are stored as production; others store none.
    static func storedEnvironment(platform: String, sent: String?) -> String? {
        platform.hasPrefix("ios_") ? (sent ?? "production") : nil
    }

    /// The mock's own stand-in for Fluxer's undocumented derivation: the same four values always
    /// give the same 32 lowercase hex characters (two FNV-1a 64 hashes).
    public static func deviceID(platform: String, appID: String, environment: String?, token: String) -> String {
        let material = Array([platform, appID, environment ?? "", token].joined(separator: "\u{0}").utf8)
        func fnv(_ seed: UInt64) -> UInt64 {
            var hash = seed
            for byte in material { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            return hash
        }
        return [fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142)].map { value in
            let hex = String(value, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }

    /// The host when the token parses as an absolute URL with a host (`scheme://host...`).
    static func urlHost(_ token: String) -> String? {
        guard token.contains("://"), let components = URLComponents(string: token), components.scheme != nil,
              let host = components.host, !host.isEmpty else { return nil }
        return host.lowercased()
    }

    /// Loopback, private, link-local and local names are refused; enough of the rule for a mock.
    static func isPublic(_ host: String) -> Bool {
        let name = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if name == "localhost" || name.hasSuffix(".localhost") || name.hasSuffix(".local") || name.hasSuffix(".internal") { return false }
        if name.contains(":") {
            let lower = name.lowercased()
            return !(lower == "::1" || lower == "::" || lower.hasPrefix("fc") || lower.hasPrefix("fd") || lower.hasPrefix("fe80")
                || lower.hasPrefix("::ffff:"))
        }
        let octets = name.split(separator: ".").compactMap { Int($0) }
        guard octets.count == 4, name.split(separator: ".").count == 4 else { return name.contains(".") }
        switch (octets[0], octets[1]) {
        case (0, _), (10, _), (127, _), (169, 254), (192, 168): return false
        case (172, 16...31), (100, 64...127): return false
        default: return octets[0] < 224
        }
    }

    static func isBase64URL(_ text: String) -> Bool {
        text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x5F }
    }

    /// Seconds to wait when the user's bucket is full, else nil (and the request is counted).
    private func admit(_ user: String, bucket: String, limit: Int) -> Double? {
        let now = Date().timeIntervalSince1970
        return state.withLock { state in
            let key = user + "\u{0}" + bucket
            var times = (state.buckets[key] ?? []).filter { now - $0 < 60 }
            defer { state.buckets[key] = times }
            guard times.count < limit else { return max(0.001, 60 - (now - times[0])) }
            times.append(now)
            return nil
        }
    }

    // MARK: Error responses

    /// Fluxer's error response: `code` and `message` at the top level, field violations under `errors`.
    static func error(_ status: Int, _ code: String, _ message: String) -> HTTPResponse {
        let body = JSONValue.object(JSONObject([JSONMember("code", .string(code)), JSONMember("message", .string(message))]))
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }

    /// 400 `INVALID_FORM_BODY` naming the field; `URL_NOT_PUBLICLY_ROUTABLE` is reported as its own code.
    static func invalid(_ field: String, _ fieldCode: String, _ message: String) -> HTTPResponse {
        let violation = JSONValue.object(JSONObject([JSONMember("code", .string(fieldCode)), JSONMember("message", .string(message))]))
        let code = fieldCode == "URL_NOT_PUBLICLY_ROUTABLE" ? fieldCode : "INVALID_FORM_BODY"
        let body = JSONValue.object(JSONObject([
            JSONMember("code", .string(code)),
            JSONMember("message", .string("Invalid Form Body")),
            JSONMember("errors", .object(JSONObject([JSONMember(field, .object(JSONObject([JSONMember("_errors", .array([violation]))])))]))),
        ]))
        return HTTPResponse(status: 400, headers: ["Content-Type": "application/json"], body: body.encoded())
    }
}
