import Loops
import PWCore
import PWPolicy
import RedisClient
import Synchronization

/// Per-contact request limits from the policy (`client.rate_limits`).
///
/// - With the Redis store (one Redis or a cluster) the limit is shared by every PushWarden process
///   on it: one script per admitted request (GCRA, one key per app, route and contact under the
///   contact's hash tag, Redis's own clock), sent on the request loop's own connection. A limit of
///   N per period admits a burst of N, then one request every period/N; `Retry-After` is the time
///   until the next one would be admitted. When Redis does not answer, the request is admitted:
///   a limit is not worth refusing registrations for. That is logged (bounded) and counted in
///   `pushwarden_rate_limit_fallback_total`.
/// - With the memory store, counts are kept in this process only, as fixed windows, and checked
///   synchronously: with several processes each enforces the limit on its own share of the traffic.
final class RateLimiter: Sendable {
    private struct Window {
        var start: UInt64
        var count: Int
    }

    private struct State {
        var windows: [String: Window] = [:]
        var lastSweep: UInt64 = 0
    }

    private let state = Mutex(State())
    private let redis: RedisStore?
    /// Names each contact's counters, as the contact's other keys are named.
    private let digests: KeyDigest
    private let metrics: Metrics
    private let logger: Logger

    /// KEYS[1] the contact's state for the route: its theoretical arrival time (ms, as text).
    /// ARGV[1] requests, ARGV[2] period (ms). Returns 0 when admitted, else the milliseconds
    /// until a request would be.
    static let gcraScript = LuaScript("""
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local period = tonumber(ARGV[2])
        local interval = period / tonumber(ARGV[1])
        local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
        if tat < now then tat = now end
        local admitAt = tat + interval - period
        if now < admitAt then return math.ceil(admitAt - now) end
        tat = tat + interval
        redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now))
        return 0
        """)

    /// - Parameter store: a `RedisStore` shares the limits through its Redis; any other store keeps
    ///   them in this process.
    init(store: any DedupeStore, digests: KeyDigest, metrics: Metrics, logger: Logger) {
        redis = store as? RedisStore
        self.digests = digests
        self.metrics = metrics
        self.logger = logger
    }

    /// Calls `completion` on `loop`'s thread with nil when the request is admitted, or with
    /// `429 rate_limited` and its `Retry-After`. Without a limit for the route, and with the
    /// memory store, before returning. Call on `loop`.
    func admit(app: AppPolicy, route: String, contactID: String, on loop: EventLoop,
               completion: @escaping (ContractError?) -> Void) {
        guard let limit = app.client.rateLimits[route] else {
            completion(nil)
            return
        }
        guard let redis else {
            completion(admitLocally(app: app, route: route, contactID: contactID, limit: limit))
            return
        }
        let key = digests.contact(contactID, app: app.id).rateLimit(route: route)
        redis.evaluate(Self.gcraScript, keys: [key], arguments: [String(limit.requests), String(UInt64(limit.perSeconds) * 1000)],
                       on: loop) { [self] result in
            completion(verdict(result, app: app.id, route: route))
        }
    }

    private func verdict(_ result: Result<RedisReply, StoreError>, app: String, route: String) -> ContractError? {
        let why: String
        switch result {
        case .success(.integer(let wait)):
            guard wait > 0 else { return nil }
            let seconds = Int((wait + 999) / 1000)
            return ContractError(.rateLimited, "too many \(route) requests; try again later", retryAfter: max(1, seconds))
        case .success:
            why = "unexpected reply"
        case .failure(let error):
            why = error.detail
        }
        metrics.rateLimitFallback(app: app)
        logger.bounded(.warning, "rate limit store unavailable; request admitted", key: app,
                       [("app", app), ("route", route), ("error", why)])
        return nil
    }

    private func admitLocally(app: AppPolicy, route: String, contactID: String, limit: ClientPolicy.RateLimit) -> ContractError? {
        let windowMillis = UInt64(limit.perSeconds) * 1000
        let key = app.id + "\u{0}" + route + "\u{0}" + contactID
        let retryAfter: Int? = state.withLock { state in
            // Read under the lock: a time read before it could precede a window another thread
            // started meanwhile, and the unsigned differences below would trap.
            let now = MonotonicClock.nowMillis()
            if now - state.lastSweep > 60_000 {
                state.windows = state.windows.filter { now - $0.value.start < 3_600_000 }
                state.lastSweep = now
            }
            var window = state.windows[key] ?? Window(start: now, count: 0)
            if now - window.start >= windowMillis { window = Window(start: now, count: 0) }
            window.count += 1
            state.windows[key] = window
            guard window.count > limit.requests else { return nil }
            let remaining = windowMillis - (now - window.start)
            return Int((remaining + 999) / 1000)
        }
        guard let retryAfter else { return nil }
        return ContractError(.rateLimited, "too many \(route) requests; try again later", retryAfter: retryAfter)
    }
}
