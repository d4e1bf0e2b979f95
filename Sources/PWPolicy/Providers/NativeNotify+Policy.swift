/// Native Notify universal devices (seed 003): `appId` and `appToken` travel in every request body,
/// the device is identified by a `deviceId` PushWarden keeps, and the app's `environment` is a
/// per-app setting rather than anything the device says.
public struct NativeNotifyConfig: Sendable, Equatable, ProviderSettings {
    /// The document's public host; a policy may point elsewhere (a loopback mock in tests).
    public static let defaultBaseURL = "https://app.nativenotify.com"
    /// Native Notify's environments (its "Environments" page); `production` is its default.
    public static let environments = ["production", "staging", "development"]
    /// The document caps the `framework` label at 60 characters.
    public static let maxFramework = 60
    /// The policy's integers are at most nine digits; Native Notify's app ids are small numbers.
    public static let maxAppID = 999_999_999

    /// Where `/api/universal/device/...` is reached, no trailing slash.
    public var baseURL: String
    /// The app's numeric id from the Native Notify dashboard (not a secret: it is sent with the token).
    public var appID: Int
    /// The app's `appToken`, which authenticates every call.
    public var appToken: SecretRef
    /// Sent as `environment` on every registration.
    public var environment: String
    /// The optional `framework` label shown in Native Notify's dashboard.
    public var framework: String?

    public init(baseURL: String = NativeNotifyConfig.defaultBaseURL, appID: Int, appToken: SecretRef,
                environment: String = "production", framework: String? = nil) {
        self.baseURL = baseURL
        self.appID = appID
        self.appToken = appToken
        self.environment = environment
        self.framework = framework
    }

    static let policyKeys: [String]? = ["base_url", "app_id", "app_token", "environment", "framework"]

    public var providerName: String { ProviderKind.nativeNotify.rawValue }
    public var summary: String { "\(ProviderKind.nativeNotify.traits.label) universal devices at \(baseURL)" }
    public var endpoint: String? { baseURL }
    public var injected: [String] {
        var values = [
            "appId: \(appID) (policy)",
            "appToken: <from \(appToken)>",
            "environment: \(environment) (policy)",
        ]
        if let framework { values.append("framework: \(framework) (policy)") }
        values.append("subscriberId: the session's contact")
        values.append("deviceId: the client's installation_id, else one PushWarden keeps per token chain")
        return values
    }
    public var secrets: [SecretUse] { [SecretUse(appToken, "Native Notify appToken")] }
}

extension PolicyReader {
    func nativeNotify(_ fields: Fields) -> ProviderConfig? {
        var baseURL: String? = NativeNotifyConfig.defaultBaseURL
        if let node = fields["base_url"] { baseURL = upstreamURL(node, fields.at("base_url")) }
        let appID = fields.required("app_id").flatMap { checker.int($0, fields.at("app_id"), in: 1...NativeNotifyConfig.maxAppID) }
        let appToken = fields.required("app_token").flatMap { checker.secret($0, fields.at("app_token")) }
        var environment: String? = "production"
        if let node = fields["environment"] {
            environment = checker.choice(node, fields.at("environment"), NativeNotifyConfig.environments)
        }
        var framework: String?? = .some(nil)
        if let node = fields["framework"] {
            let at = fields.at("framework")
            framework = checker.string(node, at).flatMap { text -> String?? in
                guard text.count <= NativeNotifyConfig.maxFramework else {
                    checker.report(node.mark, at, "must be at most \(NativeNotifyConfig.maxFramework) characters")
                    return nil
                }
                return .some(text)
            }
        }
        guard let baseURL, let appID, let appToken, let environment, let framework else { return nil }
        return .nativeNotify(NativeNotifyConfig(baseURL: baseURL, appID: appID, appToken: appToken,
                                                environment: environment, framework: framework))
    }
}
