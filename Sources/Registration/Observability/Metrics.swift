import Synchronization

/// PushWarden's Prometheus metrics. Label values come from the policy (app and upstream names)
/// or from fixed sets (routes, outcomes, status codes), so cardinality is bounded by the policy.
///
/// Thread-safe; each update takes one short lock.
public final class Metrics: Sendable {
    private struct Histogram {
        static let bounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
        var buckets = [UInt64](repeating: 0, count: Histogram.bounds.count)
        var count: UInt64 = 0
        var sum: Double = 0

        mutating func observe(_ value: Double) {
            for (i, bound) in Histogram.bounds.enumerated() where value <= bound { buckets[i] += 1 }
            count += 1
            sum += value
        }
    }

    private struct RequestKey: Hashable {
        var app: String
        var route: String
        var status: Int
    }

    /// Two label values, hashed in place (an array key would allocate on every update).
    private struct LabelPair: Hashable {
        var first: String
        var second: String
    }

    private struct State {
        var requests: [RequestKey: UInt64] = [:]
        var dedupeHits: [LabelPair: UInt64] = [:]         // app, upstream
        var dedupeDegraded: [[String]: UInt64] = [:]      // app
        var upstreamCalls: [[String]: UInt64] = [:]       // upstream, operation, outcome
        var upstreamLatency: [[String]: Histogram] = [:]  // upstream
        var authFailures: [[String]: UInt64] = [:]        // app
        var outboxDepth: [[String]: UInt64] = [:]         // app, upstream
        var outboxOldest: [[String]: Double] = [:]        // app, upstream
        var outboxDead: [[String]: UInt64] = [:]          // app, upstream
        var circuitStates: [LabelPair: Int] = [:]         // app, upstream
        var jwksFetches: [[String]: UInt64] = [:]         // app, result
        var introspections: [[String]: UInt64] = [:]      // app, result
        var jwksSince: [String: ContinuousClock.Instant] = [:]  // app: when its keys in force came
        var policyReloads: [[String]: UInt64] = [:]       // result
        var policySHA256: String?
        var policySerial: Int?
        var rateLimitFallbacks: [[String]: UInt64] = [:]  // app
        var inventoryRemovals: [[String]: UInt64] = [:]   // app, reason
        var deadTokens: [[String]: UInt64] = [:]          // app, result
        var storeWrites: [[String]: UInt64] = [:]         // kind, result
        var inventoryInstallations: [[String]: UInt64] = [:]  // app, upstream
        var inventoryTotals: [[String]: UInt64] = [:]     // app
        var inventoryContacts: [[String]: UInt64] = [:]   // app
        var backchannelLogouts: [[String]: UInt64] = [:]  // app, result
        var webhooks: [[String]: UInt64] = [:]            // event, result
    }

    private let state = Mutex(State())

    public init() {}

    public func request(app: String, route: String, status: Int) {
        state.withLock { $0.requests[RequestKey(app: app, route: route, status: status), default: 0] += 1 }
    }

    public func dedupeHit(app: String, upstream: String) {
        state.withLock { $0.dedupeHits[LabelPair(first: app, second: upstream), default: 0] += 1 }
    }

    public func dedupeDegraded(app: String) {
        state.withLock { $0.dedupeDegraded[[app], default: 0] += 1 }
    }

    /// A request admitted without its rate-limit check because the store did not answer.
    public func rateLimitFallback(app: String) {
        state.withLock { $0.rateLimitFallbacks[[app], default: 0] += 1 }
    }

    public func authFailure(app: String) {
        state.withLock { $0.authFailures[[app], default: 0] += 1 }
    }

    /// An upstream's circuit for one app: 0 closed, 1 open, 2 half-open.
    public func circuitState(app: String, upstream: String, state value: Int) {
        state.withLock { $0.circuitStates[LabelPair(first: app, second: upstream)] = value }
    }

    /// One fetch of an app's `jwks_url`: `result` is `ok`, `network_error`, `http_error`,
    /// `too_large` or `invalid`.
    public func jwksFetch(app: String, result: String) {
        state.withLock { $0.jwksFetches[[app, result], default: 0] += 1 }
    }

    /// One call to an app's introspection endpoint: `result` is `active`, `refused` or `unavailable`.
    /// Answers served from the cache are not calls.
    public func introspection(app: String, result: String) {
        state.withLock { $0.introspections[[app, result], default: 0] += 1 }
    }

    /// The app's keys in force were fetched (or its fallback file loaded) just now: the zero of
    /// `pushwarden_jwks_age_seconds{app}`.
    public func jwksKeysInForce(app: String) {
        let now = ContinuousClock.now
        state.withLock { $0.jwksSince[app] = now }
    }

    /// Drops the age series of apps that are no longer in the policy (a reload removed them or
    /// gave them other keys); fetch counters stay, as counters do.
    public func keepJWKSAges(of apps: Set<String>) {
        state.withLock { state in state.jwksSince = state.jwksSince.filter { apps.contains($0.key) } }
    }

    /// A reload attempt: `result` is `ok` or `error`.
    public func policyReload(result: String) {
        state.withLock { $0.policyReloads[[result], default: 0] += 1 }
    }

    /// The SHA-256 (hex) of the policy file in force, and its `serial` (nil: the file has none).
    public func policyInForce(sha256: String, serial: Int?) {
        state.withLock { state in
            state.policySHA256 = sha256
            state.policySerial = serial
        }
    }

    /// One attempt at an upstream: `outcome` is `accepted`, `rejected`, `auth_failed`, `retryable`
    /// or `network_error`.
    public func upstreamCall(upstream: String, operation: String, outcome: String, seconds: Double) {
        state.withLock { state in
            state.upstreamCalls[[upstream, operation, outcome], default: 0] += 1
            state.upstreamLatency[[upstream], default: Histogram()].observe(seconds)
        }
    }

    /// An upstream whose outbox is watched: its outbox series exist from now on, reading 0.
    public func outboxWatched(app: String, upstream: String) {
        state.withLock { state in
            state.outboxDepth[[app, upstream]] = state.outboxDepth[[app, upstream]] ?? 0
            state.outboxOldest[[app, upstream]] = state.outboxOldest[[app, upstream]] ?? 0
            state.outboxDead[[app, upstream]] = state.outboxDead[[app, upstream]] ?? 0
        }
    }

    /// What waits in an upstream's outbox, and how old its oldest delivery is.
    public func outbox(app: String, upstream: String, depth: Int, oldestSeconds: Double) {
        state.withLock { state in
            state.outboxDepth[[app, upstream]] = UInt64(max(0, depth))
            state.outboxOldest[[app, upstream]] = max(0, oldestSeconds)
        }
    }

    public func outboxDead(app: String, upstream: String) {
        state.withLock { $0.outboxDead[[app, upstream], default: 0] += 1 }
    }

    /// An installation left a contact's inventory, unregistered upstream: `reason` is `expired`,
    /// `evicted` (over `client.max_installations`), `erased` or `logged_out`.
    public func inventoryRemoved(app: String, reason: String) {
        state.withLock { $0.inventoryRemovals[[app, reason], default: 0] += 1 }
    }

    /// An app whose inventory expires: its `pushwarden_inventory_expired_total` exists from now on.
    public func inventoryWatched(app: String) {
        state.withLock { state in
            state.inventoryRemovals[[app, "expired"]] = state.inventoryRemovals[[app, "expired"]] ?? 0
        }
    }

    /// An app's inventory as last counted: its installations, those each upstream holds, its contacts.
    public func inventoryCounts(app: String, installations: Int, contacts: Int, upstreams: [(String, Int)]) {
        state.withLock { state in
            state.inventoryInstallations = state.inventoryInstallations.filter { $0.key[0] != app }
            for (upstream, count) in upstreams { state.inventoryInstallations[[app, upstream]] = UInt64(max(0, count)) }
            state.inventoryTotals[[app]] = UInt64(max(0, installations))
            state.inventoryContacts[[app]] = UInt64(max(0, contacts))
        }
    }

    /// Drops the inventory gauges of apps no longer in the policy.
    public func keepInventoryCounts(of apps: Set<String>) {
        state.withLock { state in
            state.inventoryInstallations = state.inventoryInstallations.filter { apps.contains($0.key[0]) }
            state.inventoryTotals = state.inventoryTotals.filter { apps.contains($0.key[0]) }
            state.inventoryContacts = state.inventoryContacts.filter { apps.contains($0.key[0]) }
        }
    }

    /// One dead-token report judged: `result` is `removed`, `stale`, `unknown`, `quarantined`,
    /// `failed` (an upstream could not take the removal) or `refused` (the report itself).
    public func deadToken(app: String, result: String) {
        state.withLock { $0.deadTokens[[app, result], default: 0] += 1 }
    }

    /// A store write made after an upstream took the change: `result` is `deferred` (it failed and
    /// waits to be retried), `stored` (a retry went through) or `dropped` (given up).
    public func storeWrite(kind: String, result: String) {
        state.withLock { $0.storeWrites[[kind, result], default: 0] += 1 }
    }

    /// A back-channel logout request: `result` is `logged_out`, `invalid`, `replayed`,
    /// `not_enabled` or `unavailable`.
    public func backchannelLogout(app: String, result: String) {
        state.withLock { $0.backchannelLogouts[[app, result], default: 0] += 1 }
    }

    /// A lifecycle event for a webhook receiver: `result` is `queued`, `delivered`, `retried`,
    /// `dead_lettered` or `unqueued` (the store refused it).
    public func webhook(event: String, result: String) {
        state.withLock { $0.webhooks[[event, result], default: 0] += 1 }
    }

    /// The Prometheus text exposition format, version 0.0.4.
    public func render(storeUp: Bool? = nil) -> String {
        let snapshot = state.withLock { $0 }
        var out = ""
        func family(_ name: String, _ help: String, _ type: String, _ labels: [String], _ values: [[String]: UInt64]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for (key, value) in values.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                out += "\(name){\(Self.labels(labels, key))} \(value)\n"
            }
        }
        let requests = Dictionary(uniqueKeysWithValues: snapshot.requests.map { ([$0.key.app, $0.key.route, String($0.key.status)], $0.value) })
        family("pushwarden_requests_total", "Client API requests by app, route and status.", "counter",
               ["app", "route", "status"], requests)
        family("pushwarden_dedupe_hits_total", "Registrations answered unchanged without an upstream call.", "counter",
               ["app", "upstream"], Dictionary(uniqueKeysWithValues: snapshot.dedupeHits.map { ([$0.key.first, $0.key.second], $0.value) }))
        family("pushwarden_dedupe_degraded_total", "Registrations forwarded without dedupe because the store failed.", "counter",
               ["app"], snapshot.dedupeDegraded)
        family("pushwarden_auth_failures_total", "Requests refused as unauthorized.", "counter",
               ["app"], snapshot.authFailures)
        family("pushwarden_rate_limit_fallback_total", "Requests admitted unchecked because the rate-limit store did not answer.",
               "counter", ["app"], snapshot.rateLimitFallbacks)
        family("pushwarden_store_writes_retried_total",
               "Store writes that failed after an upstream took the change, by kind and result (deferred, stored, dropped).",
               "counter", ["kind", "result"], snapshot.storeWrites)
        family("pushwarden_upstream_calls_total", "Upstream call attempts by upstream, operation and outcome.", "counter",
               ["upstream", "operation", "outcome"], snapshot.upstreamCalls)
        if !snapshot.outboxDepth.isEmpty {
            family("pushwarden_outbox_depth", "Deliveries waiting in the outbox.", "gauge", ["app", "upstream"], snapshot.outboxDepth)
            out += "# HELP pushwarden_outbox_oldest_seconds Age of the oldest delivery waiting in the outbox.\n"
            out += "# TYPE pushwarden_outbox_oldest_seconds gauge\n"
            for (key, value) in snapshot.outboxOldest.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                out += "pushwarden_outbox_oldest_seconds{\(Self.labels(["app", "upstream"], key))} \(value)\n"
            }
            family("pushwarden_outbox_dead_total", "Deliveries moved to the dead-letter stream.", "counter", ["app", "upstream"],
                   snapshot.outboxDead)
        }
        let expired = snapshot.inventoryRemovals.filter { $0.key[1] == "expired" }
        family("pushwarden_inventory_expired_total", "Installations unregistered and forgotten after inventory.expire_after.", "counter",
               ["app"], Dictionary(uniqueKeysWithValues: expired.map { ([$0.key[0]], $0.value) }))
        family("pushwarden_inventory_removed_total", "Installations removed from contacts' inventories by reason (expired, evicted, erased, dead, logged_out).",
               "counter", ["app", "reason"], snapshot.inventoryRemovals)
        if !snapshot.inventoryTotals.isEmpty {
            family("pushwarden_inventory_installations", "Installations each upstream holds, by app (counted at most once a minute).", "gauge",
                   ["app", "upstream"], snapshot.inventoryInstallations)
            family("pushwarden_inventory_app_installations", "Installations in the app's inventory (counted at most once a minute).", "gauge",
                   ["app"], snapshot.inventoryTotals)
            family("pushwarden_inventory_contacts", "Contacts with at least one installation, by app (counted at most once a minute).", "gauge",
                   ["app"], snapshot.inventoryContacts)
        }
        family("pushwarden_dead_tokens_total",
               "Dead-token reports by app and result (removed, stale, unknown, quarantined, failed, refused).", "counter",
               ["app", "result"], snapshot.deadTokens)
        family("pushwarden_backchannel_logouts_total",
               "Back-channel logout requests from identity providers by app and result (logged_out, invalid, replayed, not_enabled, unavailable).",
               "counter", ["app", "result"], snapshot.backchannelLogouts)
        family("pushwarden_webhooks_total",
               "Lifecycle events for webhook receivers by event and result (queued, delivered, retried, dead_lettered, unqueued).",
               "counter", ["event", "result"], snapshot.webhooks)
        family("pushwarden_upstream_circuit_state", "Each upstream's circuit breaker by app: 0 closed, 1 open, 2 half-open.", "gauge",
               ["app", "upstream"],
               Dictionary(uniqueKeysWithValues: snapshot.circuitStates.map { ([$0.key.first, $0.key.second], UInt64($0.value)) }))
        family("pushwarden_jwks_fetches_total", "Fetches of session keys from jwks_url by app and result.", "counter",
               ["app", "result"], snapshot.jwksFetches)
        family("pushwarden_introspection_calls_total", "Calls to an app's session introspection endpoint by result (cache hits are not calls).",
               "counter", ["app", "result"], snapshot.introspections)
        out += "# HELP pushwarden_jwks_age_seconds Seconds since the app's session keys in force were fetched.\n"
        out += "# TYPE pushwarden_jwks_age_seconds gauge\n"
        let now = ContinuousClock.now
        for (app, since) in snapshot.jwksSince.sorted(by: { $0.key < $1.key }) {
            let age = since.duration(to: now)
            let seconds = Double(age.components.seconds) + Double(age.components.attoseconds) / 1e18
            out += "pushwarden_jwks_age_seconds{\(Self.labels(["app"], [app]))} \((seconds * 1000).rounded() / 1000)\n"
        }
        family("pushwarden_policy_reloads_total", "Policy reloads by result.", "counter", ["result"], snapshot.policyReloads)
        if let sha = snapshot.policySHA256 {
            // An empty label is Prometheus's "absent": the series keeps one label set either way.
            let serial = snapshot.policySerial.map(String.init) ?? ""
            out += "# HELP pushwarden_policy_info The policy in force, by the SHA-256 of its file and its serial (empty when it has none).\n"
            out += "# TYPE pushwarden_policy_info gauge\npushwarden_policy_info{sha256=\"\(sha)\",serial=\"\(serial)\"} 1\n"
        }
        out += "# HELP pushwarden_upstream_latency_seconds Upstream call attempt latency.\n"
        out += "# TYPE pushwarden_upstream_latency_seconds histogram\n"
        for (key, histogram) in snapshot.upstreamLatency.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            let upstream = Self.labels(["upstream"], key)
            for (i, bound) in Histogram.bounds.enumerated() {
                out += "pushwarden_upstream_latency_seconds_bucket{\(upstream),le=\"\(bound)\"} \(histogram.buckets[i])\n"
            }
            out += "pushwarden_upstream_latency_seconds_bucket{\(upstream),le=\"+Inf\"} \(histogram.count)\n"
            out += "pushwarden_upstream_latency_seconds_sum{\(upstream)} \(histogram.sum)\n"
            out += "pushwarden_upstream_latency_seconds_count{\(upstream)} \(histogram.count)\n"
        }
        if let storeUp {
            out += "# HELP pushwarden_store_up Whether the dedupe store answered the last check.\n"
            out += "# TYPE pushwarden_store_up gauge\npushwarden_store_up \(storeUp ? 1 : 0)\n"
        }
        return out
    }

    private static func labels(_ names: [String], _ values: [String]) -> String {
        zip(names, values).map { "\($0)=\"\(escape($1))\"" }.joined(separator: ",")
    }

    private static func escape(_ value: String) -> String {
        var out = ""
        for c in value {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }
}
