import PWCore
import YAMLKit

/// One receiver of lifecycle events (top-level `webhooks`): where they are POSTed, the signing
/// secret's reference (its `whsec_<base64>` value is read at start, never by `policy check`), and
/// the events it takes.
public struct WebhookPolicy: Sendable, Equatable {
    /// What happened to an installation, as the event's `type` names it.
    public enum Event: String, Sendable, CaseIterable {
        case registered, moved, unregistered, evicted, expired, erased
        case deadToken = "dead_token"
        case loggedOut = "logged_out"
        case deadLettered = "dead_lettered"
    }

    public var url: String
    /// The host the events leave for: what `policy explain` names.
    public var host: String
    public var secret: SecretRef
    public var events: [Event]
    /// How long an event is retried before it is dead-lettered (`max_age`, default 24h).
    public var maxAgeMillis: Int

    public init(url: String, host: String, secret: SecretRef, events: [Event], maxAgeMillis: Int = 86_400_000) {
        self.maxAgeMillis = maxAgeMillis
        self.url = url
        self.host = host
        self.secret = secret
        self.events = events
    }

    /// The signing key from the secret's value `whsec_<base64>` (Standard Webhooks): the decoded
    /// bytes, at least 24 of them; nil with why (never the value).
    public func key(from value: [UInt8]) -> Result<[UInt8], ConfigurationError> {
        var text = value[...]
        while let last = text.last, last == 0x0A || last == 0x0D || last == 0x20 { text = text.dropLast() }
        let prefix = Array("whsec_".utf8)
        guard text.starts(with: prefix) else {
            return .failure(ConfigurationError("the webhook secret from \(secret) must be whsec_ followed by base64 (whsec_$(openssl rand -base64 32))"))
        }
        let encoded = text.dropFirst(prefix.count).map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "+"): return UInt8(ascii: "-")
            case UInt8(ascii: "/"): return UInt8(ascii: "_")
            default: return byte
            }
        }
        guard let key = encoded.withUnsafeBufferPointer({ Base64URL.decode(bytes: $0) }), key.count >= 24 else {
            return .failure(ConfigurationError("the webhook secret from \(secret) must be whsec_ followed by at least 24 bytes in base64 (whsec_$(openssl rand -base64 32))"))
        }
        return .success(key)
    }
}

extension PolicyReader {
    /// `webhooks: [{url, secret: {env: NAME}, events: [...]}]`.
    func webhooks(_ node: YAMLNode) -> [WebhookPolicy]? {
        guard let items = checker.list(node, "webhooks") else { return nil }
        var result: [WebhookPolicy] = []
        var complete = true
        for (index, item) in items.enumerated() {
            let path = "webhooks[\(index)]"
            let fields = Fields(checker, item, path, allowed: ["url", "secret", "events", "max_age"])
            guard fields.isMapping else { complete = false; continue }
            var url: (String, URLParts)?
            if let node = fields.required("url") { url = httpsOrLoopbackURL(node, fields.at("url"), credentials: "") }
            var secret: SecretRef?
            if let node = fields.required("secret") {
                secret = checker.secret(node, fields.at("secret"))
                if secret != nil { checker.locate(node.mark, fields.at("secret")) }
            }
            var events: [WebhookPolicy.Event]?
            if let node = fields.required("events"), let list = checker.list(node, fields.at("events")) {
                var found: [WebhookPolicy.Event] = []
                var valid = true
                for (i, entry) in list.enumerated() {
                    let at = fields.at("events") + "[\(i)]"
                    guard let name = checker.string(entry, at) else { valid = false; continue }
                    guard let event = WebhookPolicy.Event(rawValue: name) else {
                        checker.report(entry.mark, at, "unknown event \(Checker.clip(name)); expected one of "
                                       + WebhookPolicy.Event.allCases.map(\.rawValue).joined(separator: ", "))
                        valid = false
                        continue
                    }
                    if !found.contains(event) { found.append(event) }
                }
                if valid, found.isEmpty {
                    checker.report(node.mark, fields.at("events"), "list at least one event")
                    valid = false
                }
                events = valid ? found : nil
            }
            var maxAge: Int? = 86_400_000
            if let node = fields["max_age"] { maxAge = checker.duration(node, fields.at("max_age"), min: 1000, max: 30 * 86_400_000) }
            checker.locate(item.mark, path)
            guard let url, let secret, let events, let maxAge, fields.isClean else { complete = false; continue }
            result.append(WebhookPolicy(url: url.0, host: url.1.host, secret: secret, events: events, maxAgeMillis: maxAge))
        }
        return complete ? result : nil
    }
}

extension PolicyExplainer {
    /// Which hosts receive lifecycle events and what they carry: a reviewer sees where data goes.
    static func webhooks(_ webhooks: [WebhookPolicy]) -> [String] {
        guard !webhooks.isEmpty else { return ["Webhooks: none (no webhooks block); lifecycle events are in the log and metrics only"] }
        var lines = ["Webhooks: lifecycle events of every app are POSTed, signed (Standard Webhooks, HMAC-SHA256), through the Redis outbox "
                     + "(retried until max_age, then dead-lettered); each carries the app, the contact id in clear, the token as a short hash "
                     + "(never the token), the platform, each upstream's outcome and a reason"]
        for (index, webhook) in webhooks.enumerated() {
            lines.append("  - webhooks[\(index)] to host \(webhook.host) (\(webhook.url)): "
                         + webhook.events.map(\.rawValue).joined(separator: ", ")
                         + "; max_age \(Values.formatMillis(webhook.maxAgeMillis)); secret referenced (name only): \(webhook.secret)")
        }
        return lines
    }
}

extension PolicyExplainerHTML {
    static func webhooks(_ webhooks: [WebhookPolicy]) -> String {
        guard !webhooks.isEmpty else { return "<p class=\"s2s\">Webhooks: <strong>none</strong> (no <code>webhooks</code> block).</p>" }
        let items = webhooks.map { webhook in
            "<li>host <strong>\(escape(webhook.host))</strong> (<code>\(escape(webhook.url))</code>): "
                + escape(webhook.events.map(\.rawValue).joined(separator: ", "))
                + "; secret <code class=\"k secret\">\(escape(webhook.secret.description))</code></li>"
        }
        return "<p class=\"s2s\">Webhooks: lifecycle events (the contact id in clear, tokens as short hashes) leave for these hosts, "
            + "signed, through the Redis outbox:</p><ul class=\"s2s\">" + items.joined() + "</ul>"
    }
}
