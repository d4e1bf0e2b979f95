/// NativeNotify (see ../shared/seeds/README.md for its document). Not supported yet: the policy reader
/// refuses the provider until its settings are defined here.
public struct NativeNotifyConfig: Sendable, Equatable, ProviderSettings {
    /// Where the provider's API is reached.
    public var baseURL: String
    public init(baseURL: String) { self.baseURL = baseURL }

    /// The provider's own policy keys; nil while the provider is not supported.
    static let policyKeys: [String]? = nil

    public var providerName: String { "nativenotify" }
    public var summary: String { "NativeNotify at \(baseURL)" }
    public var endpoint: String? { baseURL }
    public var injected: [String] { [] }
    public var secrets: [SecretUse] { [] }
}

extension PolicyReader {
    func nativeNotify(_ fields: Fields) -> ProviderConfig? { nil }
}
