import Foundation
import HTTPServer
import PWCore
import PWPolicy
import Synchronization

/// A real HTTP server that behaves as Native Notify's device registration document (seed 003)
/// says: `POST /api/universal/device/register` and `/deregister`, `appId` + `appToken` in the body
/// (a wrong pair is a plain-text `401`), its field rules, aliases, platform pairing and error
/// codes, and its identity model: devices unique per `(app, deviceId)`, tokens unique per
/// `(app, token type, token)`, so a token registered on another device moves ("reassigned").
///
/// It records what it received so tests can assert it exactly, can be scripted with answers,
/// and lets a test switch environments off (`403 environment_disabled`).
public final class MockNativeNotify: ProviderMock {
    public static let kind = ProviderKind.nativeNotify
    public typealias Received = MockRequest
    public typealias Scripted = MockAnswer

    /// A stored device, as the mock keeps it.
    public struct Device: Sendable, Equatable {
        public var deviceID: String
        public var platform: String
        public var subscriberID: String?
        public var appVersion: String?
        public var timezone: String?
        public var environment: String
        public var framework: String?
        /// Token type (`apnsToken`, `fcmToken`, `webPush`) → token value (the endpoint for web push).
        public var tokens: [String: String]
    }

    private struct State {
        var devices: [String: Device] = [:]
        /// "type\0value" → deviceId.
        var tokenOwners: [String: String] = [:]
        var disabledEnvironments: Set<String> = []
        var createdAt: [String: String] = [:]
    }

    private let state = Mutex(State())
    public let server: MockServer
    public let appID: Int
    public let appToken: String

    public init(appID: Int = 123, appToken: String = "nn-test-app-token", host: String = "127.0.0.1", port: Int = 0, threads: Int = 2) throws {
        self.appID = appID
        self.appToken = appToken
        server = try MockServer(host: host, port: port, threads: threads)
        server.respond(as: self) { $0.documented($1) }
    }

    public var registrations: [Received] { received(path: "/api/universal/device/register") }
    public var deregistrations: [Received] { received(path: "/api/universal/device/deregister") }
    public func device(_ deviceID: String) -> Device? { state.withLock { $0.devices[deviceID] } }
    public var devices: [Device] { state.withLock { Array($0.devices.values) } }
    /// Deletes a device as Native Notify's dashboard would, behind PushWarden's back.
    public func removeDevice(_ deviceID: String) {
        state.withLock { state in
            guard let device = state.devices.removeValue(forKey: deviceID) else { return }
            for (type, value) in device.tokens { state.tokenOwners[type + "\0" + value] = nil }
        }
    }
    public func disable(environment: String) { _ = state.withLock { $0.disabledEnvironments.insert(environment) } }

    // MARK: The document's behaviour

    private func documented(_ request: HTTPRequest) -> HTTPResponse {
        let register = request.head.path == "/api/universal/device/register"
        guard register || request.head.path == "/api/universal/device/deregister" else {
            return HTTPResponse(status: 404, headers: ["Content-Type": "text/plain"], body: Array("Not Found".utf8))
        }
        guard request.head.method == "POST" else { return HTTPResponse(status: 405) }
        guard let body = (try? JSONValue.parse(request.body))?.objectValue else {
            return Self.error(400, "invalid_body", "The body is not a JSON object.")
        }
        for field in register ? ["appId", "deviceId", "platform"] : ["appId", "deviceId"] where body[field] == nil || body[field] == .null {
            return Self.error(400, "missing_field", "\(field) is required.", field: field)
        }
        guard case .number(let rawID) = body["appId"], let appID = Int(rawID), appID > 0 else {
            return Self.error(400, "invalid_field", "appId must be a positive integer.", field: "appId")
        }
        guard appID == self.appID, body["appToken"]?.stringValue == appToken else {
            return HTTPResponse(status: 401, headers: ["Content-Type": "text/plain"], body: Array("Unauthorized".utf8))
        }
        guard let deviceID = body["deviceId"]?.stringValue, !deviceID.isEmpty, deviceID.utf16.count <= 200 else {
            return Self.error(400, "invalid_device_id", "deviceId must be a string of at most 200 characters.", field: "deviceId")
        }
        return register ? self.register(body, deviceID: deviceID) : deregister(deviceID)
    }

    private func register(_ body: JSONObject, deviceID: String) -> HTTPResponse {
        guard let platform = body["platform"]?.stringValue, ["ios", "android", "web"].contains(platform) else {
            return Self.error(400, "invalid_platform", "platform must be ios, android or web.", field: "platform")
        }
        var subscriberID: String?
        switch body["subscriberId"] {
        case nil, .null?: break
        case .string(let s)?: subscriberID = s
        case .number(let n)?: subscriberID = n  // numbers are accepted and coerced
        default: return Self.error(400, "invalid_subscriber_id", "subscriberId must be a string or a number.", field: "subscriberId")
        }
        if let subscriberID, subscriberID.utf16.count > 256 {
            return Self.error(400, "invalid_subscriber_id", "subscriberId is longer than 256 characters.", field: "subscriberId")
        }
        let appVersion = Self.capped(body["appVersion"]?.stringValue, 50)
        let timezone = Self.capped(body["timezone"]?.stringValue, 60)
        var environment: String?
        if let value = body["environment"], value != .null {
            guard let e = value.stringValue, ["production", "staging", "development"].contains(e) else {
                return Self.error(400, "invalid_environment", "environment must be production, staging or development.", field: "environment")
            }
            environment = e
        }
        var framework: String?
        if let value = body["framework"], value != .null {
            guard let f = value.stringValue, f.utf16.count <= 60 else {
                return Self.error(400, "invalid_framework", "framework must be a string of at most 60 characters.", field: "framework")
            }
            framework = f
        }

        // Tokens: the native ones in `tokens` (with aliases), web push beside them.
        var sent: [(type: String, value: String)] = []
        if let value = body["tokens"], value != .null {
            guard let tokens = value.objectValue else {
                return Self.error(400, "invalid_tokens", "tokens must be an object like { apnsToken, fcmToken }.", field: "tokens")
            }
            for (type, aliases) in [("apnsToken", ["apnsToken", "apns_token", "apnToken"]), ("fcmToken", ["fcmToken", "fcm_token"])] {
                guard let raw = aliases.lazy.compactMap({ tokens[$0] }).first(where: { $0 != .null }) else { continue }
                guard let token = raw.stringValue else {
                    return Self.error(400, "invalid_tokens", "tokens.\(type) must be a string.", field: "tokens.\(type)")
                }
                sent.append((type, token))
            }
        }
        var webPush: JSONObject?
        if let value = body["webPush"] ?? body["web_push"], value != .null {
            guard let object = value.objectValue else {
                return Self.error(400, "invalid_web_push", "webPush must be an object.", field: "webPush")
            }
            webPush = object
        }
        if sent.isEmpty && webPush == nil {
            return Self.error(400, "no_tokens_provided", "No native token and no webPush subscription was sent.")
        }
        for (type, token) in sent {
            let lower = token.lowercased()
            if lower.hasPrefix("exponentpushtoken[") || lower.hasPrefix("expopushtoken[") {
                return Self.error(400, "unsupported_token_type", "Expo push tokens are not accepted here.", field: "tokens.\(type)")
            }
            if (type == "apnsToken" && platform != "ios") || (type == "fcmToken" && platform != "android") {
                return Self.error(400, "token_platform_mismatch", "\(type) does not belong to a \(platform) device.", field: "tokens.\(type)")
            }
            let shapeOK = type == "apnsToken"
                ? token.utf8.count >= 64 && token.utf8.allSatisfy({ $0 < 0x80 && Character(UnicodeScalar($0)).isHexDigit })
                : token.utf8.count >= 32
            guard shapeOK, token.utf8.count <= 400 else {
                return Self.error(400, "invalid_token_format", "\(type) does not match its shape.", field: "tokens.\(type)")
            }
        }
        if let webPush {
            guard platform == "web" else {
                return Self.error(400, "token_platform_mismatch", "webPush does not belong to a \(platform) device.", field: "webPush")
            }
            guard let endpoint = webPush["endpoint"]?.stringValue, endpoint.hasPrefix("https://"), endpoint.count > 8,
                  endpoint.utf8.count <= 1000, URL(string: endpoint)?.host != nil else {
                return Self.error(400, "invalid_web_push_endpoint", "webPush.endpoint must be an https URL of at most 1000 characters.",
                                  field: "webPush.endpoint")
            }
            let keys = webPush["keys"]?.objectValue
            guard let p256dh = keys?["p256dh"]?.stringValue, Base64URL.decode(p256dh)?.count == 65,
                  let auth = keys?["auth"]?.stringValue, Base64URL.decode(auth)?.count == 16 else {
                return Self.error(400, "invalid_web_push_keys", "p256dh must be a 65-byte key and auth a 16-byte secret.",
                                  field: "webPush.keys")
            }
            if let expiration = webPush["expirationTime"], expiration != .null {
                guard case .number = expiration else {
                    return Self.error(400, "invalid_web_push", "expirationTime is malformed.", field: "webPush.expirationTime")
                }
            }
            sent.append(("webPush", endpoint))
        }

        let now = Self.timestamp()
        let answer: (device: Device, created: String, outcomes: [(String, String)])? = state.withLock { state in
            let chosen = environment ?? state.devices[deviceID]?.environment ?? "production"
            if state.disabledEnvironments.contains(chosen) { return nil }
            var device = state.devices[deviceID]
                ?? Device(deviceID: deviceID, platform: platform, subscriberID: nil, appVersion: nil, timezone: nil,
                          environment: "production", framework: nil, tokens: [:])
            device.platform = platform
            // Omitted optional fields keep their stored value.
            if let subscriberID { device.subscriberID = subscriberID }
            if let appVersion { device.appVersion = appVersion }
            if let timezone { device.timezone = timezone }
            if let environment { device.environment = environment }
            if let framework { device.framework = framework }
            var outcomes: [(String, String)] = []
            for (type, value) in sent {
                let key = type + "\0" + value
                let outcome: String
                switch state.tokenOwners[key] {
                case deviceID?:
                    outcome = "refreshed"
                case let other?:
                    state.devices[other]?.tokens[type] = nil
                    outcome = "reassigned"
                case nil:
                    outcome = "registered"
                }
                // A new value of a type replaces the device's old one (a rotation).
                if let old = device.tokens[type], old != value { state.tokenOwners[type + "\0" + old] = nil }
                device.tokens[type] = value
                state.tokenOwners[key] = deviceID
                outcomes.append((type, outcome))
            }
            let created = state.devices[deviceID] == nil ? now : (state.createdAt[deviceID] ?? now)
            state.createdAt[deviceID] = created
            state.devices[deviceID] = device
            return (device, created, outcomes)
        }
        guard let answer else {
            return Self.error(403, "environment_disabled", "That environment is switched off for this app; nothing was written.")
        }
        var device: [JSONMember] = [JSONMember("appId", .number(String(appID))), JSONMember("deviceId", .string(deviceID)),
                                    JSONMember("platform", .string(answer.device.platform))]
        device.append(JSONMember("subscriberId", answer.device.subscriberID.map(JSONValue.string) ?? .null))
        device.append(JSONMember("appVersion", answer.device.appVersion.map(JSONValue.string) ?? .null))
        device.append(JSONMember("timezone", answer.device.timezone.map(JSONValue.string) ?? .null))
        device.append(JSONMember("environment", .string(answer.device.environment)))
        device.append(JSONMember("createdAt", .string(answer.created)))
        device.append(JSONMember("lastSeenAt", .string(now)))
        let response = JSONValue.object(JSONObject([
            JSONMember("ok", true),
            JSONMember("device", .object(JSONObject(device))),
            JSONMember("tokens", .object(JSONObject(answer.outcomes.map { JSONMember($0.0, .string($0.1)) }))),
        ]))
        return HTTPResponse(status: 201, headers: ["Content-Type": "application/json"], body: response.encoded())
    }

    private func deregister(_ deviceID: String) -> HTTPResponse {
        let removedTokens: Int? = state.withLock { state in
            guard let device = state.devices.removeValue(forKey: deviceID) else { return nil }
            state.createdAt[deviceID] = nil
            for (type, value) in device.tokens { state.tokenOwners[type + "\0" + value] = nil }
            return device.tokens.count
        }
        let response = JSONValue.object(JSONObject([
            JSONMember("ok", true), JSONMember("deviceId", .string(deviceID)),
            JSONMember("removed", .bool(removedTokens != nil)), JSONMember("tokensRemoved", .number(String(removedTokens ?? 0))),
        ]))
        return HTTPResponse(status: 200, headers: ["Content-Type": "application/json"], body: response.encoded())
    }

    static func error(_ status: Int, _ code: String, _ message: String, field: String? = nil) -> HTTPResponse {
        var members = [JSONMember("code", .string(code)), JSONMember("message", .string(message))]
        if let field { members.append(JSONMember("field", .string(field))) }
        let body = JSONValue.object(JSONObject([JSONMember("error", .object(JSONObject(members)))]))
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }

    /// Trimmed and capped, as the document says; blank is absent.
    static func capped(_ value: String?, _ max: Int) -> String? {
        guard let trimmed = value?.trimmingCharacters(in: .whitespaces), !trimmed.isEmpty else { return nil }
        return String(trimmed.prefix(max))
    }

    static func timestamp() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date())
    }
}
