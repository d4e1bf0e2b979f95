import Loops
import PWCore
import PWPolicy
import Registration
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
    private let shared: (any SharedRateLimits)?
    /// Names each contact's counters, as the contact's other keys are named.
    private let digests: KeyDigest
    private let metrics: Metrics
    private let logger: Logger

    /// - Parameter shared: where the limits are shared (the Redis store); nil keeps them in this process.
    init(shared: (any SharedRateLimits)?, digests: KeyDigest, metrics: Metrics, logger: Logger) {
        self.shared = shared
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
        guard let shared else {
            completion(admitLocally(app: app, route: route, contactID: contactID, limit: limit))
            return
        }
        let key = digests.contact(contactID, app: app.id).rateLimit(route: route)
        shared.admit(key, requests: limit.requests, periodMillis: UInt64(limit.perSeconds) * 1000, on: loop) { [self] result in
            completion(verdict(result, app: app.id, route: route))
        }
    }

    private func verdict(_ result: Result<Int64, StoreError>, app: String, route: String) -> ContractError? {
        let why: String
        switch result {
        case .success(let wait):
            guard wait > 0 else { return nil }
            let seconds = Int((wait + 999) / 1000)
            return ContractError(.rateLimited, "too many \(route) requests; try again later", retryAfter: max(1, seconds))
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
