import PWCore
import YAMLKit

/// `apps.<id>.client`, `inventory` and `dedupe`: what clients may send and how long things are kept.
extension PolicyReader {
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
}
