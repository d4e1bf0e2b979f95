/// Renders a loaded policy as one self-contained HTML page (`pushwarden policy explain --format html`):
/// a data-flow diagram per app as inline SVG, beside the text `PolicyExplainer` prints.
///
/// The page loads nothing: no script, no font, no image, no style sheet from elsewhere; its only
/// style is the inline `<style>` block, and its Content-Security-Policy says so to the browser.
/// Every string taken from the policy is escaped with `escape` before it reaches HTML or SVG text
/// or an attribute. Secrets appear only as their reference (`env:NAME`, `file:/path`): the policy
/// holds no values.
public enum PolicyExplainerHTML {
    /// How long an identity a provider handed back is kept (`IdentityStore.ttlSeconds` in the
    /// PushWarden module, which this module cannot see; a test keeps the two equal).
    public static let identityTTLSeconds = 400 * 86_400

    public static func render(_ policy: Policy) -> String {
        let text = PolicyExplainer.explain(policy)
        var page = """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>PushWarden policy \(escape(policy.sourcePath))</title>
            <style>\(css)</style>
            </head>
            <body>
            <header><h1>PushWarden policy <code>\(escape(policy.sourcePath))</code></h1>
            <p>Version \(policy.version)\(policy.serial.map { ", serial \($0)" } ?? ""), \(policy.apps.count) app(s). Where data comes from, what the server adds, which hosts receive it and what is kept. Secrets are shown by name only.</p>
            \(serverToServer(policy))
            \(evidenceTrail(policy.audit))
            \(webhooks(policy.webhooks))</header>
            <main>
            <div class="diagrams">

            """
        for (index, app) in policy.apps.enumerated() {
            page += "<section>\n<h2>App <code>\(escape(app.id))</code></h2>\n"
            page += diagram(app, index: index, store: policy.store)
            page += legend
            page += "</section>\n"
        }
        page += """
            </div>
            <div class="text">
            <h2><code>pushwarden policy explain</code></h2>
            <pre>\(escape(text))</pre>
            </div>
            </main>
            </body>
            </html>

            """
        return page
    }

    /// Who may call the server-to-server API: one paragraph under the page's title.
    static func evidenceTrail(_ audit: AuditPolicy?) -> String {
        guard let audit else { return "<p class=\"s2s\">Evidence trail: <strong>none</strong> (no <code>audit</code> block).</p>" }
        return "<p class=\"s2s\">Evidence trail: every erasure appends a receipt, hash-chained and signed with the Ed25519 key from "
            + "<code class=\"k secret\">\(escape(audit.signingKey.description))</code>, to an append-only trail in Redis.</p>"
    }

    /// Who may call the server-to-server API, and which app each token reaches: one paragraph
    /// under the page's title, and a list when apps have tokens of their own.
    static func serverToServer(_ policy: Policy) -> String {
        let appTokens = policy.apps.compactMap { app in app.admin.map { (app.id, $0) } }
        guard policy.admin != nil || !appTokens.isEmpty else {
            return "<p class=\"s2s\">Server-to-server API: <strong>disabled</strong> (no admin token in the policy); its routes answer 404.</p>"
        }
        var who: String
        if let admin = policy.admin {
            who = "for the bearer of the operator's admin token from <code class=\"k secret\">\(escape(admin.token.description))</code> "
                + "(every app)"
        } else {
            who = "with no operator token (each app only with its own)"
        }
        if !appTokens.isEmpty { who += " and of each app's own token (that app only; for another app the same 401 as a wrong token)" }
        var html = "<p class=\"s2s\">Server-to-server API: <strong>enabled</strong> on the admin listener only, \(who): list and erase a "
            + "contact's installations (<code>GET</code> and <code>DELETE /v1/apps/{app}/contacts/{contact}/installations</code>); "
            + "count each upstream's installations (<code>GET /v1/apps/{app}/coverage</code>), export every installation of the app "
            + "with its contact id in clear (<code>GET /v1/apps/{app}/installations</code>) and "
            + "report dead tokens (<code>POST /v1/apps/{app}/tokens/dead</code>, within each app's mass-death guard).</p>"
        if !appTokens.isEmpty {
            html += "\n<ul class=\"s2s\">"
            for app in policy.apps {
                html += "<li>App <code>\(escape(app.id))</code>: "
                if let own = app.admin {
                    html += "its own token from <code class=\"k secret\">\(escape(own.token.description))</code>"
                    html += policy.admin == nil ? "" : " and the operator's"
                } else {
                    html += policy.admin == nil ? "no token reaches it" : "the operator's token only"
                }
                html += "</li>"
            }
            html += "</ul>"
        }
        return html
    }

    /// `text` made safe for HTML and SVG text and for quoted attribute values: `& < > " '` become
    /// character references, and control characters other than tab and newline (which no HTML
    /// or XML text may carry) become U+FFFD.
    public static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            case "\t", "\n": out.unicodeScalars.append(scalar)
            default:
                if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0xFFFE || scalar.value == 0xFFFF {
                    out += "\u{FFFD}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    // MARK: diagram

    /// One box: a title and lines (each wrapped to the box), drawn in a class of `css`.
    struct Box {
        var title: String
        var lines: [Line]
        var kind: String

        struct Line {
            var text: String
            var style: String = ""
            init(_ text: String, _ style: String = "") {
                self.text = text
                self.style = style
            }
        }
    }

    static let charWidth = 7.3
    static let lineHeight = 16
    static let titleHeight = 23
    static let padding = 8

    /// Wrapped lines of `box` at `width`, at spaces; a continuation is indented two more.
    static func wrapped(_ box: Box, width: Int) -> [Box.Line] {
        let maxChars = max(10, Int(Double(width - 2 * padding) / charWidth))
        var out: [Box.Line] = []
        for line in box.lines {
            var rest = Array(line.text)
            if rest.isEmpty { out.append(line) }
            var first = true
            let indent = String(rest.prefix { $0 == " " })
            while !rest.isEmpty {
                let limit = first ? maxChars : maxChars - indent.count - 2
                var cut = rest.count
                if rest.count > limit {
                    cut = limit
                    // At a space, so that a name (a host, a secret reference) stays whole; a
                    // word longer than the line is cut.
                    if let space = rest[..<(limit + 1)].lastIndex(of: " "), space > rest.prefix(while: { $0 == " " }).count {
                        cut = space
                    }
                }
                let piece = String(rest[..<cut])
                out.append(Box.Line(first ? piece : indent + "  " + piece, line.style))
                rest = Array(rest[cut...].drop { $0 == " " })
                first = false
            }
        }
        return out
    }

    static func height(_ box: Box, width: Int) -> Int {
        titleHeight + padding + wrapped(box, width: width).count * lineHeight + padding
    }

    static func draw(_ box: Box, x: Int, y: Int, width: Int) -> String {
        let lines = wrapped(box, width: width)
        let h = height(box, width: width)
        var svg = "<g class=\"box \(box.kind)\">"
        svg += "<rect x=\"\(x)\" y=\"\(y)\" width=\"\(width)\" height=\"\(h)\" rx=\"6\"/>"
        svg += "<rect class=\"band\" x=\"\(x)\" y=\"\(y)\" width=\"\(width)\" height=\"\(titleHeight)\" rx=\"6\"/>"
        svg += "<text class=\"title\" x=\"\(x + padding)\" y=\"\(y + 16)\">\(escape(box.title))</text>"
        for (index, line) in lines.enumerated() {
            let style = line.style.isEmpty ? "" : " class=\"\(line.style)\""
            svg += "<text\(style) x=\"\(x + padding)\" y=\"\(y + titleHeight + padding + 12 + index * lineHeight)\" xml:space=\"preserve\">\(escape(line.text))</text>"
        }
        return svg + "</g>\n"
    }

    /// An arrow from (x1, y1) to (x2, y2), with `label` above its middle.
    static func arrow(_ x1: Int, _ y1: Int, _ x2: Int, _ y2: Int, marker: Int, label: String = "") -> String {
        var svg = "<path class=\"flow\" d=\"M\(x1),\(y1) C\((x1 + x2) / 2),\(y1) \((x1 + x2) / 2),\(y2) \(x2),\(y2)\" marker-end=\"url(#arrow\(marker))\"/>"
        if !label.isEmpty {
            svg += "<text class=\"label\" x=\"\((x1 + x2) / 2)\" y=\"\((y1 + y2) / 2 - 5)\" text-anchor=\"middle\">\(escape(label))</text>"
        }
        return svg + "\n"
    }

    static func duration(seconds: Int) -> String { Values.formatMillis(seconds * 1000) }

    static func clientBox(_ app: AppPolicy) -> Box {
        let client = app.client
        var lines = [Box.Line("platforms: " + client.platforms.map(\.rawValue).joined(separator: ", "), "strong"),
                     Box.Line(sessionCarrier(app.session)),
                     Box.Line(""),
                     Box.Line("register (POST …/installations):", "strong")]
        lines += PolicyExplainer.registerFields.map { Box.Line("  " + $0) }
        switch client.contactID {
        case .verify: lines.append(Box.Line("  contact_id: must equal the session's", "muted"))
        case .reject: lines.append(Box.Line("  contact_id: refused", "muted"))
        }
        lines.append(Box.Line("unregister:", "strong"))
        lines.append(Box.Line("  push_token"))
        lines.append(Box.Line("events (up to \(client.maxEvents)):", "strong"))
        lines.append(Box.Line("  " + PolicyExplainer.eventFields.joined(separator: ", ")))
        lines.append(Box.Line(""))
        lines.append(Box.Line(client.unknownFields == .reject ? "other fields: refused" : "other fields: dropped", "muted"))
        lines.append(Box.Line("bodies up to \(Values.formatBytes(client.maxBody))", "muted"))
        return Box(title: "Client app", lines: lines, kind: "client")
    }

    static func sessionCarrier(_ session: AppSession) -> String {
        switch session {
        case .jwt(let jwt):
            var parts: [String] = []
            if let header = jwt.header { parts.append("header \(header)") }
            if let cookie = jwt.cookie { parts.append("cookie \(cookie)") }
            return "session JWT: " + parts.joined(separator: " or ")
        case .introspect(let introspection):
            switch introspection.source {
            case .header(let name): return "session token: header \(name)"
            case .cookie(let name): return "session token: cookie \(name)"
            }
        }
    }

    static func serverBox(_ app: AppPolicy) -> Box {
        var lines: [Box.Line]
        switch app.session {
        case .jwt(let session):
            lines = jwtLines(session)
        case .introspect(let introspection):
            lines = [Box.Line("checks the session:", "strong"),
                     Box.Line("  asks host " + PolicyExplainer.hostOf(introspection.url) + " (RFC 7662 introspection)", "host"),
                     Box.Line("  " + introspection.url, "muted"),
                     Box.Line("  as " + PolicyExplainer.clientAuth(introspection.clientAuth), "secret"),
                     Box.Line("  answers cached " + (introspection.cacheTTLSeconds == 0 ? "never" : "up to " + duration(seconds: introspection.cacheTTLSeconds))
                              + ", never past exp; refusals 5s"),
                     Box.Line("  timeout " + Values.formatMillis(introspection.timeoutMillis)),
                     Box.Line(""),
                     Box.Line("injects:", "strong"),
                     Box.Line("  contact_id ← introspection answer '\(introspection.contactField)'")]
        }
        lines.append(Box.Line("  per upstream: the values marked + in its box", "muted"))
        lines.append(Box.Line(""))
        lines.append(Box.Line("secrets (names only):", "strong"))
        let refs = secretReferences(app)
        if refs.isEmpty { lines.append(Box.Line("  none")) }
        for (ref, use) in refs { lines.append(Box.Line("  \(ref)  (\(use))", "secret")) }
        if !app.client.rateLimits.isEmpty {
            lines.append(Box.Line(""))
            let limits = app.client.rateLimits.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value.requests)/\(duration(seconds: $0.value.perSeconds))" }
            lines.append(Box.Line("rate limits per contact: " + limits.joined(separator: ", "), "muted"))
        }
        return Box(title: "PushWarden — app '\(app.id)'", lines: lines, kind: "server")
    }

    /// The session lines of a JWT app's box, up to its injected values.
    static func jwtLines(_ session: SessionPolicy) -> [Box.Line] {
        var lines = [Box.Line("checks the session:", "strong"),
                     Box.Line("  " + session.algorithms.map(\.rawValue).joined(separator: ", ") + " only")]
        switch session.keys {
        case .hmacSecret(let ref): lines.append(Box.Line("  HMAC secret " + ref.description, "secret"))
        case .jwksFile(let path): lines.append(Box.Line("  public keys: JWKS file " + path))
        case .jwksURL(let jwks):
            lines.append(Box.Line("  public keys fetched from " + jwks.url))
            if let file = jwks.fallbackFile { lines.append(Box.Line("  fallback JWKS file " + file)) }
        }
        lines.append(Box.Line("  iss: " + (session.issuer ?? "not checked")))
        lines.append(Box.Line("  aud: " + (session.audience ?? "not checked")))
        lines.append(Box.Line(""))
        lines.append(Box.Line("injects:", "strong"))
        lines.append(Box.Line("  contact_id ← session claim '\(session.contactClaim)'"))
        if let logout = session.backchannelLogout {
            lines.append(Box.Line(""))
            lines.append(Box.Line("back-channel logout:", "strong"))
            lines.append(Box.Line("  keeps session claim '\(logout.sidClaim)' with each registration"))
            lines.append(Box.Line("  logout tokens: these keys, iss, aud, event, sid or sub, no nonce, jti once"))
            lines.append(Box.Line("  removes " + (logout.scope == .session ? "the session's installations" : "every installation of the contact")))
        }
        return lines
    }

    /// Every secret reference of `app` with what it is for, in the order `PolicyExplainer` lists them.
    static func secretReferences(_ app: AppPolicy) -> [(String, String)] {
        var refs: [(String, String)] = []
        if let use = PolicyExplainer.sessionSecret(app.session) { refs.append((use.reference.description, use.purpose)) }
        for upstream in app.upstreams {
            for use in upstream.provider.settings.secrets {
                refs.append((use.reference.description, "'\(upstream.name)' \(use.purpose)"))
            }
        }
        return refs
    }

    static func upstreamBox(_ upstream: UpstreamPolicy) -> Box {
        let settings = upstream.provider.settings
        let host = settings.endpoint.map(PolicyExplainer.hostOf)
        var lines: [Box.Line] = []
        if let endpoint = settings.endpoint {
            lines.append(Box.Line("host " + (host ?? endpoint), "host"))
            lines.append(Box.Line(endpoint, "muted"))
        } else {
            lines.append(Box.Line("nothing leaves this host", "host"))
        }
        lines.append(Box.Line("\(settings.providerName), \(upstream.role.rawValue), \(upstream.delivery.rawValue)"))
        lines.append(Box.Line("receives:", "strong"))
        lines.append(Box.Line("  registrations and unregisters (the client's fields, in the provider's shape)"))
        let takesEvents = upstream.provider.traits.takesEvents
        lines.append(Box.Line(takesEvents ? "  events" : "  no events", takesEvents ? "" : "muted"))
        for value in settings.injected { lines.append(Box.Line("  + " + value)) }
        if settings.endpoint != nil {
            lines.append(Box.Line("timeout \(Values.formatMillis(upstream.timeoutMillis)), \(upstream.retry.attempts) attempt(s); circuit opens after "
                                  + "\(upstream.circuit.failures) failure(s) in \(Values.formatMillis(upstream.circuit.withinMillis)) "
                                  + "for \(Values.formatMillis(upstream.circuit.openForMillis))", "muted"))
        }
        return Box(title: "'\(upstream.name)'" + (host.map { " → \($0)" } ?? " (dry run)"), lines: lines, kind: upstream.role == .primary ? "upstream" : "upstream shadow")
    }

    static func storageBox(_ app: AppPolicy, store: StorePolicy?) -> Box {
        let names = app.upstreams.map { "'\($0.name)'" }.joined(separator: ", ")
        var lines = [Box.Line("dedupe entries (fingerprint per upstream and push token) for \(names):", "strong"),
                     Box.Line("  kept \(duration(seconds: app.dedupe.refreshAfterSeconds)) (dedupe.refresh_after)")]
        let identities = app.upstreams.filter { $0.provider.traits.keepsIdentity }
        lines.append(Box.Line("identities the provider handed back:", "strong"))
        if identities.isEmpty {
            lines.append(Box.Line("  none kept for this app's upstreams"))
        } else {
            for upstream in identities {
                lines.append(Box.Line("  '\(upstream.name)': kept \(identityTTLSeconds / 86_400) days"))
            }
        }
        lines.append(Box.Line("outbox entries (Redis store):", "strong"))
        for upstream in app.upstreams where upstream.provider.settings.endpoint != nil {
            let age = Values.formatMillis(upstream.queue.maxAgeMillis)
            if upstream.delivery == .queued {
                lines.append(Box.Line("  '\(upstream.name)': every queued delivery, up to \(age) (queue.max_age), then dead-lettered"))
            } else {
                lines.append(Box.Line("  '\(upstream.name)': failed unregisters only, up to \(age) (queue.max_age)"))
            }
        }
        if !app.upstreams.contains(where: { $0.provider.settings.endpoint != nil }) { lines.append(Box.Line("  none (dry run only)")) }
        lines.append(Box.Line("each contact's installations (inventory):", "strong"))
        lines.append(Box.Line("  " + (app.client.maxInstallations.map { "at most \($0) per contact, least recently seen evicted" } ?? "no cap per contact")))
        lines.append(Box.Line("  " + (app.inventory.expireAfterMillis.map { "forgotten after \(Values.formatMillis($0)) unseen (inventory.expire_after)" }
                                      ?? "kept until unregistered or erased")))
        lines.append(Box.Line("  dead-token reports remove at most \(app.deadTokens.maxShareText) (dead_tokens.max_share) or \(app.deadTokens.minCount) "
                              + "(dead_tokens.min_count) a minute, whichever is more; the rest are held in quarantine"))
        lines.append(Box.Line("  pushwarden import: " + PolicyExplainer.importSummary(app)))
        lines.append(Box.Line("encryption at rest (store.encryption_key):", "strong"))
        if let store {
            let previous = store.previousEncryptionKeys.count
            lines.append(Box.Line("  push tokens and Web Push secrets sealed with AES-256-GCM, key from \(store.encryptionKey)", "secret"))
            lines.append(Box.Line("  \(previous) previous key(s) still open older values"
                                  + (previous == 0 ? "" : ": " + store.previousEncryptionKeys.map(\.description).joined(separator: ", "))))
        } else {
            lines.append(Box.Line("  off: push tokens and Web Push secrets are stored as sent"))
        }
        lines.append(Box.Line("key names (store.digest_key):", "strong"))
        if let digestKey = store?.digestKey {
            lines.append(Box.Line("  contacts and push tokens as HMAC-SHA-256 digests, key from \(digestKey)", "secret"))
        } else {
            lines.append(Box.Line("  contacts and push tokens as unkeyed SHA-256 digests"))
        }
        if let introspection = app.session.introspection {
            lines.append(Box.Line("introspection answers (process memory only):", "strong"))
            lines.append(Box.Line("  keyed by a hash of the session token, up to \(duration(seconds: introspection.cacheTTLSeconds)); refusals 5s"))
        }
        lines.append(Box.Line("in memory, or in Redis with serve --redis; rate-limit counters for their window", "muted"))
        return Box(title: "Stored by PushWarden", lines: lines, kind: "store")
    }

    static func diagram(_ app: AppPolicy, index appIndex: Int, store storePolicy: StorePolicy? = nil) -> String {
        let clientX = 10, clientW = 200
        let serverX = 270, serverW = 290
        let upX = 620, upW = 310
        let width = upX + upW + 10
        let top = 30

        let client = clientBox(app), server = serverBox(app), store = storageBox(app, store: storePolicy)
        let clientH = height(client, width: clientW)
        let serverH = height(server, width: serverW)
        let upstreams = app.upstreams.map(upstreamBox)
        var upY: [Int] = []
        var y = top
        for box in upstreams {
            upY.append(y)
            y += height(box, width: upW) + 20
        }
        let upBottom = y - 20
        let storeY = max(top + serverH, top + clientH, upBottom) + 40
        let storeX = serverX, storeW = upX + upW - serverX
        let storeH = height(store, width: storeW)
        let totalH = storeY + storeH + 10

        var svg = "<svg class=\"flow\" viewBox=\"0 0 \(width) \(totalH)\" role=\"img\" aria-label=\"data flow of app \(escape(app.id))\">\n"
        svg += "<defs><marker id=\"arrow\(appIndex)\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>\n"
        svg += "<text class=\"column\" x=\"\(clientX)\" y=\"18\">comes in</text>"
        svg += "<text class=\"column\" x=\"\(serverX)\" y=\"18\">checked and added</text>"
        svg += "<text class=\"column\" x=\"\(upX)\" y=\"18\">leaves for</text>\n"
        svg += draw(client, x: clientX, y: top, width: clientW)
        svg += draw(server, x: serverX, y: top, width: serverW)
        svg += arrow(clientX + clientW, top + 40, serverX, top + 40, marker: appIndex, label: "HTTPS")
        for (index, box) in upstreams.enumerated() {
            svg += draw(box, x: upX, y: upY[index], width: upW)
            let upstream = app.upstreams[index]
            let label = upstream.provider.settings.endpoint.map(PolicyExplainer.hostOf) == nil ? "logs" : upstream.delivery.rawValue
            let toY = upY[index] + 12
            svg += arrow(serverX + serverW, min(toY, top + serverH - 12), upX, toY, marker: appIndex, label: label)
        }
        svg += draw(store, x: storeX, y: storeY, width: storeW)
        svg += arrow(serverX + 40, top + serverH, serverX + 40, storeY, marker: appIndex)
        svg += "</svg>\n"
        return svg
    }

    static let legend = """
        <p class="legend"><span class="k secret">secret reference</span> names only, never a value ·
        <span class="k host">host</span> receives data · shadow upstreams are dashed: best effort, their failures never reach the client</p>

        """

    static let css = """
        body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1b1f24;background:#f6f7f9}
        header{padding:14px 24px;background:#fff;border-bottom:1px solid #d7dbe0}
        h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:18px 0 8px}
        header p{margin:0;color:#4a5360}
        main{display:grid;grid-template-columns:minmax(0,1.6fr) minmax(0,1fr);gap:20px;padding:0 24px 24px}
        @media (max-width:1100px){main{grid-template-columns:minmax(0,1fr)}}
        section{background:#fff;border:1px solid #d7dbe0;border-radius:8px;padding:4px 14px 10px;margin-top:16px}
        .text{margin-top:16px}
        pre{background:#fff;border:1px solid #d7dbe0;border-radius:8px;padding:12px;font:12px/1.45 ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;white-space:pre-wrap;overflow-wrap:anywhere;margin:0}
        svg.flow{width:100%;height:auto;display:block}
        svg text{font:12px ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;fill:#1b1f24}
        svg text.title{font-weight:700;fill:#fff}
        svg text.column{font:600 13px system-ui,sans-serif;fill:#6a7380;text-transform:uppercase;letter-spacing:.06em}
        svg text.label{font:600 12px system-ui,sans-serif;fill:#4a5360}
        svg text.strong{font-weight:700}svg text.muted{fill:#6a7380}
        svg text.secret{fill:#8a4b00;font-weight:700}svg text.host{fill:#0b5cad;font-weight:700}
        .box rect{fill:#fff;stroke:#9aa4b1;stroke-width:1.2}
        .box rect.band{stroke:none}
        .client rect.band{fill:#4a5360}.server rect.band{fill:#2f6f4f}.upstream rect.band{fill:#0b5cad}.store rect.band{fill:#8a4b00}
        .shadow rect{stroke-dasharray:5 3}.shadow rect.band{fill:#5d84b0}
        path.flow{fill:none;stroke:#6a7380;stroke-width:1.6}
        marker path{fill:#6a7380}
        .legend{color:#4a5360;font-size:12px;margin:6px 0 0}
        .k{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-weight:700}.k.secret{color:#8a4b00}.k.host{color:#0b5cad}
        code{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace}
        """
}
