/// `dry_run`: sends nothing, logs the request it would send and answers as the emulated provider.
///
/// The request is built by the emulated provider's own adapter, over stand-in settings that need
/// no credential (fake, well-formed keys; `https://dry-run.invalid`). A provider that needs a
/// setting only the policy can give takes it here, optionally, with a default:
/// - fluxer: `session_header` (default `X-Fluxer-Session`): clients must send a session there, as
///   they would for Fluxer; any value does, and it is logged redacted.
/// - pushnotice: `slug` (default `dry-run`), part of the logged path.
/// - voidhash: `ios_bundle_id`, `android_package_name`; with neither, both platforms are served
///   under `dev.pushwarden.dryrun`; with one or both, only the platforms named, as Voidhash does.
/// A key is refused unless it belongs to the provider emulated.
public struct DryRunConfig: Sendable, Equatable, ProviderSettings {
    /// The provider whose request shapes and answers are emulated.
    public var emulates: ProviderKind
    /// Fluxer: the client header holding the user's session (a stand-in session of any value).
    public var sessionHeader: String?
    /// PushNotice: the app slug in the path.
    public var slug: String?
    /// Voidhash: the bundle id (iOS) and package name (Android) served.
    public var iosBundleID: String?
    public var androidPackageName: String?

    public init(emulates: ProviderKind, sessionHeader: String? = nil, slug: String? = nil, iosBundleID: String? = nil,
                androidPackageName: String? = nil) {
        self.emulates = emulates
        self.sessionHeader = sessionHeader
        self.slug = slug
        self.iosBundleID = iosBundleID
        self.androidPackageName = androidPackageName
    }

    public static let defaultSessionHeader = "X-Fluxer-Session"
    public static let defaultSlug = "dry-run"
    public static let defaultBundleID = "dev.pushwarden.dryrun"

    static let policyKeys = ["emulates", "session_header", "slug", "ios_bundle_id", "android_package_name"]
    /// Which emulated provider each optional key belongs to.
    static let keyOwners: [(String, ProviderKind)] = [("session_header", .fluxer), ("slug", .pushNotice), ("ios_bundle_id", .voidhash),
                                                       ("android_package_name", .voidhash)]

    public var providerName: String { "dry_run" }
    public var summary: String {
        "dry run emulating \(emulates.rawValue); nothing leaves this host, requests are logged with secrets and tokens redacted"
    }
    public var endpoint: String? { nil }
    public var injected: [String] {
        switch emulates {
        case .fluxer:
            return ["the client's \(sessionHeader ?? Self.defaultSessionHeader) header is required, as Fluxer would require a session; any value, logged redacted"]
        case .pushNotice:
            return ["slug '\(slug ?? Self.defaultSlug)' in the logged path"]
        case .voidhash:
            var lines: [String] = []
            if let iosBundleID { lines.append("x-client-bundle-id and bundleId for iOS: \(iosBundleID)") }
            if let androidPackageName { lines.append("x-client-bundle-id for Android: \(androidPackageName)") }
            return lines
        case .voyado, .nativeNotify:
            return []
        }
    }
    public var secrets: [SecretUse] { [] }
}

extension PolicyReader {
    func dryRun(_ fields: Fields) -> ProviderConfig? {
        var emulates: ProviderKind? = .voyado
        let supported = ProviderKind.allCases.map(\.rawValue).joined(separator: ", ")
        if let node = fields["emulates"] {
            let at = fields.at("emulates")
            emulates = nil
            if let value = checker.string(node, at) {
                emulates = ProviderKind(rawValue: value)
                if emulates == nil { checker.report(node.mark, at, "invalid value '\(Checker.clip(value))'; expected one of: \(supported)") }
            }
        }
        guard let emulates else { return nil }
        var ok = true
        for (key, owner) in DryRunConfig.keyOwners where owner != emulates {
            if let node = fields[key] {
                checker.report(node.mark, fields.at(key), "'\(key)' applies only to a dry run emulating \(owner.rawValue)")
                ok = false
            }
        }
        var config = DryRunConfig(emulates: emulates)
        switch emulates {
        case .fluxer:
            if let node = fields["session_header"] {
                config.sessionHeader = fluxerSessionHeader(node, fields.at("session_header"))
                if config.sessionHeader == nil { ok = false }
            } else {
                config.sessionHeader = DryRunConfig.defaultSessionHeader
            }
        case .pushNotice:
            if let node = fields["slug"] {
                config.slug = pushNoticeSlug(node, fields.at("slug"))
                if config.slug == nil { ok = false }
            } else {
                config.slug = DryRunConfig.defaultSlug
            }
        case .voidhash:
            let ios = fields["ios_bundle_id"].flatMap { voidhashBundleID($0, fields.at("ios_bundle_id")) }
            let android = fields["android_package_name"].flatMap { voidhashBundleID($0, fields.at("android_package_name")) }
            if (fields["ios_bundle_id"] != nil && ios == nil) || (fields["android_package_name"] != nil && android == nil) { ok = false }
            if fields["ios_bundle_id"] == nil && fields["android_package_name"] == nil {
                config.iosBundleID = DryRunConfig.defaultBundleID
                config.androidPackageName = DryRunConfig.defaultBundleID
            } else {
                config.iosBundleID = ios
                config.androidPackageName = android
            }
        case .voyado, .nativeNotify:
            break
        }
        return ok ? .dryRun(config) : nil
    }
}
