import ClientAPI
import HTTPClient
import PWCore
import PWPolicy

/// PushNotice subscribers (seed document 004): `POST` and `DELETE`
/// `<base>/api/v1/apps/{slug}/subscribers`, `Authorization: Bearer pnp_...`, JSON both ways.
///
/// Quirks kept here:
/// - PushNotice delivers through FCM only, on Android and on iOS (Firebase relays to APNs), so it
///   takes the raw FCM registration token of `(android, fcm)` and `(ios, fcm)`; APNs tokens, VoIP,
///   UnifiedPush, Web Push and the Web Push form of FCM are skipped.
/// - A subscriber is identified by `(app, token)`: nothing is handed back, nothing is kept.
/// - A rotation is one call: the register body carries `previous_token` and PushNotice moves the
///   row (same id, new token), so the old token needs no retirement call.
/// - The key travels only in `Authorization: Bearer`, never as `X-Api-Key` or `?api_key=` (the
///   document's other two ways), so it never lands in a URL or access log.
/// - Unsubscribe answers `200 {"ok":true}` even for an unknown token.
/// - 401/403 (bad key, or a slug the key does not belong to) and 422 (bad payload) are never
///   retried, as the document says; network errors and 5xx are retried with the policy's backoff.
///   No rate limit is documented; a 429 would still be retried.
/// - Contact ids, `os_version` and `timezone` are not sent: PushNotice does not take them.
public struct PushNoticeAdapter: UpstreamAdapter {
    public let name: String
    public let kind = ProviderKind.pushNotice
    public let settingsDigest: String
    let subscribersURL: String
    let groups: [String]
    let authorization: String

    /// None: seed 004 lists statuses only ("8. Errors & retries": 401/403, 422, 5xx), never a code,
    /// so every code PushNotice sends is shown as `unknown:<hash>` and a refusal without one as
    /// `http_<status>`.
    public static let documentedErrorCodes: Set<String> = []

    /// - Parameter apiKey: the resolved `pnp_...` key; it travels only in the `Authorization` header.
    public init(name: String, config: PushNoticeConfig, apiKey: [UInt8]) {
        self.name = name
        self.subscribersURL = config.subscribersURL
        self.groups = config.groups
        // Groups shape every register body, so a policy change to them forwards again.
        self.settingsDigest = ([config.subscribersURL] + config.groups).joined(separator: "\u{0}")
        self.authorization = "Bearer " + String(decoding: apiKey, as: UTF8.self)
    }

    /// Resolves the key and checks its documented shape (`pnp_` and then visible ASCII), so a key
    /// for another provider, or one with a stray space or newline, stops the sidecar at start-up
    /// rather than turning every call into a 401.
    ///
    /// - Throws: a `ConfigurationError` naming the secret reference, never its value.
    static func make(name: String, config: PushNoticeConfig, secrets: SecretLookup) throws(ConfigurationError) -> PushNoticeAdapter {
        let key = try secrets(config.apiKey)
        guard isAPIKey(key) else {
            throw ConfigurationError("app \(secrets.app): upstream \(secrets.upstream): secret \(config.apiKey) is not a PushNotice API key (expected pnp_ followed by the key, no spaces)")
        }
        return PushNoticeAdapter(name: name, config: config, apiKey: key)
    }

    static func isAPIKey(_ key: [UInt8]) -> Bool {
        let prefix = Array("pnp_".utf8)
        return key.count > prefix.count && Array(key.prefix(prefix.count)) == prefix
            && key.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    public func accepts(_ installation: Installation) -> Bool {
        guard !installation.isWebPushForm, installation.pushService == .fcm else { return false }
        return installation.platform == .android || installation.platform == .ios
    }

    public func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                                previous: UpstreamIdentity?) -> HTTPClientRequest {
        var body: [JSONMember] = [
            JSONMember("token", .string(installation.pushToken)),
            JSONMember("platform", .string(installation.platform.rawValue)),
        ]
        let metadata = installation.metadata
        for (key, value) in [("app_version", metadata.appVersion), ("locale", metadata.locale), ("device_model", metadata.deviceModel)] {
            if let value { body.append(JSONMember(key, .string(value))) }
        }
        if let previousToken = installation.previousPushToken {
            body.append(JSONMember("previous_token", .string(previousToken)))
        }
        if !groups.isEmpty {
            body.append(JSONMember("groups", .array(groups.map { .string($0) })))
        }
        return request("POST", body)
    }

    /// The subscriber is removed by its token alone. Tokens PushNotice can never have held (APNs
    /// hex, endpoint URLs) are not sent to it at all: nothing to remove, and no reason to hand a
    /// provider a token it never had.
    public func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) -> HTTPClientRequest? {
        guard !Self.cannotBeFCM(pushToken) else { return nil }
        return request("DELETE", [JSONMember("token", .string(pushToken))])
    }

    /// The register call already moved the subscriber from the old token (`previous_token`).
    public func retireRequest(previousToken: String, installation: Installation, context: CallContext,
                              identity: UpstreamIdentity?) -> HTTPClientRequest? { nil }

    public func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict {
        standardVerdict(response) { Self.errorCode($0.body) }
    }

    public func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse {
        HTTPClientResponse(status: 200, headers: ["Content-Type": "application/json"], body: Array(#"{"ok":true}"#.utf8))
    }

    private func request(_ method: String, _ body: [JSONMember]) -> HTTPClientRequest {
        UpstreamJSON.request(method, subscribersURL, headers: ["Authorization": authorization], body: .object(JSONObject(body)))
    }

    /// A URL, or even-length hex of 64+ characters (an APNs device token): FCM registration
    /// tokens are neither.
    static func cannotBeFCM(_ token: String) -> Bool {
        PushTokenRules.looksLikeURL(token) || PushTokenRules.isAPNsShaped(token)
    }

    /// The error code of a refusal: `{"error": {"code": "..."}}`, or `{"error": "..."}` /
    /// `{"code": "..."}` when that is a short code (lower case, digits, `_ . -`); never free text.
    /// Raw provider text: none is documented, so it is only ever shown hashed.
    static func errorCode(_ body: [UInt8]) -> String? {
        if let code = UpstreamJSON.errorCode(body) { return code }
        guard let object = (try? JSONValue.parse(body))?.objectValue else { return nil }
        for candidate in [object["error"]?.stringValue, object["code"]?.stringValue] {
            if let code = candidate, isCode(code) { return code }
        }
        return nil
    }

    private static func isCode(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64 && text.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x5F || byte == 0x2E || byte == 0x2D
        }
    }
}
