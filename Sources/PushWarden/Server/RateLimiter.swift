import PWCore
import PWPolicy
import Synchronization

/// Per-contact request limits from the policy (`client.rate_limits`), as fixed windows.
///
/// Counts are kept in this process only: with several PushWarden processes each enforces the
/// limit on its own share of the traffic. Windows that ended are swept as new ones open.
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

    init() {}

    /// - Throws: `429 rate_limited` with `Retry-After` when the contact is over its limit.
    func admit(app: AppPolicy, route: String, contactID: String) throws(ContractError) {
        guard let limit = app.client.rateLimits[route] else { return }
        let now = MonotonicClock.nowMillis()
        let windowMillis = UInt64(limit.perSeconds) * 1000
        let key = app.id + "\u{0}" + route + "\u{0}" + contactID
        let retryAfter: Int? = state.withLock { state in
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
        if let retryAfter {
            throw ContractError(.rateLimited, "too many \(route) requests; try again later", retryAfter: retryAfter)
        }
    }
}
