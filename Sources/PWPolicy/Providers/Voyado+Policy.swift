/// Voyado App Push (seed 001): one base path and a PublicApiKey.
public struct VoyadoConfig: Sendable, Equatable, ProviderSettings {
    /// `https://app-push-prod.voyado.com/api/v1/<tenant>/<id>/<env>`, no trailing slash.
    public var basePath: String
    public var apiKey: SecretRef

    public init(basePath: String, apiKey: SecretRef) {
        self.basePath = basePath
        self.apiKey = apiKey
    }

    static let policyKeys = ["base_path", "api_key"]

    public var providerName: String { ProviderKind.voyado.rawValue }
    public var summary: String { "\(ProviderKind.voyado.traits.label) App Push at \(basePath)" }
    public var endpoint: String? { basePath }
    public var injected: [String] {
        ["Authorization: Bearer <PublicApiKey from \(apiKey)>", "contact_id: the session's contact"]
    }
    public var secrets: [SecretUse] { [SecretUse(apiKey, "API key")] }
}

extension PolicyReader {
    func voyado(_ fields: Fields) -> ProviderConfig? {
        let basePath = fields.required("base_path").flatMap { upstreamURL($0, fields.at("base_path")) }
        let apiKey = fields.required("api_key").flatMap { checker.secret($0, fields.at("api_key")) }
        guard let basePath, let apiKey else { return nil }
        return .voyado(VoyadoConfig(basePath: basePath, apiKey: apiKey))
    }
}
