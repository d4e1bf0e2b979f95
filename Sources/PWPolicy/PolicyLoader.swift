#if canImport(Glibc)
import PWCore
import Glibc
#endif
import YAMLKit

/// Reads and strictly validates a policy file (CONTRACT.md section 2).
///
/// Strict means: an unknown key, a wrong type, a duplicate key, a missing required key, an invalid
/// enum value, a literal secret, an alias or a tag is an error, and every error in the file is
/// reported in one pass, each with file, line, column and path. Nothing is read besides the
/// policy file itself: secrets and JWKS files are only named here and resolved at start-up.
/// (`pushwarden policy check` also reads each `jwks_file` by the start-up rules, through
/// `SessionPolicyCheck` and the place recorded in `Policy.locations`.)
///
/// Where CONTRACT.md is silent (also in `policies/README.md`):
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
        ("voyado", ProviderReader(keys: VoyadoConfig.policyKeys, read: { $0.voyado($1) })),
        ("voidhash", ProviderReader(keys: VoidhashConfig.policyKeys, read: { $0.voidhash($1) })),
        ("fluxer", ProviderReader(keys: FluxerConfig.policyKeys, read: { $0.fluxer($1) })),
        ("nativenotify", ProviderReader(keys: NativeNotifyConfig.policyKeys, read: { $0.nativeNotify($1) })),
        ("pushnotice", ProviderReader(keys: PushNoticeConfig.policyKeys, read: { $0.pushNotice($1) })),
        ("dry_run", ProviderReader(keys: DryRunConfig.policyKeys, read: { $0.dryRun($1) })),
    ]

    static var providers: [String] { providerReaders.map(\.name) }

    static func reader(for name: String) -> ProviderReader? {
        providerReaders.first { $0.name == name }?.reader
    }

    func policy(_ root: YAMLNode) -> Policy? {
        let fields = Fields(checker, root, "", allowed: ["version", "serial", "apps", "store", "admin", "audit"])
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
        guard let version, let apps, storeValid, adminOK, serialOK, auditOK else { return nil }
        return Policy(version: version, apps: apps, admin: admin, sourcePath: sourcePath, locations: checker.locations, store: store,
                      serial: serial, audit: audit)
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
        let fields = Fields(checker, node, path, allowed: ["session", "client", "dedupe", "upstreams", "inventory", "admin"])
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
        guard let session, let client, let dedupe, let upstreams, let inventory, adminOK else { return nil }
        return AppPolicy(id: id, session: session, client: client, dedupe: dedupe, upstreams: upstreams, inventory: inventory, admin: admin)
    }

    // MARK: session

    static let jwtSessionKeys = ["type", "header", "cookie", "algorithms", "jwks_file", "jwks_url", "jwks_refresh", "hmac_secret",
                                 "issuer", "audience", "contact_claim", "leeway", "verified_cache"]
    static let introspectSessionKeys = ["type", "url", "client_auth", "header", "cookie", "contact_field", "cache_ttl", "timeout"]

    func session(_ node: YAMLNode, _ path: String) -> AppSession? {
        // Each type has its own keys; with a type that is no known one, its keys cannot be judged.
        let typeNode = Self.rawValue(of: "type", in: node)
        let allowed: [String]?
        if typeNode == nil || typeNode?.scalar == "jwt" {
            allowed = Self.jwtSessionKeys
        } else if typeNode?.scalar == "introspect" {
            allowed = Self.introspectSessionKeys
        } else {
            allowed = nil
        }
        let fields = Fields(checker, node, path, allowed: allowed)
        guard let typeNode = fields.required("type"), let type = checker.choice(typeNode, fields.at("type"), ["jwt", "introspect"]) else {
            return nil
        }
        if type == "introspect" { return introspection(fields, path).map(AppSession.introspect) }
        return jwtSession(fields, path).map(AppSession.jwt)
    }

    /// `type: introspect`: `url` and `client_auth` required, the token read from exactly one of
    /// `header` (default `Authorization`) or `cookie`, `contact_field` required, `cache_ttl`
    /// `0s`..`1h` in whole seconds (default `60s`), `timeout` `50ms`..`10s` (default `500ms`).
    func introspection(_ fields: Fields, _ path: String) -> IntrospectionPolicy? {
        var ok = true
        let url = fields.required("url").flatMap { identityProviderURL($0, fields.at("url")) }
        let clientAuth = fields.required("client_auth").flatMap { self.clientAuth($0, fields.at("client_auth")) }
        var source: IntrospectionPolicy.TokenSource? = .header("Authorization")
        switch (fields["header"], fields["cookie"]) {
        case (_?, let cookie?):
            checker.report(cookie.mark, fields.at("cookie"), "give header or cookie, not both: an introspected token is read from one place")
            ok = false
        case (let header?, nil):
            source = headerName(header, fields.at("header")).map(IntrospectionPolicy.TokenSource.header)
        case (nil, let cookie?):
            source = cookieName(cookie, fields.at("cookie")).map(IntrospectionPolicy.TokenSource.cookie)
        case (nil, nil):
            break
        }
        let contactField = fields.required("contact_field").flatMap { checker.string($0, fields.at("contact_field")) }
        var ttl: Int? = 60
        if let node = fields["cache_ttl"] {
            ttl = checker.wholeSeconds(node, fields.at("cache_ttl"), min: 0, max: 3_600_000)
        }
        var timeout: Int? = 500
        if let node = fields["timeout"] { timeout = checker.duration(node, fields.at("timeout"), min: 50, max: 10_000) }
        guard ok, let url, let clientAuth, let source, let contactField, let ttl, let timeout else { return nil }
        return IntrospectionPolicy(url: url, clientAuth: clientAuth, source: source, contactField: contactField,
                                   cacheTTLSeconds: ttl, timeoutMillis: timeout)
    }

    /// `{bearer: SECRET}` or `{basic: {user: NAME, password: SECRET}}`, exactly one.
    func clientAuth(_ node: YAMLNode, _ path: String) -> IntrospectionPolicy.ClientAuth? {
        let fields = Fields(checker, node, path, allowed: ["bearer", "basic"])
        guard fields.isMapping else { return nil }
        guard fields.keys.count == 1 else {
            if fields.keys.count > 1 {
                checker.report(fields.keys[1].mark, path, "give exactly one of bearer or basic")
            } else if fields.isClean {
                checker.report(fields.mark, path, "give one of bearer: {env: NAME} or basic: {user: NAME, password: {env: NAME}}")
            }
            return nil
        }
        if let bearer = fields["bearer"] {
            return checker.secret(bearer, fields.at("bearer")).map(IntrospectionPolicy.ClientAuth.bearer)
        }
        guard let basicNode = fields["basic"] else { return nil }
        let basic = Fields(checker, basicNode, fields.at("basic"), allowed: ["user", "password"])
        guard basic.isMapping else { return nil }
        var user: String?
        if let node = basic.required("user"), let text = checker.string(node, basic.at("user")) {
            // RFC 7617, section 2: the user-id cannot contain a colon; visible ASCII keeps it unambiguous.
            if text.utf8.count <= 128, text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ":") }) {
                user = text
            } else {
                checker.report(node.mark, basic.at("user"), "expected 1 to 128 visible ASCII characters without ':'")
            }
        }
        let password = basic.required("password").flatMap { checker.secret($0, basic.at("password")) }
        guard let user, let password else { return nil }
        return .basic(user: user, password: password)
    }

    func jwtSession(_ fields: Fields, _ path: String) -> SessionPolicy? {
        var ok = true
        var header = fields["header"].flatMap { headerName($0, fields.at("header")) }
        let cookie = fields["cookie"].flatMap { cookieName($0, fields.at("cookie")) }
        if (fields["header"] != nil && header == nil) || (fields["cookie"] != nil && cookie == nil) { ok = false }
        if fields["header"] == nil && fields["cookie"] == nil { header = "Authorization" }

        let algorithms = fields.required("algorithms").flatMap { self.algorithms($0, fields.at("algorithms")) }
        let keysValue = sessionKeys(fields, path, algorithms: algorithms)
        let issuer = fields["issuer"].flatMap { checker.string($0, fields.at("issuer")) }
        let audience = fields["audience"].flatMap { checker.string($0, fields.at("audience")) }
        if (fields["issuer"] != nil && issuer == nil) || (fields["audience"] != nil && audience == nil) { ok = false }
        var contactClaim: String? = "sub"
        if let node = fields["contact_claim"] { contactClaim = checker.string(node, fields.at("contact_claim")) }
        var leeway: Int? = 30
        if let node = fields["leeway"] {
            leeway = checker.wholeSeconds(node, fields.at("leeway"), min: 0, max: 300_000)
        }
        var verifiedCache: Int? = SessionPolicy.defaultVerifiedCache
        if let node = fields["verified_cache"] {
            verifiedCache = checker.int(node, fields.at("verified_cache"), in: 0...1_000_000)
        }
        guard ok, let algorithms, let keysValue, let contactClaim, let leeway, let verifiedCache else { return nil }
        return SessionPolicy(header: header, cookie: cookie, algorithms: algorithms, keys: keysValue, issuer: issuer,
                             audience: audience, contactClaim: contactClaim, leewaySeconds: leeway, verifiedCache: verifiedCache)
    }

    /// One of `hmac_secret` (HS256), `jwks_file` or `jwks_url` (RS256/ES256); `jwks_url` may name
    /// a `jwks_file` as its fallback, and only it takes `jwks_refresh`.
    func sessionKeys(_ fields: Fields, _ path: String, algorithms: [JWTAlgorithm]?) -> SessionPolicy.Keys? {
        let hs256 = algorithms?.contains(.hs256) ?? false
        if let hmac = fields["hmac_secret"] {
            if fields["jwks_file"] != nil || fields["jwks_url"] != nil {
                checker.report(hmac.mark, fields.at("hmac_secret"), "give exactly one of jwks_file, jwks_url or hmac_secret")
                return nil
            }
            guard let secret = checker.secret(hmac, fields.at("hmac_secret")) else { return nil }
            if let algorithms, algorithms != [.hs256] {
                checker.report(hmac.mark, fields.at("hmac_secret"),
                               "hmac_secret works only with algorithms [HS256]; RS256 and ES256 need jwks_file or jwks_url")
                return nil
            }
            return .hmacSecret(secret)
        }
        if fields["jwks_url"] == nil, let refresh = fields["jwks_refresh"] {
            checker.report(refresh.mark, fields.at("jwks_refresh"), "jwks_refresh needs jwks_url")
            return nil
        }
        var file: String?
        if let jwks = fields["jwks_file"] {
            guard let value = checker.absolutePath(jwks, fields.at("jwks_file")) else { return nil }
            if hs256 {
                checker.report(jwks.mark, fields.at("jwks_file"),
                               "jwks_file cannot be used with HS256: public keys must never be usable as HMAC secrets; use hmac_secret with algorithms [HS256]")
                return nil
            }
            // `policy check` reads the file and reports on it here.
            checker.locate(jwks.mark, fields.at("jwks_file"))
            file = value
        }
        guard let urlNode = fields["jwks_url"] else {
            guard let file else {
                checker.report(fields.mark, path, "missing required key: give one of jwks_file, jwks_url or hmac_secret")
                return nil
            }
            return .jwksFile(file)
        }
        guard let url = identityProviderURL(urlNode, fields.at("jwks_url")) else { return nil }
        if hs256 {
            checker.report(urlNode.mark, fields.at("jwks_url"),
                           "jwks_url cannot be used with HS256: public keys must never be usable as HMAC secrets; use hmac_secret with algorithms [HS256]")
            return nil
        }
        var refresh = 600
        if let node = fields["jwks_refresh"] {
            guard let millis = checker.duration(node, fields.at("jwks_refresh"), min: 60_000, max: 86_400_000) else { return nil }
            guard millis % 1000 == 0 else {
                checker.report(node.mark, fields.at("jwks_refresh"), "must be a whole number of seconds")
                return nil
            }
            refresh = millis / 1000
        }
        return .jwksURL(SessionPolicy.JWKSURL(url: url, refreshSeconds: refresh, fallbackFile: file))
    }

    /// A URL PushWarden itself calls at the identity provider (JWKS, introspection): https, or http
    /// to a loopback host only; no credentials or fragment. A query is kept.
    func identityProviderURL(_ node: YAMLNode, _ path: String) -> String? {
        guard let (text, parts) = httpsOrLoopbackURL(node, path, credentials: "") else { return nil }
        guard parts.fragment == nil else {
            checker.report(node.mark, path, "a URL must not have a fragment (#)")
            return nil
        }
        return text
    }

    /// The rules every URL PushWarden calls shares: absolute, no credentials (`credentials` is
    /// appended to that refusal), https or http to a loopback host.
    private func httpsOrLoopbackURL(_ node: YAMLNode, _ path: String, credentials: String) -> (String, URLParts)? {
        guard let text = checker.string(node, path) else { return nil }
        let parts: URLParts
        switch URLParts.parse(text) {
        case .failure(.credentials):
            checker.report(node.mark, path, "a URL must not carry credentials (user:password@)" + credentials)
            return nil
        case .failure(.malformed):
            checker.report(node.mark, path, "expected an absolute URL like https://host/path")
            return nil
        case .success(let value):
            parts = value
        }
        switch parts.scheme {
        case "https":
            break
        case "http":
            guard parts.isLoopback else {
                checker.report(node.mark, path, "plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https")
                return nil
            }
        default:
            checker.report(node.mark, path, "URL scheme must be https (or http to a loopback host)")
            return nil
        }
        return (text, parts)
    }

    func algorithms(_ node: YAMLNode, _ path: String) -> [JWTAlgorithm]? {
        guard let items = checker.list(node, path) else { return nil }
        if items.isEmpty {
            checker.report(node.mark, path, "list at least one algorithm (HS256, RS256, ES256)")
            return nil
        }
        var result: [JWTAlgorithm] = []
        var ok = true
        for (index, item) in items.enumerated() {
            let at = Checker.index(path, index)
            guard let text = checker.string(item, at) else { ok = false; continue }
            if text.lowercased() == "none" {
                checker.report(item.mark, at, "algorithm 'none' is refused: unsigned tokens would let any caller choose whose contact they act as")
                ok = false
                continue
            }
            guard let algorithm = JWTAlgorithm(rawValue: text) else {
                checker.report(item.mark, at, "invalid value '\(Checker.clip(text))'; expected one of: HS256, RS256, ES256")
                ok = false
                continue
            }
            if result.contains(algorithm) {
                checker.report(item.mark, at, "'\(text)' is listed twice")
                ok = false
                continue
            }
            result.append(algorithm)
        }
        return ok ? result : nil
    }

    func headerName(_ node: YAMLNode, _ path: String) -> String? {
        guard let name = checker.string(node, path) else { return nil }
        guard name.utf8.allSatisfy(ByteClass.isToken) else {
            checker.report(node.mark, path, "expected an HTTP header name (letters, digits and -)")
            return nil
        }
        return name
    }

    func cookieName(_ node: YAMLNode, _ path: String) -> String? {
        guard let name = checker.string(node, path) else { return nil }
        guard name.utf8.allSatisfy(ByteClass.isToken) else {
            checker.report(node.mark, path, "expected a cookie name (letters, digits, - and _)")
            return nil
        }
        return name
    }

    // MARK: client

    func client(_ node: YAMLNode, _ path: String) -> ClientPolicy? {
        let fields = Fields(checker, node, path,
                            allowed: ["platforms", "contact_id", "unknown_fields", "max_body", "max_events", "rate_limits",
                                      "max_installations"])
        guard fields.isMapping else { return nil }
        let platforms = fields.required("platforms").flatMap { self.platforms($0, fields.at("platforms")) }
        var contactID: ClientPolicy.ContactIDMode? = .verify
        if let node = fields["contact_id"] {
            contactID = checker.choice(node, fields.at("contact_id"), ["verify", "reject"]).flatMap(ClientPolicy.ContactIDMode.init)
        }
        var unknownFields: ClientPolicy.UnknownFields? = .reject
        if let node = fields["unknown_fields"] {
            unknownFields = checker.choice(node, fields.at("unknown_fields"), ["reject", "drop"]).flatMap(ClientPolicy.UnknownFields.init)
        }
        var maxBody: Int? = 16 * 1024
        if let node = fields["max_body"] { maxBody = checker.size(node, fields.at("max_body"), min: 1024, max: 1024 * 1024) }
        var maxEvents: Int? = 100
        if let node = fields["max_events"] { maxEvents = checker.int(node, fields.at("max_events"), in: 1...1000) }
        var rateLimits: [String: ClientPolicy.RateLimit]? = [:]
        if let node = fields["rate_limits"] {
            let limits = Fields(checker, node, fields.at("rate_limits"), allowed: ["register", "unregister", "events"])
            var parsed: [String: ClientPolicy.RateLimit] = [:]
            var ok = limits.isMapping
            for (route, _) in limits.keys {
                if let value = limits[route], let rate = checker.rate(value, limits.at(route)) {
                    parsed[route] = rate
                } else {
                    ok = false
                }
            }
            rateLimits = ok ? parsed : nil
        }
        var maxInstallations: Int?? = .some(nil)
        if let node = fields["max_installations"] {
            maxInstallations = checker.int(node, fields.at("max_installations"), in: 1...1000).map { .some($0) }
        }
        guard let platforms, let contactID, let unknownFields, let maxBody, let maxEvents, let rateLimits,
              let maxInstallations else { return nil }
        return ClientPolicy(platforms: platforms, contactID: contactID, unknownFields: unknownFields, maxBody: maxBody,
                            maxEvents: maxEvents, rateLimits: rateLimits, maxInstallations: maxInstallations)
    }

    func platforms(_ node: YAMLNode, _ path: String) -> [Platform]? {
        guard let items = checker.list(node, path) else { return nil }
        if items.isEmpty {
            checker.report(node.mark, path, "list at least one platform (ios, android, web)")
            return nil
        }
        var result: [Platform] = []
        var ok = true
        for (index, item) in items.enumerated() {
            let at = Checker.index(path, index)
            guard let platform = checker.choice(item, at, Platform.allCases.map(\.rawValue)).flatMap(Platform.init) else {
                ok = false
                continue
            }
            if result.contains(platform) {
                checker.report(item.mark, at, "'\(platform.rawValue)' is listed twice")
                ok = false
                continue
            }
            result.append(platform)
        }
        return ok ? result : nil
    }

    // MARK: inventory

    func inventory(_ node: YAMLNode, _ path: String) -> InventoryPolicy? {
        let fields = Fields(checker, node, path, allowed: ["expire_after"])
        guard fields.isMapping else { return nil }
        guard let expire = fields["expire_after"] else { return InventoryPolicy() }
        guard let millis = checker.duration(expire, fields.at("expire_after"), min: 1000, max: nil) else { return nil }
        return InventoryPolicy(expireAfterMillis: millis)
    }

    // MARK: dedupe

    func dedupe(_ node: YAMLNode, _ path: String) -> DedupePolicy? {
        let fields = Fields(checker, node, path, allowed: ["refresh_after"])
        guard fields.isMapping else { return nil }
        guard let refresh = fields["refresh_after"] else { return DedupePolicy(refreshAfterSeconds: 7 * 86_400) }
        guard let millis = checker.duration(refresh, fields.at("refresh_after"), min: 60_000, max: nil) else { return nil }
        return DedupePolicy(refreshAfterSeconds: millis / 1000)
    }

    // MARK: upstreams

    func upstreams(_ node: YAMLNode, _ path: String) -> [UpstreamPolicy]? {
        guard let items = checker.list(node, path) else { return nil }
        if items.isEmpty {
            checker.report(node.mark, path, "declare at least one upstream")
            return nil
        }
        var result: [UpstreamPolicy] = []
        var ok = true
        var names: [String: Int] = [:]
        var primary: (index: Int, name: String)?
        var roleMissing = false
        for (index, item) in items.enumerated() {
            let at = Checker.index(path, index)
            let parsed = upstream(item, at, single: items.count == 1)
            if parsed.roleMissing { roleMissing = true }
            if let name = parsed.name {
                if let first = names[name] {
                    checker.report(parsed.nameMark ?? item.mark, Checker.child(at, "name"),
                                   "upstream name '\(name)' is already used by \(Checker.index(path, first))")
                    ok = false
                } else {
                    names[name] = index
                }
            }
            if parsed.role == .primary {
                if let primary {
                    checker.report(parsed.roleMark ?? item.mark, Checker.child(at, "role"),
                                   "exactly one upstream may have role primary; \(Checker.index(path, primary.index)) ('\(primary.name)') already has it")
                    ok = false
                } else {
                    primary = (index, parsed.name ?? "?")
                }
            }
            if let upstream = parsed.upstream { result.append(upstream) } else { ok = false }
        }
        if primary == nil && !roleMissing && ok {
            checker.report(node.mark, path, "exactly one upstream must have role primary; none has")
            ok = false
        }
        return ok ? result : nil
    }

    struct ParsedUpstream {
        var upstream: UpstreamPolicy?
        var name: String?
        var nameMark: Mark?
        var role: UpstreamPolicy.Role?
        var roleMark: Mark?
        var roleMissing = false
    }

    func upstream(_ node: YAMLNode, _ path: String, single: Bool) -> ParsedUpstream {
        var parsed = ParsedUpstream()
        let providerName = Self.rawValue(of: "provider", in: node)?.scalar
        let allowed = providerName.flatMap { Self.reader(for: $0)?.keys }.map { Self.commonUpstreamKeys + $0 }
        // Without a supported provider its keys cannot be judged: only the provider is reported.
        let fields = Fields(checker, node, path, allowed: allowed)
        guard fields.isMapping else { return parsed }

        if let node = fields.required("name") {
            parsed.nameMark = node.mark
            if let name = checker.string(node, fields.at("name")) {
                if Self.isSafeID(name) {
                    parsed.name = name
                } else {
                    checker.report(node.mark, fields.at("name"), "upstream name must be 1 to 64 characters of a-z, 0-9, _ and -")
                }
            }
        }
        if let node = fields["role"] {
            parsed.roleMark = node.mark
            parsed.role = checker.choice(node, fields.at("role"), ["primary", "shadow"]).flatMap(UpstreamPolicy.Role.init)
        } else if single {
            parsed.role = .primary
        } else {
            checker.report(fields.mark, path, "missing required key 'role' (required when an app has more than one upstream)")
            parsed.roleMissing = true
        }
        var delivery: UpstreamPolicy.Delivery? = .sync
        if let node = fields["delivery"] {
            delivery = checker.choice(node, fields.at("delivery"), ["sync", "queued"]).flatMap(UpstreamPolicy.Delivery.init)
            if delivery == .queued, let name = providerName, let kind = ProviderKind(rawValue: name), kind.traits.needsCallerCredential {
                checker.report(node.mark, fields.at("delivery"), "\(name) takes the user's own session, which PushWarden never stores: delivery must be sync")
                delivery = nil
            }
        }
        var queue: QueuePolicy? = QueuePolicy()
        if let node = fields["queue"] { queue = self.queue(node, fields.at("queue")) }
        var circuit: CircuitPolicy? = CircuitPolicy()
        if let node = fields["circuit"] { circuit = self.circuit(node, fields.at("circuit")) }
        var timeout: Int? = 2000
        if let node = fields["timeout"] { timeout = checker.duration(node, fields.at("timeout"), min: 100, max: 30_000) }
        var retry: RetryPolicy? = RetryPolicy()
        if let node = fields["retry"] { retry = self.retry(node, fields.at("retry")) }
        let provider = fields.required("provider").flatMap { self.provider($0, fields) }

        guard let name = parsed.name, let role = parsed.role, let delivery, let timeout, let retry, let queue, let circuit,
              let provider else {
            return parsed
        }
        parsed.upstream = UpstreamPolicy(name: name, provider: provider, role: role, delivery: delivery,
                                         timeoutMillis: timeout, retry: retry, queue: queue, circuit: circuit)
        return parsed
    }

    /// `{max_age: 24h, claim_after: 30s}`: at least a second each, max_age at most 30 days.
    func queue(_ node: YAMLNode, _ path: String) -> QueuePolicy? {
        let fields = Fields(checker, node, path, allowed: ["max_age", "claim_after"])
        guard fields.isMapping else { return nil }
        var maxAge: Int? = QueuePolicy().maxAgeMillis
        if let node = fields["max_age"] { maxAge = checker.duration(node, fields.at("max_age"), min: 1000, max: 30 * 86_400_000) }
        var claimAfter: Int? = QueuePolicy().claimAfterMillis
        if let node = fields["claim_after"] { claimAfter = checker.duration(node, fields.at("claim_after"), min: 1000, max: 3_600_000) }
        guard let maxAge, let claimAfter else { return nil }
        return QueuePolicy(maxAgeMillis: maxAge, claimAfterMillis: claimAfter)
    }

    /// `{failures: 5, within: 10s, open_for: 30s}`.
    func circuit(_ node: YAMLNode, _ path: String) -> CircuitPolicy? {
        let fields = Fields(checker, node, path, allowed: ["failures", "within", "open_for"])
        guard fields.isMapping else { return nil }
        var failures: Int? = CircuitPolicy().failures
        if let node = fields["failures"] { failures = checker.int(node, fields.at("failures"), in: 1...1000) }
        var within: Int? = CircuitPolicy().withinMillis
        if let node = fields["within"] { within = checker.duration(node, fields.at("within"), min: 100, max: 3_600_000) }
        var openFor: Int? = CircuitPolicy().openForMillis
        if let node = fields["open_for"] { openFor = checker.duration(node, fields.at("open_for"), min: 100, max: 3_600_000) }
        guard let failures, let within, let openFor else { return nil }
        return CircuitPolicy(failures: failures, withinMillis: within, openForMillis: openFor)
    }

    func provider(_ node: YAMLNode, _ fields: Fields) -> ProviderConfig? {
        let path = fields.at("provider")
        guard let name = checker.string(node, path) else { return nil }
        guard let reader = Self.reader(for: name) else {
            checker.report(node.mark, path, "invalid value '\(Checker.clip(name))'; expected one of: \(Self.providers.joined(separator: ", "))")
            return nil
        }
        guard reader.keys != nil else {
            let supported = Self.providerReaders.filter { $0.reader.keys != nil }.map(\.name)
            checker.report(node.mark, path, "provider '\(name)' is not supported in this version; supported: \(supported.joined(separator: ", "))")
            return nil
        }
        return reader.read(self, fields)
    }

    func retry(_ node: YAMLNode, _ path: String) -> RetryPolicy? {
        let fields = Fields(checker, node, path, allowed: ["attempts", "backoff", "max_backoff"])
        guard fields.isMapping else { return nil }
        var attempts: Int? = 3
        if let node = fields["attempts"] { attempts = checker.int(node, fields.at("attempts"), in: 1...10) }
        var backoff: Int? = 200
        if let node = fields["backoff"] { backoff = checker.duration(node, fields.at("backoff"), min: 1, max: 60_000) }
        var maxBackoff: Int? = 2000
        if let node = fields["max_backoff"] { maxBackoff = checker.duration(node, fields.at("max_backoff"), min: 1, max: 60_000) }
        guard let attempts, let backoff, let maxBackoff else { return nil }
        guard backoff <= maxBackoff else {
            checker.report(fields["backoff"]?.mark ?? fields.mark, fields.at("backoff"),
                           "must not exceed max_backoff (\(Values.formatMillis(maxBackoff)))")
            return nil
        }
        return RetryPolicy(attempts: attempts, backoffMillis: backoff, maxBackoffMillis: maxBackoff)
    }

    /// An upstream URL: https, or http to loopback only (the traffic carries provider keys and
    /// contact ids). No credentials, query or fragment; trailing slashes stripped.
    func upstreamURL(_ node: YAMLNode, _ path: String) -> String? {
        guard let (text, parts) = httpsOrLoopbackURL(node, path, credentials: "; use api_key") else { return nil }
        guard parts.query == nil, parts.fragment == nil else {
            checker.report(node.mark, path, "a base path must not have a query (?) or fragment (#)")
            return nil
        }
        var result = Substring(text)
        while result.hasSuffix("/") { result = result.dropLast() }
        return String(result)
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
