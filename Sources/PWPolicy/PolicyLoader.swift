#if canImport(Glibc)
import Glibc
#endif
import PWCore
import YAMLKit

/// Reads and strictly validates a policy file (docs/configuration.md).
///
/// Strict means: an unknown key, a wrong type, a duplicate key, a missing required key, an invalid
/// enum value, a literal secret, an alias or a tag is an error, and every error in the file is
/// reported in one pass, each with file, line, column and path. Nothing is read besides the
/// policy file itself: secrets and JWKS files are only named here and resolved at start-up.
/// (`pushwarden policy check` also reads each `jwks_file` by the start-up rules, through
/// `SessionPolicyCheck` and the place recorded in `Policy.locations`.)
///
/// Where the API leaves it open (also in `policies/README.md`):
/// - integers must be unquoted (`"3"` is refused); durations, sizes and rates may be quoted;
/// - `session.type` is required; `jwks_file` must be an absolute path;
/// - upstream names follow the app-id rule (`[a-z0-9_-]{1,64}`): they become response keys and
///   metric labels;
/// - `retry.backoff` and `retry.max_backoff` lie in `1ms...1m`, backoff at most max_backoff;
/// - diagnostics are sorted by position; a value is never echoed where a secret belongs.
public enum PolicyLoader {
    /// The format version this build reads.
    public static let supportedVersion = 1

    /// Reads the file at `path`; diagnostics name `path` as given.
    public static func load(path: String) -> Result<Policy, PolicyDiagnostics> {
        guard let bytes = readWholeFile(path) else {
            let reason = String(cString: strerror(errno))
            return .failure(PolicyDiagnostics([Diagnostic(file: path, line: 1, column: 1, path: "",
                                                          message: "cannot read the policy file: \(reason)")]))
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            return .failure(PolicyDiagnostics([Diagnostic(file: path, line: 1, column: 1, path: "",
                                                          message: "the policy file is not valid UTF-8")]))
        }
        return load(text: text, path: path)
    }

    /// Validates `text` as if read from `path` (used for messages and `Policy.sourcePath`).
    public static func load(text: String, path: String) -> Result<Policy, PolicyDiagnostics> {
        let checker = Checker(file: path)
        let root: YAMLNode?
        do {
            root = try YAMLParser.parse(text)
        } catch {
            return .failure(PolicyDiagnostics(error.issues.map {
                Diagnostic(file: path, line: $0.mark.line, column: $0.mark.column, path: "", message: $0.message)
            }))
        }
        guard let root else {
            checker.report(Mark(line: 1, column: 1), "", "the policy file is empty; expected a mapping with keys version and apps")
            return .failure(PolicyDiagnostics(checker.diagnostics))
        }
        let policy = PolicyReader(checker: checker, sourcePath: path).policy(root)
        if let policy, checker.diagnostics.isEmpty { return .success(policy) }
        // Checks run section by section (a cross-key check may report after a later key); sort so
        // the output reads top to bottom. The sort is stable for problems at the same place.
        let ordered = checker.diagnostics.enumerated().sorted {
            ($0.element.line, $0.element.column, $0.offset) < ($1.element.line, $1.element.column, $1.offset)
        }.map(\.element)
        return .failure(PolicyDiagnostics(ordered))
    }
}

/// The policy schema, one function per section. Each returns nil when its section had an error
/// (already reported), and keeps reading the sections after it.
struct PolicyReader {
    let checker: Checker
    let sourcePath: String

    static let commonUpstreamKeys = ["name", "provider", "role", "delivery", "timeout", "retry", "queue", "circuit"]

    /// How one provider's upstream block is read: its own keys (nil while the provider is not
    /// supported, so its keys cannot be judged) and the reader, which lives in
    /// `Providers/<Provider>+Policy.swift` beside the provider's settings.
    struct ProviderReader: Sendable {
        var keys: [String]?
        var read: @Sendable (PolicyReader, Fields) -> ProviderConfig?
    }

    static let providerReaders: [(name: String, reader: ProviderReader)] = [
        (ProviderKind.voyado.rawValue, ProviderReader(keys: VoyadoConfig.policyKeys, read: { $0.voyado($1) })),
        (ProviderKind.voidhash.rawValue, ProviderReader(keys: VoidhashConfig.policyKeys, read: { $0.voidhash($1) })),
        (ProviderKind.fluxer.rawValue, ProviderReader(keys: FluxerConfig.policyKeys, read: { $0.fluxer($1) })),
        (ProviderKind.nativeNotify.rawValue, ProviderReader(keys: NativeNotifyConfig.policyKeys, read: { $0.nativeNotify($1) })),
        (ProviderKind.pushNotice.rawValue, ProviderReader(keys: PushNoticeConfig.policyKeys, read: { $0.pushNotice($1) })),
        ("dry_run", ProviderReader(keys: DryRunConfig.policyKeys, read: { $0.dryRun($1) })),
    ]

    static var providers: [String] { providerReaders.map(\.name) }

    static func reader(for name: String) -> ProviderReader? {
        providerReaders.first { $0.name == name }?.reader
    }

    func policy(_ root: YAMLNode) -> Policy? {
        let fields = Fields(checker, root, "", allowed: ["version", "serial", "apps", "store", "admin", "audit", "webhooks"])
        var version: Int?
        if let node = fields.required("version"), let value = checker.int(node, "version", in: Int.min...Int.max) {
            if value == PolicyLoader.supportedVersion {
                version = value
            } else {
                checker.report(node.mark, "version", "unsupported version \(value); this PushWarden reads version \(PolicyLoader.supportedVersion)")
            }
        }
        var serial: Int?
        var serialOK = true
        if let node = fields["serial"] {
            serial = self.serial(node)
            serialOK = serial != nil
            // Where a refused serial (lower than the one in force) is reported.
            checker.locate(node.mark, "serial")
        }
        var apps: [AppPolicy]?
        if let node = fields.required("apps") {
            apps = self.apps(node)
        }
        var store: StorePolicy?
        var storeValid = true
        if let node = fields["store"] {
            store = self.store(node)
            storeValid = store != nil
        }
        var admin: AdminPolicy?
        var adminOK = true
        if let node = fields["admin"] {
            admin = self.admin(node, fields.at("admin"))
            adminOK = admin != nil
        }
        var audit: AuditPolicy?
        var auditOK = true
        if let node = fields["audit"] {
            audit = self.audit(node, fields.at("audit"))
            auditOK = audit != nil
        }
        var webhooks: [WebhookPolicy]? = []
        if let node = fields["webhooks"] { webhooks = self.webhooks(node) }
        guard let version, let apps, storeValid, adminOK, serialOK, auditOK, let webhooks else { return nil }
        var policy = Policy(version: version, apps: apps, admin: admin, sourcePath: sourcePath, locations: checker.locations, store: store,
                            serial: serial, audit: audit)
        policy.webhooks = webhooks
        return policy
    }

    /// `audit: {signing_key: SECRET}`: the key that signs the evidence trail's receipts.
    func audit(_ node: YAMLNode, _ path: String) -> AuditPolicy? {
        secretBlock(node, path, key: "signing_key").map(AuditPolicy.init(signingKey:))
    }

    /// A block holding one secret reference under `key` and nothing else; its place is recorded
    /// so that a value refused when it is read is reported where it is named.
    private func secretBlock(_ node: YAMLNode, _ path: String, key: String) -> SecretRef? {
        let fields = Fields(checker, node, path, allowed: [key])
        guard fields.isMapping, let secretNode = fields.required(key) else { return nil }
        let at = fields.at(key)
        guard let secret = checker.secret(secretNode, at), fields.isClean else { return nil }
        checker.locate(secretNode.mark, at)
        return secret
    }

    /// `serial`: an unquoted integer in `0...Policy.maximumSerial`. Unlike the policy's other
    /// integers (nine digits at most) it may be longer: a Unix time in seconds is a natural serial.
    func serial(_ node: YAMLNode) -> Int? {
        if case .scalar(let text, let style) = node.kind, !node.isNull, style == .plain, text.count > 9,
           text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            guard let value = Int(text), value <= Policy.maximumSerial else {
                checker.report(node.mark, "serial", "must be between 0 and \(Policy.maximumSerial), found \(Checker.clip(text))")
                return nil
            }
            return value
        }
        return checker.int(node, "serial", in: 0...Policy.maximumSerial)
    }

    /// `admin: {token: SECRET}`, at the top level (the operator's) or under an app (that app's
    /// own): a server-to-server API bearer token. Its place is recorded so that a token refused
    /// when it is read (too short, shared with another) is reported where it is named.
    func admin(_ node: YAMLNode, _ path: String) -> AdminPolicy? {
        secretBlock(node, path, key: "token").map(AdminPolicy.init(token:))
    }

    func apps(_ node: YAMLNode) -> [AppPolicy]? {
        let fields = Fields(checker, node, "apps", allowed: nil)
        guard fields.isMapping else { return nil }
        if fields.keys.isEmpty && fields.isClean {
            checker.report(node.mark, "apps", "declare at least one app")
            return nil
        }
        var apps: [AppPolicy] = []
        var complete = true
        for (id, mark) in fields.keys {
            let path = fields.at(id)
            if !Self.isSafeID(id) {
                checker.report(mark, path, "app id must be 1 to 64 characters of a-z, 0-9, _ and - (it is part of the URL path)")
                complete = false
            }
            if let value = fields[id], let app = app(id: id, value, path) {
                apps.append(app)
            } else {
                complete = false
            }
        }
        return complete ? apps : nil
    }

    func app(id: String, _ node: YAMLNode, _ path: String) -> AppPolicy? {
        let fields = Fields(checker, node, path, allowed: ["session", "client", "dedupe", "upstreams", "inventory", "admin", "dead_tokens"])
        let session = fields.required("session").flatMap { self.session($0, fields.at("session")) }
        let client = fields.required("client").flatMap { self.client($0, fields.at("client")) }
        let dedupe = fields["dedupe"].map { self.dedupe($0, fields.at("dedupe")) } ?? DedupePolicy(refreshAfterSeconds: 7 * 86_400)
        let upstreams = fields.required("upstreams").flatMap { self.upstreams($0, fields.at("upstreams")) }
        let inventory = fields["inventory"].map { self.inventory($0, fields.at("inventory")) } ?? InventoryPolicy()
        var admin: AdminPolicy?
        var adminOK = true
        if let node = fields["admin"] {
            admin = self.admin(node, fields.at("admin"))
            adminOK = admin != nil
        }
        let deadTokens = fields["dead_tokens"].map { self.deadTokens($0, fields.at("dead_tokens")) } ?? DeadTokenPolicy()
        guard let session, let client, let dedupe, let upstreams, let inventory, let deadTokens, adminOK else { return nil }
        var app = AppPolicy(id: id, session: session, client: client, dedupe: dedupe, upstreams: upstreams, inventory: inventory, admin: admin)
        app.deadTokens = deadTokens
        return app
    }

    // MARK: helpers

    /// The first value of `key` in a mapping node, before the mapping is checked: some sections'
    /// allowed keys depend on one of their values.
    static func rawValue(of key: String, in node: YAMLNode) -> YAMLNode? {
        guard case .mapping(let pairs) = node.kind else { return nil }
        return pairs.first { $0.key.scalar == key }?.value
    }

    /// `[a-z0-9_-]{1,64}`: safe in a URL path, a metric label and a log line as is.
    static func isSafeID(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 64 else { return false }
        return id.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D }
    }
}

extension PolicyLoader {
    /// The rule app ids and upstream names follow (`[a-z0-9_-]{1,64}`), for values read back from
    /// elsewhere (a store) that must name nothing a policy could not.
    public static func isSafeID(_ id: String) -> Bool { PolicyReader.isSafeID(id) }
}
