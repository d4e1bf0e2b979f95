import PWCore
import YAMLKit

/// Fluxer mobile devices (seed 002): RFC 8291 Web Push or legacy vendor-token registrations made
/// with the signed-in user's own Fluxer session. Fluxer refuses bot and OAuth2 credentials on these
/// routes, so PushWarden holds no Fluxer secret at all: the client sends its Fluxer session in a
/// header of its own, named by the policy, and PushWarden forwards that value verbatim.
public struct FluxerConfig: Sendable, Equatable, ProviderSettings {
    /// The API origin (optionally with a path prefix), no trailing slash; the adapter appends
    /// `/v1/users/@me/mobile-devices`. Fluxer instances are self-hostable and the document names no
    /// origin, so there is no default.
    public var baseURL: String
    /// The client request header whose value is the user's Fluxer session.
    public var sessionHeader: String
    /// The header the session travels in to Fluxer (`Authorization` unless the policy says otherwise).
    public var forwardHeader: String
    /// Fluxer's `app_id`: the client build (`stable`, `beta`, `canary`, ...).
    public var appID: String
    /// Fixes `provider_environment` for `ios_apns` / `ios_apns_voip`; nil: taken from each
    /// installation's APNs environment (`sandbox` → `development`, `production` → `production`).
    public var providerEnvironment: String?

    public init(baseURL: String, sessionHeader: String, forwardHeader: String = "Authorization", appID: String = "stable",
                providerEnvironment: String? = nil) {
        self.baseURL = baseURL
        self.sessionHeader = sessionHeader
        self.forwardHeader = forwardHeader
        self.appID = appID
        self.providerEnvironment = providerEnvironment
    }

    static let policyKeys: [String]? = ["base_url", "session_header", "forward_header", "app_id", "provider_environment"]

    /// Headers a client session may not be read from: they carry the app's own session (which must
    /// never reach a third party) or framing that PushWarden itself relies on.
    static let refusedSessionHeaders = ["Authorization", "Cookie", "Host", "Content-Type", "Content-Length",
                                        "Transfer-Encoding", "Connection", "X-Request-Id"]
    /// Headers the session may not be forwarded as: PushWarden sets them itself.
    static let refusedForwardHeaders = ["Host", "Content-Type", "Content-Length", "Transfer-Encoding", "Connection",
                                        "Accept"]
    static let environments = ["production", "development"]

    public var providerName: String { ProviderKind.fluxer.rawValue }
    public var summary: String { "\(ProviderKind.fluxer.traits.label) mobile devices at \(baseURL)" }
    public var endpoint: String? { baseURL }
    public var injected: [String] {
        let environment = providerEnvironment.map { "\($0) (fixed by the policy)" }
            ?? "from the client's environment (sandbox → development, production → production)"
        return [
            "\(forwardHeader): the user's own Fluxer session, forwarded verbatim from the client's \(sessionHeader) header (never stored or logged; Fluxer refuses bot and OAuth2 credentials here)",
            "app_id: \(appID)",
            "provider_environment on ios_apns / ios_apns_voip: \(environment)",
            "platform: from platform + push_service (android/fcm → android_fcm, ios/apns → ios_apns, ios/apns_voip → ios_apns_voip, android/unified_push → android_unified_push; web is not sent)",
            "encryption_key / auth_secret: the client's web_push_keys.p256dh / web_push_keys.auth (Web Push form only)",
            "user_agent: built from the client's app_version, os_version and device_model when sent",
        ]
    }
    public var secrets: [SecretUse] { [] }
}

extension PolicyReader {
    func fluxer(_ fields: Fields) -> ProviderConfig? {
        let baseURL = fields.required("base_url").flatMap { upstreamURL($0, fields.at("base_url")) }
        let sessionHeader = fields.required("session_header").flatMap { fluxerSessionHeader($0, fields.at("session_header")) }
        var forwardHeader: String? = "Authorization"
        if let node = fields["forward_header"] {
            let at = fields.at("forward_header")
            forwardHeader = headerName(node, at).flatMap { name in
                if let refused = FluxerConfig.refusedForwardHeaders.first(where: { HTTPHeaders.equalsIgnoringCase($0, name) }) {
                    checker.report(node.mark, at, "the Fluxer session cannot be forwarded as \(refused): PushWarden sets that header itself")
                    return nil
                }
                return name
            }
        }
        var appID: String? = "stable"
        if let node = fields["app_id"] {
            appID = checker.string(node, fields.at("app_id")).flatMap { id in
                guard Self.isSafeID(id) else {
                    checker.report(node.mark, fields.at("app_id"), "app_id must be 1 to 64 characters of a-z, 0-9, _ and - (such as stable, beta or canary)")
                    return nil
                }
                return id
            }
        }
        var environment: String?? = .some(nil)
        if let node = fields["provider_environment"] {
            environment = checker.choice(node, fields.at("provider_environment"), FluxerConfig.environments).map { .some($0) }
        }
        guard let baseURL, let sessionHeader, let forwardHeader, let appID, let environment else { return nil }
        return .fluxer(FluxerConfig(baseURL: baseURL, sessionHeader: sessionHeader, forwardHeader: forwardHeader,
                                    appID: appID, providerEnvironment: environment))
    }

    /// The client header the user's Fluxer session is read from: a header name of its own, never
    /// one carrying the app's session or request framing (also `dry_run`'s, emulating Fluxer).
    func fluxerSessionHeader(_ node: YAMLNode, _ at: String) -> String? {
        guard let name = headerName(node, at) else { return nil }
        if let refused = FluxerConfig.refusedSessionHeaders.first(where: { HTTPHeaders.equalsIgnoringCase($0, name) }) {
            checker.report(node.mark, at, "the Fluxer session cannot be read from \(refused): "
                           + "it carries the app's own session or request framing; name a header of its own, such as X-Fluxer-Session")
            return nil
        }
        return name
    }
}
