/// `dry_run`: sends nothing, logs the request it would send and answers as the emulated provider.
public struct DryRunConfig: Sendable, Equatable, ProviderSettings {
    /// The provider whose request shapes and answers are emulated (`voyado`).
    public var emulates: String
    public init(emulates: String) { self.emulates = emulates }

    static let policyKeys = ["emulates"]
    static let emulated = ["voyado"]

    public var providerName: String { "dry_run" }
    public var summary: String {
        "dry run emulating \(emulates); nothing leaves this host, requests are logged with secrets and tokens redacted"
    }
    public var endpoint: String? { nil }
    public var injected: [String] { [] }
    public var secrets: [SecretUse] { [] }
    /// The only emulated provider, Voyado, takes events.
    public var takesEvents: Bool { true }
}

extension PolicyReader {
    func dryRun(_ fields: Fields) -> ProviderConfig? {
        var emulates: String? = "voyado"
        if let node = fields["emulates"] {
            let at = fields.at("emulates")
            emulates = checker.string(node, at)
            if let value = emulates, !DryRunConfig.emulated.contains(value) {
                if Self.reader(for: value) != nil {
                    checker.report(node.mark, at, "emulating '\(value)' is not supported in this version; supported: voyado")
                } else {
                    checker.report(node.mark, at, "invalid value '\(Checker.clip(value))'; expected one of: voyado")
                }
                emulates = nil
            }
        }
        guard let emulates else { return nil }
        return .dryRun(DryRunConfig(emulates: emulates))
    }
}
