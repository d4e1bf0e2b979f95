import YAMLKit

/// PushNotice subscribers (seed 004): FCM tokens registered under one app `{slug}`, with
/// `Authorization: Bearer pnp_...`, optional self-assigned groups.
public struct PushNoticeConfig: Sendable, Equatable, ProviderSettings {
    /// The document's public host, used when the policy names none.
    public static let defaultBaseURL = "https://app.rspush.com"

    /// Scheme and host (and an optional path prefix), no trailing slash; the API root `/api/v1`
    /// is appended by the adapter, as the document writes every path under it.
    public var baseURL: String
    /// The app's slug, placed in the URL path: `[a-z0-9_-]{1,64}`, so it needs no escaping.
    public var slug: String
    /// The app's API key (`pnp_...`); its shape is checked when the sidecar starts.
    public var apiKey: SecretRef
    /// Existing PushNotice groups every registration self-assigns to; PushNotice ignores
    /// unknown names. Empty: the field is not sent (every device is in Master anyway).
    public var groups: [String]

    public init(baseURL: String = PushNoticeConfig.defaultBaseURL, slug: String, apiKey: SecretRef, groups: [String] = []) {
        self.baseURL = baseURL
        self.slug = slug
        self.apiKey = apiKey
        self.groups = groups
    }

    static let policyKeys: [String]? = ["base_url", "slug", "api_key", "groups"]

    /// Longest group name accepted; the document gives none, and a name is a dashboard label.
    static let maxGroupLength = 100

    /// Where registrations go: `<base_url>/api/v1/apps/<slug>/subscribers`.
    public var subscribersURL: String { "\(baseURL)/api/v1/apps/\(slug)/subscribers" }

    public var providerName: String { ProviderKind.pushNotice.rawValue }
    public var summary: String { "\(ProviderKind.pushNotice.traits.label) app '\(slug)' at \(baseURL)" }
    public var endpoint: String? { baseURL }
    public var injected: [String] {
        var values = ["Authorization: Bearer <API key pnp_... from \(apiKey)>", "slug '\(slug)' in the URL path (from the policy)"]
        if !groups.isEmpty { values.append("groups: \(groups.joined(separator: ", ")) (from the policy)") }
        return values
    }
    public var secrets: [SecretUse] { [SecretUse(apiKey, "API key")] }
}

extension PolicyReader {
    func pushNotice(_ fields: Fields) -> ProviderConfig? {
        var baseURL: String? = PushNoticeConfig.defaultBaseURL
        if let node = fields["base_url"] { baseURL = upstreamURL(node, fields.at("base_url")) }
        let slug = fields.required("slug").flatMap { pushNoticeSlug($0, fields.at("slug")) }
        let apiKey = fields.required("api_key").flatMap { checker.secret($0, fields.at("api_key")) }
        var groups: [String]? = []
        if let node = fields["groups"] { groups = pushNoticeGroups(node, fields.at("groups")) }
        guard let baseURL, let slug, let apiKey, let groups else { return nil }
        return .pushNotice(PushNoticeConfig(baseURL: baseURL, slug: slug, apiKey: apiKey, groups: groups))
    }

    /// The app's slug (also `dry_run`'s, emulating PushNotice): it is part of the URL path.
    func pushNoticeSlug(_ node: YAMLNode, _ at: String) -> String? {
        guard let text = checker.string(node, at) else { return nil }
        guard Self.isSafeID(text) else {
            checker.report(node.mark, at, "slug must be 1 to 64 characters of a-z, 0-9, _ and - (it is part of the URL path)")
            return nil
        }
        return text
    }

    /// Group names: non-empty strings, no control characters, each at most
    /// `PushNoticeConfig.maxGroupLength` characters, no name twice.
    private func pushNoticeGroups(_ node: YAMLNode, _ path: String) -> [String]? {
        guard let items = checker.list(node, path) else { return nil }
        var groups: [String] = []
        var ok = true
        for (index, item) in items.enumerated() {
            let at = Checker.index(path, index)
            guard let name = checker.string(item, at) else {
                ok = false
                continue
            }
            if name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                checker.report(item.mark, at, "a group name must not contain control characters")
                ok = false
            } else if name.count > PushNoticeConfig.maxGroupLength {
                checker.report(item.mark, at, "a group name must be at most \(PushNoticeConfig.maxGroupLength) characters")
                ok = false
            } else if groups.contains(name) {
                checker.report(item.mark, at, "duplicate group '\(Checker.clip(name))'")
                ok = false
            } else {
                groups.append(name)
            }
        }
        return ok ? groups : nil
    }
}
