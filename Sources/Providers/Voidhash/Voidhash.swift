import ClientAPI
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy

/// Voidhash push devices (seed document 000): `register`, `refresh` and `unregister` under
/// `/api/v1/sdk/push-devices/`, each with the full set of SDK headers and a camelCase JSON body.
///
/// Quirks kept here:
/// - Every call carries all the SDK headers: the publishable key, the person's distinct ID (the
///   session's contact, percent-encoded unless printable ASCII, see `VoidhashDistinctID`), the
///   platform's bundle id or package name, and the SDK facts from the policy.
/// - Only raw APNs tokens on iOS and FCM tokens on Android; VoIP, web push, UnifiedPush and the
///   Web Push form are skipped, as is a platform whose bundle id the policy does not give.
/// - `register` answers a `pushDeviceTokenId`, which PushWarden keeps per push token (with the
///   platform, which unregister needs for its headers) instead of the device.
/// - A rotation whose old token's id is known is a `refresh` of that id with the new token; the
///   id then belongs to the new token and nothing is retired. An unknown old token is a register.
/// - Unregister needs the id: a token PushWarden never registered has nothing to remove. Its
///   `404` ("not registered to this distinct ID") is success.
/// - Registering the token under another distinct ID moves it: a contact change is a register.
/// - `400` carries `{"_tag", "message"}`; the `_tag` is passed on as `upstream_code` when the
///   document names it (`documentedErrorCodes`), else as `unknown:<hash>` (`UpstreamErrorCode`).
public struct VoidhashAdapter: UpstreamAdapter {
    public let name: String
    public let kind = ProviderKind.voidhash
    public let settingsDigest: String
    let config: VoidhashConfig
    let publishableKey: String

    static let registerPath = "/api/v1/sdk/push-devices/register"
    static let refreshPath = "/api/v1/sdk/push-devices/refresh"
    static let unregisterPath = "/api/v1/sdk/push-devices/unregister"
    /// Identity keys: the id Voidhash handed back, and the platform the token was registered for.
    static let idKey = "pushDeviceTokenId"
    static let platformKey = "platform"

    /// The only `_tag` seed 000 names: its "Headers" section (a request missing a header fails
    /// with 400 and this tag); the "Responses" table gives statuses only.
    public static let documentedErrorCodes: Set<String> = ["Api/SdkValidationError"]

    /// - Parameter publishableKey: the resolved key; it travels only in `x-publishable-key`.
    public init(name: String, config: VoidhashConfig, publishableKey: String) {
        self.name = name
        self.config = config
        self.publishableKey = publishableKey
        self.settingsDigest = [config.baseURL, config.iosBundleID ?? "-", config.androidPackageName ?? "-", config.sdk.rawValue,
                               config.sdkVersion, String(config.debugBuild), String(config.observerMode)].joined(separator: "\u{1}")
    }

    /// Refuses a key that could not be a header value, or whose kind contradicts `debug_build`
    /// (the document pairs `vh_pk_test_...` keys with debug builds). Never echoes the key.
    static func make(name: String, config: VoidhashConfig, secrets: SecretLookup) throws(ConfigurationError) -> VoidhashAdapter {
        let raw = try secrets(config.publishableKey)
        guard let key = String(validating: raw, as: UTF8.self), !key.isEmpty, key.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
              key.hasPrefix("vh_pk_") else {
            throw ConfigurationError("upstream \(name): the publishable key from \(config.publishableKey) is not a Voidhash publishable key (vh_pk_...)")
        }
        let isTestKey = key.hasPrefix("vh_pk_test_")
        guard isTestKey == config.debugBuild else {
            throw ConfigurationError("upstream \(name): the publishable key from \(config.publishableKey) is a \(isTestKey ? "test" : "live") key "
                + "but debug_build is \(config.debugBuild); Voidhash pairs vh_pk_test_ keys with debug builds")
        }
        return VoidhashAdapter(name: name, config: config, publishableKey: key)
    }

    public func accepts(_ installation: Installation) -> Bool {
        guard !installation.isWebPushForm else { return false }
        switch (installation.platform, installation.pushService) {
        case (.ios, .apns): return config.iosBundleID != nil
        case (.android, .fcm): return config.androidPackageName != nil
        default: return false
        }
    }

    /// Nothing to add: the contract already checks the token shapes, and PushWarden always sends
    /// what Voidhash requires (every header; `bundleId` and `environment` for APNs).
    public func validate(_ installation: Installation, context: CallContext) throws(ContractError) {}

    public func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                                previous: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest {
        let headers = try self.headers(platform: installation.platform, contactID: context.contactID)
        if let refreshed = Self.refreshedID(identity: identity, previous: previous) {
            return post(Self.refreshPath, headers, [
                JSONMember("pushDeviceTokenId", .string(refreshed)),
                JSONMember("platformToken", .string(installation.pushToken)),
            ])
        }
        var body = [
            JSONMember("platform", .string(installation.platform.rawValue)),
            JSONMember("provider", .string(installation.pushService == .apns ? "apns" : "fcm")),
            JSONMember("platformToken", .string(installation.pushToken)),
        ]
        if installation.pushService == .apns, let bundleID = config.iosBundleID {
            body.append(JSONMember("bundleId", .string(bundleID)))
            body.append(JSONMember("environment", .string(installation.environment == .sandbox ? "sandbox" : "production")))
        }
        // The old token is dead: Voidhash drops its registration when told its id.
        if let old = previous?[Self.idKey], old != identity?[Self.idKey] {
            body.append(JSONMember("previousPushDeviceTokenId", .string(old)))
        }
        return post(Self.registerPath, headers, body)
    }

    /// A rotation is a refresh when the old token's id is known and the new token has none of its
    /// own (if it has, registering it again keeps that id and drops the old one instead).
    static func refreshedID(identity: UpstreamIdentity?, previous: UpstreamIdentity?) -> String? {
        guard identity?[idKey] == nil else { return nil }
        return previous?[idKey]
    }

    public func identity(after response: HTTPClientResponse, installation: Installation, current: UpstreamIdentity?,
                         previous: UpstreamIdentity?) -> UpstreamIdentity? {
        let answered = (try? JSONValue.parse(response.body))?.objectValue?[Self.idKey]?.stringValue.flatMap(Self.saneID)
        // Refresh's answer is not documented: the refreshed id is kept unless it names another.
        guard let id = answered ?? Self.refreshedID(identity: current, previous: previous) else { return nil }
        return UpstreamIdentity([Self.idKey: id, Self.platformKey: installation.platform.rawValue])
    }

    static func saneID(_ id: String) -> String? {
        guard !id.isEmpty, id.utf8.count <= 512 else { return nil }
        return id
    }

    public func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest? {
        guard let id = identity?[Self.idKey], let platform = platform(of: identity) else { return nil }
        let headers = try self.headers(platform: platform, contactID: context.contactID)
        return post(Self.unregisterPath, headers, [JSONMember("pushDeviceTokenId", .string(id))])
    }

    /// A refresh already moved the id to the new token; a register told Voidhash to drop the old
    /// id (`previousPushDeviceTokenId`) or never knew it. Nothing is left to remove.
    public func retireRequest(previousToken: String, installation: Installation, context: CallContext,
                              identity: UpstreamIdentity?) -> HTTPClientRequest? { nil }

    public func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict {
        if response.status == 404 {
            // Unregister: "treat it as done". Register: only a refresh answers 404 (the old token's
            // id belongs to another distinct ID): forget that id and register the new token afresh.
            return operation == .unregister ? .accepted : .staleIdentity
        }
        return standardVerdict(response) { Self.tag($0.body) }
    }

    /// The body's `_tag` (`Api/SdkValidationError`), when short and printable.
    static func tag(_ body: [UInt8]) -> String? {
        guard let tag = (try? JSONValue.parse(body))?.objectValue?["_tag"]?.stringValue, !tag.isEmpty, tag.utf8.count <= 64,
              tag.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return tag
    }

    /// Unregister: 200. Refresh: the id it was sent (the id moves to the new token). Register: an
    /// id of the token's own, the same for the same token ("Registering the same token again
    /// returns the same ID"); Voidhash's id format is not documented, so it is a stand-in.
    public func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse {
        if request.url.hasSuffix(Self.unregisterPath) { return HTTPClientResponse(status: 200, headers: [:], body: []) }
        let sent = (try? JSONValue.parse(request.body))?.objectValue
        let id = sent?[Self.idKey]?.stringValue
            ?? "pdt_" + String(SHA256.hexHash(Array(("voidhash-dry-run\u{0}" + (sent?["platformToken"]?.stringValue ?? "")).utf8)).prefix(24))
        let body = JSONValue.object(JSONObject([JSONMember(Self.idKey, .string(id))])).encoded()
        return HTTPClientResponse(status: 200, headers: ["Content-Type": "application/json"], body: body)
    }

    // MARK: Requests

    private func platform(of identity: UpstreamIdentity?) -> Platform? {
        if let stored = identity?[Self.platformKey].flatMap(Platform.init(rawValue:)), stored != .web { return stored }
        // An identity kept without its platform: only unambiguous when one platform is served.
        switch (config.iosBundleID, config.androidPackageName) {
        case (_?, nil): return .ios
        case (nil, _?): return .android
        default: return nil
        }
    }

    /// Every header the document requires, in its order.
    private func headers(platform: Platform, contactID: String) throws(ContractError) -> HTTPHeaders {
        let bundleID = platform == .ios ? config.iosBundleID : config.androidPackageName
        guard let bundleID, platform != .web else {
            throw ContractError(.internal, "voidhash upstream \(name) does not serve platform \(platform.rawValue)")
        }
        let distinct = VoidhashDistinctID.encode(contactID)
        var headers: HTTPHeaders = [:]
        headers.add("x-publishable-key", publishableKey)
        headers.add("x-distinct-id", distinct.value)
        if distinct.isPercentEncoded { headers.add("x-distinct-id-encoding", "percent") }
        headers.add("x-client-bundle-id", bundleID)
        headers.add("x-platform", platform.rawValue)
        headers.add("x-platform-flavor", "native")
        headers.add("x-sdk", config.sdk == .reactNative ? "react-native" : platform.rawValue)
        headers.add("x-sdk-version", config.sdkVersion)
        headers.add("x-is-debug-build", String(config.debugBuild))
        headers.add("x-is-backgrounded", "false")
        headers.add("x-observer-mode", String(config.observerMode))
        return headers
    }

    private func post(_ path: String, _ headers: HTTPHeaders, _ body: [JSONMember]) -> HTTPClientRequest {
        UpstreamJSON.request("POST", config.baseURL + path, headers: headers, body: .object(JSONObject(body)))
    }
}

/// The `x-distinct-id` header value for a contact id.
///
/// Printable ASCII (space to `~`, without a leading or trailing space, which header parsing would
/// strip) is sent as is. Anything else is sent percent-encoded as UTF-8, with every byte outside
/// RFC 3986's unreserved set (`A-Z a-z 0-9 - . _ ~`) written `%XX`, so CR, LF, NUL and `%` itself
/// can never reach the header raw; `x-distinct-id-encoding: percent` tells Voidhash to decode it.
public enum VoidhashDistinctID {
    public static func encode(_ contactID: String) -> (value: String, isPercentEncoded: Bool) {
        let bytes = Array(contactID.utf8)
        let printable = bytes.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
        if printable, bytes.first != 0x20, bytes.last != 0x20 { return (contactID, false) }
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 3)
        for byte in bytes {
            if isUnreserved(byte) {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            }
        }
        return (String(decoding: out, as: UTF8.self), true)
    }

    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}
