import ClientAPI
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy

/// Native Notify universal devices (seed document 003): `POST /api/universal/device/register`
/// (an idempotent upsert answering `201`) and `POST /api/universal/device/deregister` (a hard
/// delete answering `200`, `"removed": false` for an unknown device), with `appId` and `appToken`
/// in every JSON body and no auth header.
///
/// Quirks kept here:
/// - A device is `(app, deviceId)`, not a token: PushWarden sends the client's `installation_id`
///   as `deviceId` when it has one, else keeps one per token chain (`keepsIdentity`), so a token
///   rotation moves the new token onto the same device instead of creating a second one.
/// - `platform` pairs with exactly one token field: ios → `tokens.apnsToken` (raw hex), android →
///   `tokens.fcmToken`, web → `webPush`. VoIP and UnifiedPush are no Native Notify services
///   (skipped); the Web Push form of APNs or FCM is Native Notify's `token_platform_mismatch`, so
///   it is refused before any call.
/// - `subscriberId` is the session's contact; only `appVersion` and `timezone` of the metadata
///   are taken; `environment` and `framework` come from the policy.
/// - `403 environment_disabled` is the operator's switch in Native Notify's dashboard; it is passed
///   on as `upstream_rejected` with that code (the log then names it). `401` (plain text) is a wrong
///   `appId`/`appToken`. Only the codes of `documentedErrorCodes` are shown as they are.
public struct NativeNotifyAdapter: UpstreamAdapter {
    public let name: String
    public let kind = ProviderKind.nativeNotify
    public let settingsDigest: String
    let config: NativeNotifyConfig
    let registerURL: String
    let deregisterURL: String
    /// The resolved `appToken`: it travels only inside request bodies and keys the derived device ids.
    let appToken: [UInt8]

    // The document's limits (its field table and error codes).
    static let apnsMinLength = 64
    static let fcmMinLength = 32
    static let maxTokenLength = 400
    static let maxEndpointLength = 1000
    static let maxDeviceID = 200
    static let maxSubscriberID = 256
    static let maxAppVersion = 50
    static let maxTimezone = 60

    /// The identity key under which the device id is kept per push token.
    static let deviceIDKey = "deviceId"

    /// Every code of seed 003's "Errors" table (`invalid_device_id` / `invalid_subscriber_id` share
    /// a row).
    public static let documentedErrorCodes: Set<String> = [
        "invalid_body", "missing_field", "invalid_field", "invalid_platform", "invalid_device_id", "invalid_subscriber_id",
        "invalid_tokens", "no_tokens_provided", "invalid_token_format", "invalid_web_push_endpoint", "invalid_web_push_keys",
        "invalid_web_push", "token_platform_mismatch", "unsupported_token_type", "invalid_environment", "invalid_framework",
        "environment_disabled", "app_not_found",
    ]

    public init(name: String, config: NativeNotifyConfig, appToken: [UInt8]) {
        self.name = name
        self.config = config
        self.appToken = appToken
        self.registerURL = config.baseURL + "/api/universal/device/register"
        self.deregisterURL = config.baseURL + "/api/universal/device/deregister"
        self.settingsDigest = [config.baseURL, String(config.appID), config.environment, config.framework ?? "-"].joined(separator: "\n")
    }

    static func make(name: String, config: NativeNotifyConfig, secrets: SecretLookup) throws(ConfigurationError) -> NativeNotifyAdapter {
        let token = try secrets(config.appToken)
        guard !token.isEmpty, token.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw ConfigurationError("app \(secrets.app): upstream \(name): the Native Notify appToken from \(config.appToken) must be printable ASCII without spaces")
        }
        return NativeNotifyAdapter(name: name, config: config, appToken: token)
    }

    public func accepts(_ installation: Installation) -> Bool {
        switch (installation.platform, installation.pushService) {
        case (.ios, .apns), (.android, .fcm), (.web, .webPush): return true
        default: return false
        }
    }

    /// Native Notify's own rules, so the client hears the contract's code and Native Notify never
    /// sees a request it would refuse.
    public func validate(_ installation: Installation, context: CallContext) throws(ContractError) {
        // Expo tokens never get here: the client API refuses them first (`PushTokenRules.validate`).
        let token = installation.pushToken
        switch installation.pushService {
        case .apns, .fcm:
            if installation.isWebPushForm {
                throw ContractError(.tokenPlatformMismatch,
                                    "Native Notify takes a Web Push subscription only from platform web; send the raw \(installation.pushService == .apns ? "APNs device token" : "FCM registration token") on \(installation.platform.rawValue)",
                                    field: "push_token")
            }
            let n = token.utf8.count
            if installation.pushService == .apns {
                guard n >= Self.apnsMinLength, n <= Self.maxTokenLength, token.utf8.allSatisfy(Self.isHex) else {
                    throw ContractError(.invalidTokenFormat,
                                        "Native Notify needs the APNs device token as \(Self.apnsMinLength) to \(Self.maxTokenLength) hex digits",
                                        field: "push_token")
                }
            } else {
                guard n >= Self.fcmMinLength, n <= Self.maxTokenLength else {
                    throw ContractError(.invalidTokenFormat,
                                        "Native Notify needs an FCM registration token of \(Self.fcmMinLength) to \(Self.maxTokenLength) characters",
                                        field: "push_token")
                }
            }
        case .webPush:
            guard token.utf8.count <= Self.maxEndpointLength else {
                throw ContractError(.invalidWebPush, "Native Notify takes Web Push endpoints of at most \(Self.maxEndpointLength) characters",
                                    field: "push_token")
            }
            guard let keys = installation.webPushKeys, Base64URL.decode(keys.p256dh)?.count == 65,
                  Base64URL.decode(keys.auth)?.count == 16 else {
                throw ContractError(.invalidWebPush, "Native Notify needs a 65-byte p256dh key and a 16-byte auth secret",
                                    field: "web_push_keys")
            }
        case .apnsVoip, .unifiedPush:
            return  // never accepted: skipped before validation
        }
        if let id = installation.installationID, id.utf16.count > Self.maxDeviceID {
            throw ContractError(.invalidRequest, "installation_id must be at most \(Self.maxDeviceID) characters for Native Notify",
                                field: "installation_id")
        }
        if let version = Self.trimmed(installation.metadata.appVersion), version.utf16.count > Self.maxAppVersion {
            throw ContractError(.invalidRequest, "app_version must be at most \(Self.maxAppVersion) characters for Native Notify",
                                field: "app_version")
        }
        if let zone = Self.trimmed(installation.metadata.timezone), zone.utf16.count > Self.maxTimezone {
            throw ContractError(.invalidRequest, "timezone must be at most \(Self.maxTimezone) characters for Native Notify",
                                field: "timezone")
        }
        // The contact comes from the session, not the client: Native Notify would refuse it, so
        // this is its refusal, without the call.
        if context.contactID.utf16.count > Self.maxSubscriberID {
            throw ContractError(.upstreamRejected, "\(name) refused the request", upstreamCode: "invalid_subscriber_id")
        }
    }

    public func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                                previous: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest {
        var body = credentials()
        body.append(JSONMember("deviceId", .string(deviceID(for: installation, current: identity, previous: previous))))
        body.append(JSONMember("platform", .string(installation.platform.rawValue)))
        body.append(JSONMember("subscriberId", .string(context.contactID)))
        if let version = Self.trimmed(installation.metadata.appVersion) { body.append(JSONMember("appVersion", .string(version))) }
        if let zone = Self.trimmed(installation.metadata.timezone) { body.append(JSONMember("timezone", .string(zone))) }
        body.append(JSONMember("environment", .string(config.environment)))
        if let framework = config.framework { body.append(JSONMember("framework", .string(framework))) }
        switch (installation.platform, installation.pushService, installation.webPushKeys) {
        case (.ios, .apns, nil):
            body.append(JSONMember("tokens", .object(JSONObject([JSONMember("apnsToken", .string(installation.pushToken))]))))
        case (.android, .fcm, nil):
            body.append(JSONMember("tokens", .object(JSONObject([JSONMember("fcmToken", .string(installation.pushToken))]))))
        case (.web, .webPush, let keys?):
            body.append(JSONMember("webPush", .object(JSONObject([
                JSONMember("endpoint", .string(installation.pushToken)),
                JSONMember("keys", .object(JSONObject([JSONMember("p256dh", .string(keys.p256dh)), JSONMember("auth", .string(keys.auth))]))),
            ]))))
        default:
            throw ContractError(.internal, "\(name) was asked to register an installation it does not accept")
        }
        return UpstreamJSON.request("POST", registerURL, headers: [:], body: .object(JSONObject(body)))
    }

    /// The device the registration went to, kept for the new token: later launches, rotations
    /// and the unregister find it there.
    public func identity(after response: HTTPClientResponse, installation: Installation, current: UpstreamIdentity?,
                         previous: UpstreamIdentity?) -> UpstreamIdentity? {
        UpstreamIdentity([Self.deviceIDKey: deviceID(for: installation, current: current, previous: previous)])
    }

    /// Deregisters the device the token was kept under; a token PushWarden never registered has
    /// no known device and is skipped.
    public func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) -> HTTPClientRequest? {
        guard let deviceID = identity?[Self.deviceIDKey] else { return nil }
        return deregister(deviceID)
    }

    /// A rotation registered the new token on the old token's device, where Native Notify replaced
    /// the old token: nothing to remove. Only when the client's `installation_id` moved the chain to
    /// another device is the old device (holding the dead token) deregistered.
    public func retireRequest(previousToken: String, installation: Installation, context: CallContext,
                              identity: UpstreamIdentity?) -> HTTPClientRequest? {
        guard let old = identity?[Self.deviceIDKey] else { return nil }
        let now = installation.installationID ?? old
        return now == old ? nil : deregister(old)
    }

    /// The client's `installation_id` moved this token to another device outside a rotation:
    /// Native Notify reassigned the token, leaving the old device without one; deregister it.
    public func supersededRequest(pushToken: String, replaced: UpstreamIdentity, by kept: UpstreamIdentity,
                                  context: CallContext) -> HTTPClientRequest? {
        guard let old = replaced[Self.deviceIDKey], old != kept[Self.deviceIDKey] else { return nil }
        return deregister(old)
    }

    public func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict {
        let code = UpstreamJSON.errorCode(response.body)
        switch (response.status, code) {
        case (403, "environment_disabled"):
            return .rejected(code: code)
        case (400, "app_not_found"):
            return .authFailed  // our appId is wrong: the operator's problem, never the client's
        default:
            return standardVerdict(response) { _ in code }
        }
    }

    public func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse {
        let sent = (try? JSONValue.parse(request.body))?.objectValue
        let deviceID = sent?["deviceId"] ?? .null
        let body: JSONValue
        let status: Int
        if request.url.hasSuffix("/deregister") {
            status = 200
            body = .object(JSONObject([JSONMember("ok", true), JSONMember("deviceId", deviceID), JSONMember("removed", false),
                                       JSONMember("tokensRemoved", 0)]))
        } else {
            status = 201
            var device: [JSONMember] = [JSONMember("appId", sent?["appId"] ?? .null), JSONMember("deviceId", deviceID)]
            for key in ["platform", "subscriberId", "appVersion", "timezone", "environment"] {
                if let value = sent?[key] { device.append(JSONMember(key, value)) }
            }
            var tokens: [JSONMember] = []
            for key in sent?["tokens"]?.objectValue?.keys ?? [] { tokens.append(JSONMember(key, "registered")) }
            if sent?["webPush"] != nil { tokens.append(JSONMember("webPush", "registered")) }
            body = .object(JSONObject([JSONMember("ok", true), JSONMember("device", .object(JSONObject(device))),
                                       JSONMember("tokens", .object(JSONObject(tokens)))]))
        }
        return HTTPClientResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }

    // MARK: Device ids

    /// The client's `installation_id` when sent; else the chain's device (kept for the previous
    /// token of a rotation); else the device this token was registered under; else one derived
    /// from the token.
    ///
    /// The previous token's device wins over the current token's: then the rotated chain stays on
    /// one device, and `retireRequest` knows exactly which device the dead token is left on.
    /// A derived id (not a random one) means a lost identity store or a re-sent first registration
    /// lands on the same device instead of leaving an orphan behind. It is keyed with the
    /// `appToken`, so it does not reveal a hash of the push token to anyone without the token.
    public func deviceID(for installation: Installation, current: UpstreamIdentity?, previous: UpstreamIdentity?) -> String {
        if let id = installation.installationID { return id }
        if let id = previous?[Self.deviceIDKey] { return id }
        if let id = current?[Self.deviceIDKey] { return id }
        var material = Array("pushwarden/nativenotify/deviceId\0".utf8)
        material.append(contentsOf: String(config.appID).utf8)
        material.append(0)
        material.append(contentsOf: installation.pushToken.utf8)
        return "pw-" + Base64URL.encode(HMACSHA256.mac(key: appToken, message: material).prefix(16))
    }

    // MARK: Helpers

    private func credentials() -> [JSONMember] {
        [JSONMember("appId", .number(String(config.appID))), JSONMember("appToken", .string(String(decoding: appToken, as: UTF8.self)))]
    }

    private func deregister(_ deviceID: String) -> HTTPClientRequest {
        var body = credentials()
        body.append(JSONMember("deviceId", .string(deviceID)))
        return UpstreamJSON.request("POST", deregisterURL, headers: [:], body: .object(JSONObject(body)))
    }

    /// Native Notify trims `appVersion` and `timezone`; an all-blank value is sent as absent.
    static func trimmed(_ value: String?) -> String? {
        guard let value else { return nil }
        let trimmed = value.trimmingSpaces()
        return trimmed.isEmpty ? nil : String(trimmed)
    }

    static func isHex(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66)
    }
}
