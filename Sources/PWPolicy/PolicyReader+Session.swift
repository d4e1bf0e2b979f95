import PWCore
import YAMLKit

/// `apps.<id>.session`: JWT keys and algorithms, or introspection, and the identity provider's URLs.
extension PolicyReader {
    static let jwtSessionKeys = ["type", "header", "cookie", "algorithms", "jwks_file", "jwks_url", "jwks_refresh", "hmac_secret",
                                 "issuer", "audience", "contact_claim", "leeway", "verified_cache", "backchannel_logout"]
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
        if type == "introspect" {
            if let logout = Self.rawValue(of: "backchannel_logout", in: node) {
                // Besides the unknown key: why it cannot be had here.
                checker.report(logout.mark, Checker.child(path, "backchannel_logout"),
                               "backchannel_logout needs a jwt session: logout tokens are verified with the session's own keys, which an introspected session has none of")
            }
            return introspection(fields, path).map(AppSession.introspect)
        }
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
        var logout: BackchannelLogoutPolicy?
        if let node = fields["backchannel_logout"] {
            logout = backchannelLogout(node, fields.at("backchannel_logout"))
            checker.locate(node.mark, fields.at("backchannel_logout"))
            if logout == nil { ok = false }
            // A logout token is judged by the session's iss and aud: without them any token the
            // keys sign (another client's, say) would end sessions here.
            for key in ["issuer", "audience"] where fields[key] == nil {
                checker.report(node.mark, fields.at("backchannel_logout"),
                               "backchannel_logout needs session.\(key): a logout token is accepted only from the session's issuer, for its audience")
                ok = false
            }
        }
        guard ok, let algorithms, let keysValue, let contactClaim, let leeway, let verifiedCache else { return nil }
        return SessionPolicy(header: header, cookie: cookie, algorithms: algorithms, keys: keysValue, issuer: issuer,
                             audience: audience, contactClaim: contactClaim, leewaySeconds: leeway, verifiedCache: verifiedCache,
                             backchannelLogout: logout)
    }

    /// `backchannel_logout: {sid_claim: sid, scope: session}`, both optional (those defaults).
    func backchannelLogout(_ node: YAMLNode, _ path: String) -> BackchannelLogoutPolicy? {
        let fields = Fields(checker, node, path, allowed: ["sid_claim", "scope"])
        guard fields.isMapping else { return nil }
        var result = BackchannelLogoutPolicy()
        var ok = fields.isClean
        if let claim = fields["sid_claim"] {
            if let name = checker.string(claim, fields.at("sid_claim")) { result.sidClaim = name } else { ok = false }
        }
        if let scope = fields["scope"] {
            if let text = checker.choice(scope, fields.at("scope"), BackchannelLogoutPolicy.Scope.allCases.map(\.rawValue)),
               let value = BackchannelLogoutPolicy.Scope(rawValue: text) {
                result.scope = value
            } else {
                ok = false
            }
        }
        return ok ? result : nil
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
    func httpsOrLoopbackURL(_ node: YAMLNode, _ path: String, credentials: String) -> (String, URLParts)? {
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
}
