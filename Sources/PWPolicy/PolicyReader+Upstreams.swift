import PWCore
import YAMLKit

/// `apps.<id>.upstreams`: each upstream's role, delivery, timeouts, retries, queue, circuit and provider block.
extension PolicyReader {
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
}
