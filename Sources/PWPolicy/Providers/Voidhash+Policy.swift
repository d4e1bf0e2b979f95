import PWCore
import YAMLKit

/// Voidhash push devices (seed 000): an API origin, the project's publishable key, and the values
/// the Voidhash SDK would send in its `x-*` headers. iOS and Android are served only when their
/// bundle id (iOS) or package name (Android) is given.
public struct VoidhashConfig: Sendable, Equatable, ProviderSettings {
    /// Voidhash Cloud's API origin, the document's default; a self-hosted install gives its own.
    public static let cloudURL = "https://api.voidhash.com"

    /// Which SDK PushWarden speaks for in `x-sdk`.
    public enum SDK: String, Sendable, Equatable {
        /// `x-sdk` is the installation's platform (`ios` or `android`).
        case native
        /// `x-sdk: react-native` on both platforms.
        case reactNative = "react-native"
    }

    /// The API origin, no trailing slash; paths `/api/v1/sdk/push-devices/...` are appended.
    public var baseURL: String
    public var publishableKey: SecretRef
    /// `x-client-bundle-id` and `bundleId` for iOS; nil: iOS installations are skipped.
    public var iosBundleID: String?
    /// `x-client-bundle-id` for Android; nil: Android installations are skipped.
    public var androidPackageName: String?
    public var sdk: SDK
    /// `x-sdk-version`.
    public var sdkVersion: String
    /// `x-is-debug-build`: true when the publishable key is a `vh_pk_test_...` key.
    public var debugBuild: Bool
    /// `x-observer-mode`.
    public var observerMode: Bool

    public init(baseURL: String = VoidhashConfig.cloudURL, publishableKey: SecretRef, iosBundleID: String?, androidPackageName: String?,
                sdk: SDK = .native, sdkVersion: String, debugBuild: Bool = false, observerMode: Bool = false) {
        self.baseURL = baseURL
        self.publishableKey = publishableKey
        self.iosBundleID = iosBundleID
        self.androidPackageName = androidPackageName
        self.sdk = sdk
        self.sdkVersion = sdkVersion
        self.debugBuild = debugBuild
        self.observerMode = observerMode
    }

    static let policyKeys: [String]? = ["base_url", "publishable_key", "ios_bundle_id", "android_package_name", "sdk",
                                        "sdk_version", "debug_build", "observer_mode"]

    public var providerName: String { ProviderKind.voidhash.rawValue }
    public var summary: String { "\(ProviderKind.voidhash.traits.label) push devices at \(baseURL)" }
    public var endpoint: String? { baseURL }
    public var injected: [String] {
        var lines = [
            "x-publishable-key: <publishable key from \(publishableKey)>",
            "x-distinct-id: the session's contact (percent-encoded, with x-distinct-id-encoding: percent, unless printable ASCII)",
        ]
        if let iosBundleID { lines.append("x-client-bundle-id and bundleId for iOS: \(iosBundleID)") }
        if let androidPackageName { lines.append("x-client-bundle-id for Android: \(androidPackageName)") }
        lines.append("x-platform-flavor: native, x-sdk: \(sdk == .native ? "the platform" : sdk.rawValue), x-sdk-version: \(sdkVersion)")
        lines.append("x-is-debug-build: \(debugBuild), x-is-backgrounded: false, x-observer-mode: \(observerMode)")
        lines.append("pushDeviceTokenId: kept server-side per push token, sent on refresh and unregister")
        return lines
    }
    public var secrets: [SecretUse] { [SecretUse(publishableKey, "publishable key")] }
}

extension PolicyReader {
    func voidhash(_ fields: Fields) -> ProviderConfig? {
        var ok = true
        var baseURL: String? = VoidhashConfig.cloudURL
        if let node = fields["base_url"] { baseURL = upstreamURL(node, fields.at("base_url")) }
        let key = fields.required("publishable_key").flatMap { checker.secret($0, fields.at("publishable_key")) }
        let ios = fields["ios_bundle_id"].flatMap { voidhashBundleID($0, fields.at("ios_bundle_id")) }
        let android = fields["android_package_name"].flatMap { voidhashBundleID($0, fields.at("android_package_name")) }
        if (fields["ios_bundle_id"] != nil && ios == nil) || (fields["android_package_name"] != nil && android == nil) { ok = false }
        if fields["ios_bundle_id"] == nil && fields["android_package_name"] == nil && fields.isMapping {
            checker.report(fields.mark, fields.path, "give ios_bundle_id, android_package_name or both: Voidhash serves only the platforms named")
            ok = false
        }
        var sdk: VoidhashConfig.SDK? = .native
        if let node = fields["sdk"] {
            sdk = checker.choice(node, fields.at("sdk"), ["native", "react-native"]).flatMap(VoidhashConfig.SDK.init)
        }
        let version = fields.required("sdk_version").flatMap { voidhashHeaderValue($0, fields.at("sdk_version")) }
        var debug: Bool? = false
        if let node = fields["debug_build"] { debug = voidhashBool(node, fields.at("debug_build")) }
        var observer: Bool? = false
        if let node = fields["observer_mode"] { observer = voidhashBool(node, fields.at("observer_mode")) }
        guard ok, let baseURL, let key, let sdk, let version, let debug, let observer else { return nil }
        return .voidhash(VoidhashConfig(baseURL: baseURL, publishableKey: key, iosBundleID: ios, androidPackageName: android,
                                        sdk: sdk, sdkVersion: version, debugBuild: debug, observerMode: observer))
    }

    /// A bundle id or package name: it travels in a header and a JSON body, so only the characters
    /// both platforms allow (`com.example.app`). Also `dry_run`'s, emulating Voidhash.
    func voidhashBundleID(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = checker.string(node, path) else { return nil }
        let allowed = text.utf8.allSatisfy { ByteClass.isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }
        guard allowed, text.utf8.count <= 255 else {
            checker.report(node.mark, path, "expected a bundle id or package name like com.example.app (letters, digits, '.', '-' and '_', at most 255)")
            return nil
        }
        return text
    }

    /// A value sent as a header as is: visible ASCII, no spaces.
    private func voidhashHeaderValue(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = checker.string(node, path) else { return nil }
        guard text.utf8.count <= 64, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            checker.report(node.mark, path, "expected a version like 0.0.1-alpha.1 (visible ASCII without spaces, at most 64)")
            return nil
        }
        return text
    }

    /// An unquoted `true` or `false`, like the policy's integers.
    private func voidhashBool(_ node: YAMLNode, _ path: String) -> Bool? {
        guard case .scalar(let text, .plain) = node.kind, text == "true" || text == "false" else {
            checker.report(node.mark, path, "expected true or false, found \(Checker.describe(node))")
            return nil
        }
        return text == "true"
    }
}
