import ClientAPI
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy

/// Fluxer mobile devices (seed document 002): `POST /v1/users/@me/mobile-devices` and
/// `POST /v1/users/@me/mobile-devices/unregister`, each with the signed-in user's own session.
///
/// Quirks kept here:
/// - Fluxer refuses bot and OAuth2 credentials on these routes, so there is no server-held key:
///   the client sends its Fluxer session in the header the policy names (`session_header`), and
///   its value travels verbatim in `forward_header` (`Authorization`). It is never logged, stored
///   or part of the dedupe fingerprint (it rotates). A registration or removal without it is
///   refused with `401 unauthorized` before any call.
/// - The form is Fluxer's, read from the body: Web Push (endpoint URL in `token`, with
///   `encryption_key` = `web_push_keys.p256dh` and `auth_secret` = `web_push_keys.auth`) or legacy
///   (raw vendor token, no keys). `ios_apns_voip` and `android_unified_push` exist only as Web Push.
/// - `platform` is Fluxer's: (android, fcm) → `android_fcm`, (ios, apns) → `ios_apns`,
///   (ios, apns_voip) → `ios_apns_voip`, (android, unified_push) → `android_unified_push`; web
///   push is not a Fluxer platform and is skipped.
/// - `app_id` comes from the policy; `provider_environment` is sent for the two iOS platforms only
///   (the policy's, else the installation's: `sandbox` → `development`), always explicitly so that
///   removal names the same registration.
/// - Fluxer derives `device_id` from (platform, app_id, provider_environment, token) and removal
///   takes those four values, not the id. The unregister route only has the token, so the first
///   three (and the `device_id`, for support) are kept as the token's identity.
/// - A rotation registers the new token and removes the old one with its own four values
///   (or, when PushWarden never registered it, the new registration's platform, environment and
///   app_id: the same device on the same transport).
/// - Answers carry `{"code": "...", "message": "..."}` at the top level; only the codes of
///   `documentedErrorCodes` are shown as they are. Unregister answers 200 whether or not the
///   registration existed. 401/403 refuse the *user's* session, not ours: see
///   `verdict(for:operation:)`.
public struct FluxerAdapter: UpstreamAdapter {
    public let name: String
    public let kind = ProviderKind.fluxer
    public let settingsDigest: String
    let config: FluxerConfig
    let registerURL: String
    let unregisterURL: String

    /// Fluxer's own limits (seed 002, "Register mobile push device").
    static let maxTokenLength = 4096
    static let maxKeyLength = 1024
    static let maxUserAgentLength = 1024
    /// A session value longer than this is not a session; refusing it keeps headers bounded.
    static let maxSessionLength = 4096

    /// The codes seed 002 names: `ACCESS_DENIED` and `ACCOUNT_SUSPICIOUS_ACTIVITY` (the 403s of its
    /// introduction), `URL_NOT_PUBLICLY_ROUTABLE` (under "Register mobile push device") and
    /// `INVALID_FORM_BODY` (the 400 row of both Response tables). Its 401 and 429 name no code.
    public static let documentedErrorCodes: Set<String> = [
        "ACCESS_DENIED", "ACCOUNT_SUSPICIOUS_ACTIVITY", "URL_NOT_PUBLICLY_ROUTABLE", "INVALID_FORM_BODY",
    ]

    /// Every call carries the user's own Fluxer session: never queued.

    public init(name: String, config: FluxerConfig) {
        self.name = name
        self.config = config
        self.registerURL = config.baseURL + "/v1/users/@me/mobile-devices"
        self.unregisterURL = registerURL + "/unregister"
        // Everything that shapes a request or names a registration; the session is not (it rotates).
        self.settingsDigest = [config.baseURL, config.forwardHeader, config.appID, config.providerEnvironment ?? "-"]
            .joined(separator: "\u{0}")
    }

    /// Fluxer needs no server-held secret, so nothing is resolved.
    static func make(name: String, config: FluxerConfig, secrets: SecretLookup) throws(ConfigurationError) -> FluxerAdapter {
        FluxerAdapter(name: name, config: config)
    }

    // MARK: Mapping

    /// Fluxer's `platform` for a contract platform + push service; nil: not a Fluxer platform.
    static func platform(for installation: Installation) -> String? {
        switch (installation.platform, installation.pushService) {
        case (.android, .fcm): return "android_fcm"
        case (.ios, .apns): return "ios_apns"
        case (.ios, .apnsVoip): return "ios_apns_voip"
        case (.android, .unifiedPush): return "android_unified_push"
        default: return nil
        }
    }

    static let platforms = ["android_fcm", "ios_apns", "ios_apns_voip", "android_unified_push"]
    static let webPushOnly = ["ios_apns_voip", "android_unified_push"]

    /// What is sent as `provider_environment`: only the iOS platforms store one.
    func providerEnvironment(platform: String, installation: Installation) -> String? {
        guard platform == "ios_apns" || platform == "ios_apns_voip" else { return nil }
        if let fixed = config.providerEnvironment { return fixed }
        return installation.environment == .sandbox ? "development" : "production"
    }

    /// `app_version=...; os_version=...; device_model=...` from whichever were sent; nil when none.
    static func userAgent(_ metadata: InstallationMetadata) -> String? {
        let parts = [("app_version", metadata.appVersion), ("os_version", metadata.osVersion), ("device_model", metadata.deviceModel)]
            .compactMap { key, value in value.map { "\(key)=\($0)" } }
        guard !parts.isEmpty else { return nil }
        var text = parts.joined(separator: "; ")
        while text.utf8.count > maxUserAgentLength { text.removeLast() }
        return text
    }

    // MARK: The user's session

    /// The client's Fluxer session, exactly as sent.
    ///
    /// - Throws: `unauthorized` when the header is absent, repeated, empty, too long or carries
    ///   anything but visible ASCII and spaces. The message names the header, never its value.
    func session(_ context: CallContext) throws(ContractError) -> String {
        let values = context.clientHeaders.values(config.sessionHeader)
        guard values.count == 1, let value = values.first else {
            throw ContractError(.unauthorized, "this app registers with Fluxer using the user's own Fluxer session: send it in the \(config.sessionHeader) header, once")
        }
        let trimmed = String(value.trimmingSpaces())
        guard !trimmed.isEmpty, trimmed.utf8.count <= Self.maxSessionLength,
              trimmed.utf8.allSatisfy(ByteClass.isPrintable) else {
            throw ContractError(.unauthorized, "the \(config.sessionHeader) header does not hold a Fluxer session")
        }
        return trimmed
    }

    public func forwardedCredential(_ context: CallContext) -> String? { try? session(context) }

    // MARK: Register

    public func accepts(_ installation: Installation) -> Bool {
        Self.platform(for: installation) != nil
    }

    /// Fluxer's own rules that the contract does not already enforce, in the order Fluxer's
    /// refusals would name them; then the session, so a malformed body is reported first.
    public func validate(_ installation: Installation, context: CallContext) throws(ContractError) {
        guard let platform = Self.platform(for: installation) else { return }
        let token = installation.pushToken
        guard !token.isEmpty, token.utf8.count <= Self.maxTokenLength else {
            throw ContractError(.invalidTokenFormat, "push_token must be 1 to \(Self.maxTokenLength) characters for Fluxer", field: "push_token")
        }
        if let keys = installation.webPushKeys {
            try EndpointURL.validate(token, field: "push_token")
            for (field, key) in [("web_push_keys.p256dh", keys.p256dh), ("web_push_keys.auth", keys.auth)] {
                guard !key.isEmpty, key.utf8.count <= Self.maxKeyLength, key.utf8.allSatisfy(Self.isBase64URL) else {
                    throw ContractError(.invalidWebPush, "\(field) must be 1 to \(Self.maxKeyLength) base64url characters for Fluxer", field: field)
                }
            }
        } else if Self.webPushOnly.contains(platform) {
            throw ContractError(.invalidWebPush,
                                "Fluxer takes push_service \(installation.pushService.rawValue) only as a Web Push registration: send the endpoint URL with web_push_keys",
                                field: "web_push_keys")
        }
        _ = try session(context)
    }

    public func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                                previous: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest {
        guard let platform = Self.platform(for: installation) else {
            throw ContractError(.internal, "fluxer: registerRequest for an installation it does not accept")
        }
        var body: [JSONMember] = [
            JSONMember("platform", .string(platform)),
            JSONMember("token", .string(installation.pushToken)),
        ]
        if let keys = installation.webPushKeys {
            body.append(JSONMember("encryption_key", .string(keys.p256dh)))
            body.append(JSONMember("auth_secret", .string(keys.auth)))
        }
        body.append(JSONMember("app_id", .string(config.appID)))
        if let environment = providerEnvironment(platform: platform, installation: installation) {
            body.append(JSONMember("provider_environment", .string(environment)))
        }
        if let userAgent = Self.userAgent(installation.metadata) {
            body.append(JSONMember("user_agent", .string(userAgent)))
        }
        return post(registerURL, session: try session(context), body: body)
    }

    /// The four values the registration was made with (the token is the store's key), plus the
    /// `device_id` Fluxer answered, kept for support only: removal never uses it.
    public func identity(after response: HTTPClientResponse, installation: Installation, current: UpstreamIdentity?,
                         previous: UpstreamIdentity?) -> UpstreamIdentity? {
        guard let platform = Self.platform(for: installation) else { return nil }
        var values = ["platform": platform, "app_id": config.appID]
        if let environment = providerEnvironment(platform: platform, installation: installation) {
            values["provider_environment"] = environment
        }
        if let id = (try? JSONValue.parse(response.body))?.objectValue?["device_id"]?.stringValue, Self.isDeviceID(id) {
            values["device_id"] = id
        }
        return UpstreamIdentity(values)
    }

    // MARK: Unregister

    /// Removal names the registration by the values it was made with; without them (a token
    /// PushWarden never registered with this upstream) there is nothing to name: skipped.
    ///
    /// - Throws: `unauthorized` when the client sent no Fluxer session.
    public func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest? {
        guard let identity, let platform = identity["platform"], Self.platforms.contains(platform) else { return nil }
        return try unregister(token: pushToken, platform: platform, appID: identity["app_id"] ?? config.appID,
                              environment: identity["provider_environment"], session: session(context))
    }

    public func retireRequest(previousToken: String, installation: Installation, context: CallContext,
                              identity: UpstreamIdentity?) -> HTTPClientRequest? {
        if identity != nil {
            return try? unregisterRequest(pushToken: previousToken, context: context, identity: identity)
        }
        guard let platform = Self.platform(for: installation), let session = try? session(context) else { return nil }
        return unregister(token: previousToken, platform: platform, appID: config.appID,
                          environment: providerEnvironment(platform: platform, installation: installation), session: session)
    }

    /// The same token registered under other values (another environment or `app_id`) is another
    /// registration at Fluxer: remove the old one with the values it was made with.
    public func supersededRequest(pushToken: String, replaced: UpstreamIdentity, by kept: UpstreamIdentity,
                                  context: CallContext) -> HTTPClientRequest? {
        let keys = ["platform", "app_id", "provider_environment"]
        guard keys.contains(where: { replaced[$0] != kept[$0] }) else { return nil }
        return try? unregisterRequest(pushToken: pushToken, context: context, identity: replaced)
    }

    private func unregister(token: String, platform: String, appID: String, environment: String?, session: String) -> HTTPClientRequest {
        var body: [JSONMember] = [
            JSONMember("platform", .string(platform)),
            JSONMember("token", .string(token)),
            JSONMember("app_id", .string(appID)),
        ]
        if let environment { body.append(JSONMember("provider_environment", .string(environment))) }
        return post(unregisterURL, session: session, body: body)
    }

    // MARK: Answers

    /// 2xx done (unregister answers 200 whether or not the registration existed); 408, 425, 429
    /// and 5xx retried (429 is Fluxer's per-user rate limit: `Retry-After`, else the body's
    /// `retry_after`); anything else a refusal carrying Fluxer's `code`.
    ///
    /// - Important: 401 and 403 (`ACCESS_DENIED`, `ACCOUNT_SUSPICIOUS_ACTIVITY`) refuse the *user's*
    ///   session, not a credential of PushWarden's, so they must not become `upstream_auth_failed`
    ///   (502, "an operator problem"). They are `callerRefused` with Fluxer's code: 401
    ///   `unauthorized` or 403 `forbidden`, `upstream_code` = `ACCESS_DENIED`, ... (a code the
    ///   document does not name, such as an `UNAUTHORIZED` on a 401, as `unknown:<hash>`).
    public func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict {
        switch response.status {
        case 200..<300:
            return .accepted
        case 408, 425, 429, 500...599:
            return .retry(afterSeconds: retryAfterSeconds(response) ?? Self.bodyRetryAfter(response.body))
        // Fluxer authenticates the user's own session, never PushWarden: its 401/403 are the
        // caller's problem (bot or OAuth2 credential, suspicious account), not an operator's.
        case 401:
            return .callerRefused(forbidden: false, code: Self.errorCode(response.body))
        case 403:
            return .callerRefused(forbidden: true, code: Self.errorCode(response.body))
        default:
            return .rejected(code: Self.errorCode(response.body))
        }
    }

    /// Fluxer's error response: `code` at the top level (`INVALID_FORM_BODY`, `ACCESS_DENIED`, ...).
    /// Raw provider text: shown only through `UpstreamErrorCode.shown`.
    static func errorCode(_ body: [UInt8]) -> String? {
        guard let object = (try? JSONValue.parse(body))?.objectValue else { return nil }
        let code = object["code"]?.stringValue ?? object["error"]?.objectValue?["code"]?.stringValue
        guard let code, !code.isEmpty, code.count <= 64,
              code.utf8.allSatisfy({ Self.isBase64URL($0) || $0 == UInt8(ascii: ".") }) else { return nil }
        return code
    }

    /// A rate-limit answer's `retry_after` (seconds, possibly fractional), rounded up.
    static func bodyRetryAfter(_ body: [UInt8]) -> Int? {
        guard case .number(let text)? = (try? JSONValue.parse(body))?.objectValue?["retry_after"],
              let seconds = Double(text), seconds >= 0 else { return nil }
        // Saturated like the header (`1e400` parses as infinity).
        return Int(min(seconds, Double(RetryAfter.providerCeilingSeconds)).rounded(.up))
    }

    /// Register: a `device_id` derived here from the four values (Fluxer's own derivation is not
    /// documented, so a dry run's ids are stand-ins); unregister: `{"success": true}`.
    public func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse {
        let headers: HTTPHeaders = ["Content-Type": "application/json"]
        if request.url.hasSuffix("/unregister") {
            return HTTPClientResponse(status: 200, headers: headers, body: Array(#"{"success":true}"#.utf8))
        }
        let body = (try? JSONValue.parse(request.body))?.objectValue
        let material = ["platform", "app_id", "provider_environment", "token"].map { body?[$0]?.stringValue ?? "" }.joined(separator: "\u{0}")
        let id = String(SHA256.hexHash(Array(material.utf8)).prefix(32))
        return HTTPClientResponse(status: 200, headers: headers,
                                  body: JSONValue.object(JSONObject([JSONMember("device_id", .string(id))])).encoded())
    }

    // MARK: Helpers

    private func post(_ url: String, session: String, body: [JSONMember]) -> HTTPClientRequest {
        var headers = HTTPHeaders()
        headers.add(config.forwardHeader, session)
        return UpstreamJSON.request("POST", url, headers: headers, body: .object(JSONObject(body)))
    }

    static func isBase64URL(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }

    /// 32 lowercase hexadecimal characters.
    static func isDeviceID(_ id: String) -> Bool {
        id.utf8.count == 32 && id.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}
