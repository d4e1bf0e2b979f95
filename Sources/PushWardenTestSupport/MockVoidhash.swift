import Foundation
import HTTPServer
import PWCore
import PWPolicy
import Synchronization

/// A real HTTP server that behaves as Voidhash's push device API document (seed 000) says: the
/// three endpoints, every SDK header required (400 `Api/SdkValidationError` naming the problem),
/// the publishable key (401), push switched off for the team (403), a `pushDeviceTokenId` per
/// token (the same token registered again keeps its id; under another distinct ID it moves),
/// `previousPushDeviceTokenId` dropping that registration, and `404` for a device another
/// distinct ID registered. It records what it received and can answer scripted statuses.
public final class MockVoidhash: ProviderMock {
    public static let kind = ProviderKind.voidhash
    public typealias Received = MockRequest
    public typealias Scripted = MockAnswer

    /// One registered device as Voidhash keeps it.
    public struct Device: Sendable, Equatable {
        public var id: String
        public var distinctID: String
        public var platform: String
        public var provider: String
        public var platformToken: String
        public var bundleID: String?
        public var environment: String?
    }

    private struct State {
        var devices: [String: Device] = [:]
        var nextID = 1
        var pushEnabled = true
    }

    private let state = Mutex(State())
    public let server: MockServer
    public let publishableKey: String

    public static let requiredHeaders = ["x-publishable-key", "x-distinct-id", "x-client-bundle-id", "x-platform", "x-platform-flavor",
                                         "x-sdk", "x-sdk-version", "x-is-debug-build", "x-is-backgrounded", "x-observer-mode"]

    public init(publishableKey: String = "vh_pk_mock", host: String = "127.0.0.1", port: Int = 0) throws {
        self.publishableKey = publishableKey
        server = try MockServer(host: host, port: port, threads: 2)
        server.respond(as: self) { $0.documented($1) }
    }

    public var devices: [Device] { state.withLock { Array($0.devices.values) } }
    public func device(token: String) -> Device? { state.withLock { $0.devices.values.first { $0.platformToken == token } } }
    public func device(id: String) -> Device? { state.withLock { $0.devices[id] } }
    /// Off: every call answers 403, as for a team without push notifications.
    public func setPushEnabled(_ enabled: Bool) { state.withLock { $0.pushEnabled = enabled } }

    /// The behaviour the seed document describes.
    private func documented(_ request: HTTPRequest) -> HTTPResponse {
        let headers = request.head.headers
        guard request.head.method == "POST" else { return HTTPResponse(status: 405) }
        for name in Self.requiredHeaders where (headers[name] ?? "").isEmpty {
            return Self.error(400, "Api/SdkValidationError", "missing header \(name)")
        }
        guard headers["x-publishable-key"] == publishableKey else { return Self.error(401, "Api/Unauthorized", "invalid publishable key") }
        guard state.withLock({ $0.pushEnabled }) else { return Self.error(403, "Api/Forbidden", "push notifications are not enabled for this team") }
        if let encoding = headers["x-distinct-id-encoding"], encoding != "percent" {
            return Self.error(400, "Api/SdkValidationError", "x-distinct-id-encoding must be percent")
        }
        guard let distinct = Self.distinctID(headers), !distinct.isEmpty else {
            return Self.error(400, "Api/SdkValidationError", "x-distinct-id is not valid percent-encoded UTF-8")
        }
        let platform = headers["x-platform"] ?? ""
        guard platform == "ios" || platform == "android" else { return Self.error(400, "Api/SdkValidationError", "x-platform must be ios or android") }
        guard headers["x-platform-flavor"] == "native" else { return Self.error(400, "Api/SdkValidationError", "x-platform-flavor must be native") }
        guard ["ios", "android", "react-native"].contains(headers["x-sdk"] ?? "") else {
            return Self.error(400, "Api/SdkValidationError", "x-sdk must be ios, android or react-native")
        }
        for name in ["x-is-debug-build", "x-is-backgrounded", "x-observer-mode"] where !["true", "false"].contains(headers[name] ?? "") {
            return Self.error(400, "Api/SdkValidationError", "\(name) must be true or false")
        }
        guard let body = (try? JSONValue.parse(request.body))?.objectValue else {
            return Self.error(400, "Api/SdkValidationError", "the body is not a JSON object")
        }
        switch request.head.path {
        case "/api/v1/sdk/push-devices/register":
            return register(body, distinct: distinct)
        case "/api/v1/sdk/push-devices/refresh":
            guard let id = body["pushDeviceTokenId"]?.stringValue, let token = body["platformToken"]?.stringValue, !token.isEmpty else {
                return Self.error(400, "Api/SdkValidationError", "pushDeviceTokenId and platformToken are required")
            }
            let found: Bool = state.withLock { state in
                guard state.devices[id]?.distinctID == distinct else { return false }
                state.devices = state.devices.filter { $0.key == id || $0.value.platformToken != token }
                state.devices[id]?.platformToken = token
                return true
            }
            return found ? Self.idAnswer(200, id) : Self.error(404, "Api/NotFound", "the device is not registered to this distinct ID")
        case "/api/v1/sdk/push-devices/unregister":
            guard let id = body["pushDeviceTokenId"]?.stringValue else {
                return Self.error(400, "Api/SdkValidationError", "pushDeviceTokenId is required")
            }
            let removed: Bool = state.withLock { state in
                guard state.devices[id]?.distinctID == distinct else { return false }
                state.devices[id] = nil
                return true
            }
            return removed ? HTTPResponse(status: 200) : Self.error(404, "Api/NotFound", "the device is not registered to this distinct ID")
        default:
            return Self.error(404, "Api/NotFound", "no such route")
        }
    }

    private func register(_ body: JSONObject, distinct: String) -> HTTPResponse {
        guard let platform = body["platform"]?.stringValue, platform == "ios" || platform == "android" else {
            return Self.error(400, "Api/SdkValidationError", "platform must be ios or android")
        }
        guard let provider = body["provider"]?.stringValue, provider == "apns" || provider == "fcm" else {
            return Self.error(400, "Api/SdkValidationError", "provider must be apns or fcm")
        }
        guard let token = body["platformToken"]?.stringValue, !token.isEmpty else {
            return Self.error(400, "Api/SdkValidationError", "platformToken is required")
        }
        let bundleID = body["bundleId"]?.stringValue
        let environment = body["environment"]?.stringValue
        if provider == "apns" {
            guard bundleID != nil, let environment, environment == "sandbox" || environment == "production" else {
                return Self.error(400, "Api/SdkValidationError", "apns requires bundleId and environment (sandbox or production)")
            }
        }
        let previous = body["previousPushDeviceTokenId"]?.stringValue
        let (id, created): (String, Bool) = state.withLock { state in
            if let previous, state.devices[previous]?.platformToken != token { state.devices[previous] = nil }
            var device = state.devices.values.first { $0.platformToken == token }
            let created = device == nil
            if device == nil {
                device = Device(id: "pdt_\(state.nextID)", distinctID: distinct, platform: platform, provider: provider,
                                platformToken: token, bundleID: bundleID, environment: environment)
                state.nextID += 1
            }
            device!.distinctID = distinct
            device!.bundleID = bundleID
            device!.environment = environment
            state.devices[device!.id] = device
            return (device!.id, created)
        }
        return Self.idAnswer(created ? 201 : 200, id)
    }

    static func idAnswer(_ status: Int, _ id: String) -> HTTPResponse {
        let body = JSONValue.object(JSONObject([JSONMember("pushDeviceTokenId", .string(id))]))
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }

    static func error(_ status: Int, _ tag: String, _ message: String) -> HTTPResponse {
        let body = JSONValue.object(JSONObject([JSONMember("_tag", .string(tag)), JSONMember("message", .string(message))]))
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }

    /// The distinct ID a request names; nil when its percent-encoding is not valid UTF-8.
    static func distinctID(_ headers: HTTPHeaders) -> String? {
        guard let raw = headers["x-distinct-id"] else { return nil }
        guard headers["x-distinct-id-encoding"] == "percent" else { return raw }
        return raw.removingPercentEncoding
    }
}

extension MockRequest {
    /// `x-distinct-id` as Voidhash reads it (decoded when `x-distinct-id-encoding: percent`).
    public var distinctID: String? { MockVoidhash.distinctID(headers) }
}
