/// Renders a loaded policy as plain text for a security reviewer (`pushwarden policy explain`).
///
/// It states what the policy lets happen: who may call, what a client may send and where it goes,
/// what the server adds and from where, which hosts receive data and which secrets are referenced.
/// Secrets appear only as their reference (`env:NAME`, `file:/path`); the policy holds no values.
public enum PolicyExplainer {
    static let registerFields = ["platform", "push_token", "push_service", "web_push_keys", "environment",
                                 "previous_push_token", "installation_id", "app_version", "os_version",
                                 "device_model", "locale", "timezone"]
    static let eventFields = ["type", "message_id", "recipient_id", "occurred_at", "app_state", "deeplink", "action_id"]

    public static func explain(_ policy: Policy) -> String {
        var lines: [String] = []
        let serial = policy.serial.map { ", serial \($0)" } ?? ""
        lines.append("Policy \(policy.sourcePath) (version \(policy.version)\(serial)): \(policy.apps.count) app(s)")
        lines.append(contentsOf: serverToServer(policy))
        lines.append(contentsOf: evidenceTrail(policy.audit))
        lines.append(contentsOf: webhooks(policy.webhooks))
        for app in policy.apps {
            lines.append("")
            lines.append(contentsOf: explain(app))
            if policy.admin != nil || policy.apps.contains(where: { $0.admin != nil }) {
                lines.append("  Server-to-server API: " + reach(app, policy: policy))
            }
        }
        lines.append("")
        lines.append("Store (every app): " + encryptionAtRest(policy.store))
        lines.append("Key names (every app): " + keyNames(policy.store))
        return lines.joined(separator: "\n") + "\n"
    }

    /// Whether push tokens and Web Push secrets are encrypted at rest, naming the keys by
    /// reference only.
    public static func encryptionAtRest(_ store: StorePolicy?) -> String {
        guard let store else {
            return "push tokens and Web Push secrets stored as values (identities, outbox entries, inventory) are NOT encrypted "
                + "at rest: no store.encryption_key (key names are hashes either way)"
        }
        let previous = store.previousEncryptionKeys
        let older = previous.isEmpty ? "no previous keys"
            : "\(previous.count) previous key(s) still open values sealed before a rotation: "
                + previous.map(\.description).joined(separator: ", ")
        return "push tokens and Web Push secrets stored as values (identities, outbox entries, inventory) are encrypted at rest "
            + "(AES-256-GCM) with the key from \(store.encryptionKey) (store.encryption_key); \(older)"
    }

    /// What the store's key names are made of: keyed digests with `store.digest_key` (named by
    /// reference only), plain SHA-256 digests without.
    public static func keyNames(_ store: StorePolicy?) -> String {
        guard let digestKey = store?.digestKey else {
            return "contact ids and push tokens appear in key names (and in the evidence trail) as unkeyed SHA-256 digests: "
                + "a dump can be matched against a list of contact ids; no store.digest_key"
        }
        return "contact ids and push tokens appear in key names (and in the evidence trail) only as keyed digests "
            + "(HMAC-SHA-256) under the key from \(digestKey) (store.digest_key), never rotated"
    }

    /// Whether erasures leave signed receipts, and which key signs them (by reference).
    static func evidenceTrail(_ audit: AuditPolicy?) -> [String] {
        guard let audit else { return ["Evidence trail: none (no audit block); erasures are recorded in the log only"] }
        return [
            "Evidence trail: every erasure appends a receipt (the contact as a hash, each upstream's outcome) to an append-only, "
                + "hash-chained trail in Redis, signed with the Ed25519 key from \(audit.signingKey); `pushwarden audit verify` checks it",
            "  - secret referenced (name only): \(audit.signingKey) (audit signing key)",
        ]
    }

    /// Who may call the server-to-server API (contract section 8), and which app each token
    /// reaches: the operator's (`admin.token`) every app, an app's own (`apps.<id>.admin.token`)
    /// that app only. Tokens are named by reference.
    static func serverToServer(_ policy: Policy) -> [String] {
        let routes = "GET and DELETE /v1/apps/{app}/contacts/{contact}/installations"
        let appTokens = policy.apps.filter { $0.admin != nil }
        guard policy.admin != nil || !appTokens.isEmpty else {
            return ["Server-to-server API: disabled (no admin token in the policy); \(routes) and POST /v1/apps/{app}/tokens/dead "
                    + "answer 404 on both listeners"]
        }
        var out = [
            "Server-to-server API: enabled, on the admin listener only (the client listener answers 404 there)",
            "  - who may call: the bearer of an admin token (Authorization: Bearer <token>; compared in constant time; "
                + "at least \(AdminPolicy.minimumTokenBytes) bytes; no two tokens alike)",
        ]
        if let admin = policy.admin {
            out.append("  - the operator's admin token from \(admin.token) (admin.token) reaches every app")
        } else {
            out.append("  - no operator token (no top-level admin block): an app is reached with its own token only")
        }
        for app in policy.apps {
            out.append("  - app '\(app.id)': " + reach(app, policy: policy))
        }
        out.append("  - \(routes): list a contact's installations (tokens as short hashes); "
                   + "erase the contact (unregistered at every upstream that holds an installation, then forgotten; one audit log line)")
        out.append("  - GET /v1/apps/{app}/coverage and GET /v1/apps/{app}/installations: how many installations each upstream holds; "
                   + "every installation of the app in pages, each with its contact id in clear (tokens as short hashes)")
        out.append("  - POST /v1/apps/{app}/tokens/dead: the backend's sender reports tokens it found dead; each is removed as an erasure "
                   + "removes one installation, within the app's mass-death guard (see each app's dead-token reports)")
        if let admin = policy.admin { out.append("  - secret referenced (name only): \(admin.token) (admin token)") }
        return out
    }

    /// Which tokens reach `app`'s server-to-server routes, completing "app 'shop': ".
    static func reach(_ app: AppPolicy, policy: Policy) -> String {
        switch (policy.admin, app.admin) {
        case (_?, let own?):
            return "the operator's token and its own from \(own.token) (apps.\(app.id).admin.token), which reaches this app only "
                + "(sent for any other app it gets the same 401 as a wrong token)"
        case (nil, let own?):
            return "its own token from \(own.token) (apps.\(app.id).admin.token), which reaches this app only "
                + "(sent for any other app it gets the same 401 as a wrong token)"
        case (_?, nil):
            return "the operator's token only"
        case (nil, nil):
            return "no token (its routes answer 401 to every caller)"
        }
    }

    static func explain(_ app: AppPolicy) -> [String] {
        var out: [String] = []
        let base = "/v1/apps/\(app.id)"
        out.append("App '\(app.id)' (routes under \(base))")

        out.append("  Who may call:")
        switch app.session {
        case .jwt(let session):
            out.append(contentsOf: explain(session))
            if let logout = session.backchannelLogout { out.append(contentsOf: explain(logout, base: base)) }
        case .introspect(let introspection): out.append(contentsOf: explain(introspection))
        }

        let client = app.client
        let allUpstreams = app.upstreams.map { "'\($0.name)'" }.joined(separator: ", ")
        out.append("  What a client may send:")
        out.append("    - platforms: \(client.platforms.map(\.rawValue).joined(separator: ", "))")
        out.append("    - POST \(base)/installations: \(registerFields.joined(separator: ", ")); forwarded to upstream(s) \(allUpstreams)")
        switch client.contactID {
        case .verify: out.append("      contact_id: accepted only when equal to the session's contact, never trusted")
        case .reject: out.append("      contact_id: refused outright")
        }
        out.append("    - POST \(base)/installations/unregister: push_token; forwarded to the upstreams the token was registered with")
        let eventUpstreams = app.upstreams.filter { $0.provider.traits.takesEvents }.map { "'\($0.name)'" }
        out.append("    - POST \(base)/events: up to \(client.maxEvents) events of \(eventFields.joined(separator: ", ")); "
                   + (eventUpstreams.isEmpty ? "no upstream takes events: accepted and dropped" : "forwarded to upstream(s) \(eventUpstreams.joined(separator: ", "))"))
        switch client.unknownFields {
        case .reject: out.append("    - any other field: refused (400 unknown_field)")
        case .drop: out.append("    - any other field: dropped, never forwarded")
        }
        out.append("    - request bodies up to \(Values.formatBytes(client.maxBody))")
        if client.rateLimits.isEmpty {
            out.append("    - rate limits: none")
        } else {
            let limits = client.rateLimits.sorted { $0.key < $1.key }.map { route, limit -> String in
                let unit = limit.perSeconds == 1 ? "s" : limit.perSeconds == 60 ? "min" : limit.perSeconds == 3600 ? "h" : "\(limit.perSeconds)s"
                return "\(route) \(limit.requests)/\(unit)"
            }
            out.append("    - rate limits per contact: \(limits.joined(separator: ", "))")
        }

        out.append("  Server-held values injected:")
        out.append("    - contact_id: \(contactSource(app.session))")
        for upstream in app.upstreams {
            for value in upstream.provider.settings.injected {
                out.append("    - upstream '\(upstream.name)': \(value)")
            }
        }

        out.append("  Upstreams (who receives data):")
        for upstream in app.upstreams {
            let role = upstream.role == .primary ? "primary, answers the client" : "shadow, best effort"
            var timing = "timeout \(Values.formatMillis(upstream.timeoutMillis)), \(upstream.retry.attempts) attempt(s)"
            if upstream.delivery == .queued {
                timing += "; queued deliveries kept in the Redis outbox for up to \(Values.formatMillis(upstream.queue.maxAgeMillis)) "
                    + "(then dead-lettered), taken over from a stopped replica after \(Values.formatMillis(upstream.queue.claimAfterMillis))"
            } else {
                timing += "; an unregister that fails is queued in the Redis outbox (with the Redis store)"
            }
            let circuit = upstream.circuit
            timing += "; circuit opens after \(circuit.failures) failure(s) within \(Values.formatMillis(circuit.withinMillis)) "
                + "for \(Values.formatMillis(circuit.openForMillis))"
            let settings = upstream.provider.settings
            if let endpoint = settings.endpoint {
                out.append("    - '\(upstream.name)': \(settings.summary) (host \(hostOf(endpoint))); \(role); \(upstream.delivery.rawValue) delivery; \(timing)")
            } else {
                out.append("    - '\(upstream.name)': \(settings.summary); \(role)")
            }
        }
        var hosts = app.upstreams.compactMap { $0.provider.settings.endpoint.map(hostOf) }
        // The introspection endpoint receives every client's session token.
        if let introspection = app.session.introspection { hosts.append(hostOf(introspection.url)) }
        out.append("  Hosts receiving data: " + (hosts.isEmpty ? "none (dry run only)" : uniqued(hosts).joined(separator: ", ")))

        var secrets: [String] = []
        if let use = sessionSecret(app.session) { secrets.append("\(use.reference) (\(use.purpose))") }
        if let admin = app.admin { secrets.append("\(admin.token) (this app's admin token)") }
        for upstream in app.upstreams {
            for use in upstream.provider.settings.secrets {
                secrets.append("\(use.reference) (upstream '\(upstream.name)' \(use.purpose))")
            }
        }
        out.append("  Secrets referenced (names only): " + (secrets.isEmpty ? "none" : secrets.joined(separator: ", ")))
        out.append("  Dedupe: an unchanged registration is re-sent at most every \(Values.formatMillis(app.dedupe.refreshAfterSeconds * 1000))")
        out.append("  Inventory: " + inventorySummary(app))
        out.append("  Dead-token reports: " + deadTokenSummary(app))
        out.append("  Import (pushwarden import): " + importSummary(app))
        return out
    }

    /// Where `pushwarden import` sends an app's lines, and the upstreams it cannot reach.
    public static func importSummary(_ app: AppPolicy) -> String {
        let caller = app.upstreams.filter { $0.provider.traits.needsCallerCredential }
        if let primary = app.upstreams.first(where: { $0.role == .primary }), primary.provider.traits.needsCallerCredential {
            return "not possible: the primary '\(primary.name)' takes each user's own credential"
        }
        let queued = app.upstreams.filter { !$0.provider.traits.needsCallerCredential }.map { "'\($0.name)'" }
        var text = "each line (contact_id and a registration's fields) validated as a client registration, queued at "
            + queued.joined(separator: ", ") + " through the Redis outbox and kept in the inventory"
        if !caller.isEmpty {
            text += "; skipped: " + caller.map { "'\($0.name)'" }.joined(separator: ", ") + " (takes each user's own credential)"
        }
        return text
    }

    /// What the inventory keeps for the app and when it lets installations go.
    static func inventorySummary(_ app: AppPolicy) -> String {
        var parts = ["each contact's installations (token, platform, push service, upstreams holding it, first and last seen)"]
        if let cap = app.client.maxInstallations {
            parts.append("at most \(cap) per contact (one more evicts the least recently seen, unregistered upstream)")
        } else {
            parts.append("no cap per contact")
        }
        if let expire = app.inventory.expireAfterMillis {
            parts.append("an installation not registered again for \(Values.formatMillis(expire)) is unregistered upstream and forgotten")
        } else {
            parts.append("installations never expire")
        }
        return parts.joined(separator: "; ")
    }

    /// What a dead-token report may remove before the mass-death guard holds the rest.
    static func deadTokenSummary(_ app: AppPolicy) -> String {
        "the backend's sender may report tokens it found dead (server-to-server API); within one minute they remove at most "
            + "\(app.deadTokens.maxShareText) of the app's installations (dead_tokens.max_share) or \(app.deadTokens.minCount) "
            + "(dead_tokens.min_count), whichever is more; further reports are held in quarantine until an operator releases or drops them"
    }

    static func explain(_ session: SessionPolicy) -> [String] {
        var out: [String] = []
        var sources: [String] = []
        if let header = session.header { sources.append("header \(header) as \"Bearer <token>\"") }
        if let cookie = session.cookie {
            sources.append(session.header == nil ? "cookie \(cookie)" : "cookie \(cookie) when the header is absent")
        }
        out.append("    - a signed JWT session token, read from \(sources.joined(separator: ", then "))")
        out.append("    - accepted algorithms: \(session.algorithms.map(\.rawValue).joined(separator: ", ")) (any other, and 'none', is refused)")
        switch session.keys {
        case .hmacSecret(let ref): out.append("    - signature checked with the shared HMAC secret from \(ref)")
        case .jwksFile(let path): out.append("    - signature checked with the public keys in the JWKS file \(path) (selected by kid)")
        case .jwksURL(let jwks):
            let fallback = jwks.fallbackFile.map { "; the JWKS file \($0) when the first fetch fails" } ?? ""
            out.append("    - signature checked with the public keys fetched from \(jwks.url) (selected by kid), refreshed every "
                       + "\(Values.formatMillis(jwks.refreshSeconds * 1000)) unless its Cache-Control max-age says otherwise\(fallback)")
        }
        out.append("    - issuer (iss): " + (session.issuer.map { "must be \($0)" } ?? "not checked"))
        out.append("    - audience (aud): " + (session.audience.map { "must include \($0)" } ?? "not checked"))
        out.append("    - the contact is the claim '\(session.contactClaim)'; clock leeway \(Values.formatMillis(session.leewaySeconds * 1000))")
        if session.verifiedCache > 0 {
            out.append("    - up to \(session.verifiedCache) accepted sessions are kept by a hash of the token: the same token again is not verified again before its exp; a key refresh empties them")
        } else {
            out.append("    - every token is verified on every request (verified_cache: 0)")
        }
        return out
    }

    /// What the identity provider may do through `backchannel_logout`, and what is trusted.
    static func explain(_ logout: BackchannelLogoutPolicy, base: String) -> [String] {
        let removes = logout.scope == .session
            ? "every installation registered under that session (a token with only sub: every installation of that contact)"
            : "every installation of that contact (scope: contact)"
        return [
            "    - back-channel logout (OpenID Connect): the identity provider may POST a logout token to \(base)/backchannel-logout on the client listener;",
            "      it is verified with the same keys and algorithms as sessions, iss and aud as above, iat within the leeway, the back-channel logout event,",
            "      sid or sub, no nonce, and a jti never seen before (shared across replicas); each registration keeps the session claim '\(logout.sidClaim)'"
                + " (sealed with the token when store.encryption_key is set)",
            "      a valid logout unregisters, at every upstream that holds it, \(removes), and forgets it",
        ]
    }

    static func explain(_ introspection: IntrospectionPolicy) -> [String] {
        let ttl = introspection.cacheTTLSeconds == 0 ? "not cached" : "cached for \(Values.formatMillis(introspection.cacheTTLSeconds * 1000))"
        return [
            "    - an opaque session token, read from \(tokenSource(introspection.source))",
            "    - checked by the app backend's introspection endpoint (RFC 7662) at \(introspection.url) (host \(hostOf(introspection.url))), "
                + "which receives the token in a form POST; PushWarden authenticates there with \(clientAuth(introspection.clientAuth))",
            "    - only an answer with \"active\": true and a contact in '\(introspection.contactField)' is a session; "
                + "answers \(ttl) (never past their exp), refusals for 5s, keyed by a hash of the token; "
                + "each call is bounded by \(Values.formatMillis(introspection.timeoutMillis)); endpoint down and nothing cached: 503",
        ]
    }

    static func tokenSource(_ source: IntrospectionPolicy.TokenSource) -> String {
        switch source {
        case .header(let name): return "header \(name) as \"Bearer <token>\""
        case .cookie(let name): return "cookie \(name)"
        }
    }

    static func clientAuth(_ auth: IntrospectionPolicy.ClientAuth) -> String {
        switch auth {
        case .bearer(let ref): return "a bearer credential from \(ref)"
        case .basic(let user, let ref): return "HTTP Basic as user \(user), password from \(ref)"
        }
    }

    /// Where the contact id comes from, completing "contact_id: ".
    static func contactSource(_ session: AppSession) -> String {
        switch session {
        case .jwt(let jwt): return "from the session claim '\(jwt.contactClaim)'"
        case .introspect(let introspection): return "from the introspection answer's '\(introspection.contactField)'"
        }
    }

    /// The secret a session check uses, with what it is for.
    static func sessionSecret(_ session: AppSession) -> (reference: SecretRef, purpose: String)? {
        switch session {
        case .jwt(let jwt):
            if case .hmacSecret(let ref) = jwt.keys { return (ref, "session HMAC secret") }
            return nil
        case .introspect(let introspection):
            return (introspection.clientAuth.secret, "session introspection \(introspection.clientAuth.kind) credential")
        }
    }

    static func hostOf(_ url: String) -> String {
        if case .success(let parts) = URLParts.parse(url) { return parts.hostAndPort }
        return url
    }

    static func uniqued(_ items: [String]) -> [String] {
        var seen: [String] = []
        for item in items where !seen.contains(item) { seen.append(item) }
        return seen
    }
}
