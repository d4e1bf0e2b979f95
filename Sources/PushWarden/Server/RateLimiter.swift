import Loops
import PWCore
import PWPolicy
import Registration
import Synchronization

/// Per-contact request limits from the policy (`client.rate_limits`): at most N requests per
/// period, counted in windows of one period aligned to the epoch, the previous window weighted by
/// the part of it still within the last period (a sliding window, approximated).
///
/// Each process decides from what it knows, on the request's thread, with no store round trip:
/// the count every replica had in the store when it last heard, plus what it admitted itself
/// since. Once a second (`syncMillis`) it adds what it admitted to the shared counters (the
/// Redis store, one or a cluster) in one write, and the replies bring back the other replicas'
/// counts. A process admits at most `share` requests per contact and route that the store has not
/// heard of; the next one waits for that contact's count to be added (one round trip, with a
/// registration's dedupe lookups). So R replicas admit at most N + R × share per window, with
/// share = max(1, N × 1 s / period); one replica admits at most N.
///
/// When the store does not answer, each process goes on counting what it admitted itself (as with
/// the memory store), and a request that needed the store is admitted: a limit is not worth
/// refusing registrations for. That is logged (bounded) and counted in
/// `pushwarden_rate_limit_fallback_total`. Without a store (the memory store) every process
/// counts alone.
final class RateLimiter: Sendable {
    /// How often the counts meet in the store.
    static let syncMillis: Int64 = 1000
    /// The most a count from the store is taken for: above any limit a policy can state (nine
    /// digits), and low enough that a counter's sums fit its 32-bit counts.
    static let countCeiling: Int64 = 1 << 30

    /// The routes a policy can limit.
    private enum Route: String {
        case register, unregister, events
    }

    /// Kept small, one per active contact and route: one byte for the route, 32-bit
    /// counts (each at most `countCeiling` plus a limit), the period in seconds.
    private struct Counter {
        /// Whose counter this is: the store's key is made from them when a count is sent (a digest
        /// a second per active contact, rather than a key of ~100 bytes kept for each).
        let app: String
        let contactID: String
        /// The window (epoch milliseconds / period) the counts below are for.
        var window: Int64
        /// The limit's period, in seconds.
        var periodSeconds: Int32
        /// The previous window's count, as last known.
        var previous: Int32 = 0
        /// What the store last said this window holds (every replica's admissions it has heard of).
        var known: Int32 = 0
        /// Admitted here since, and not sent yet.
        var unsent: Int32 = 0
        /// Admitted here and on their way to the store.
        var sending: Int32 = 0
        let route: Route
        /// Whether the store has this window's counter with its expiry (made by this process's
        /// `SET NX PX`, answered): until then every addition sends it again.
        var made = false

        var current: Int64 { Int64(known) + Int64(unsent) + Int64(sending) }
        var periodMillis: Int64 { Int64(periodSeconds) * 1000 }

        /// The unsent count is on its way to the store.
        mutating func markSending() {
            sending = Int32(clamping: Int64(sending) + Int64(unsent))
            unsent = 0
        }

        /// What is unsent, for this window's counter in the store; its expiry the first time.
        func outgoing(_ digests: KeyDigest) -> RateWindowCount {
            RateWindowCount(key: digests.rateLimit(contactID, app: app, route: route.rawValue, window: window),
                            count: Int64(unsent), ttlMillis: made ? nil : 2 * periodMillis)
        }
    }

    /// Keyed by `name(app:route:contactID:)`, a hash, so an entry holds no text of its own.
    private let counters = Mutex([Int: Counter]())
    private let shared: (any SharedRateLimits)?
    /// Names each contact's counters, as the contact's other keys are named.
    private let digests: KeyDigest
    private let metrics: Metrics
    private let logger: Logger

    /// - Parameter shared: where the counts are shared (the Redis store); nil counts in this process only.
    init(shared: (any SharedRateLimits)?, digests: KeyDigest, metrics: Metrics, logger: Logger) {
        self.shared = shared
        self.digests = digests
        self.metrics = metrics
        self.logger = logger
    }

    /// Requests a process admits per contact, route and window that the store has not heard of.
    static func share(_ limit: ClientPolicy.RateLimit) -> Int64 {
        let perSync = Double(limit.requests) * Double(syncMillis) / (Double(max(limit.perSeconds, 1)) * 1000)
        return Int64(max(1, min(perSync.rounded(.down), 1e12)))
    }

    /// Calls `completion` on `loop`'s thread with nil when the request is admitted, or with
    /// `429 rate_limited` and its `Retry-After`: before returning, unless the contact's count must
    /// reach the store first. Call on `loop`.
    func admit(app: AppPolicy, route: String, contactID: String, on loop: EventLoop,
               completion: @escaping (ContractError?) -> Void) {
        guard let limit = app.client.rateLimits[route], let route = Route(rawValue: route) else {
            completion(nil)
            return
        }
        check(app: app.id, route: route, contactID: contactID, limit: limit, on: loop, completion: completion)
    }

    /// The check as a registration's admission, started with its dedupe lookups; nil when the
    /// route has no limit.
    func admission(app: AppPolicy, route: String, contactID: String) -> Registrar.Admission? {
        guard let limit = app.client.rateLimits[route], let route = Route(rawValue: route) else { return nil }
        let appID = app.id
        return { [self] loop, verdict in check(app: appID, route: route, contactID: contactID, limit: limit, on: loop, completion: verdict) }
    }

    private enum Decision {
        case admitted
        case refused(retryAfterSeconds: Int)
        /// The store must hear of `count` first (the process's share is used up).
        case send(Counter, window: Int64)
    }

    /// Decides, or sends the contact's count first when this process's share is used up and
    /// decides again once the store has answered (again and again while a burst keeps using the
    /// share up: each round admits or refuses at least one request). Without an answer it decides
    /// by this process's own count, and what it then admits is the fallback.
    private func check(app: String, route: Route, contactID: String, limit: ClientPolicy.RateLimit, on loop: EventLoop,
                       mayWait: Bool = true, completion: @escaping (ContractError?) -> Void) {
        let name = Self.name(app: app, route: route, contactID: contactID)
        let decision = decide(name, app: app, route: route, contactID: contactID, limit: limit, now: Int64(SystemClock.epochMillis()),
                              mayWait: mayWait && shared != nil)
        guard case .send(let unsent, let window) = decision, let shared else {
            completion(refusal(decision, route: route))
            return
        }
        let count = unsent.outgoing(digests)
        shared.add([count], on: loop) { [self] result in
            guard settle(name, window: window, count: count.count, result: result.map { $0.first ?? 0 }) else {
                let decision = decide(name, app: app, route: route, contactID: contactID, limit: limit, now: Int64(SystemClock.epochMillis()),
                                      mayWait: false)
                if case .admitted = decision {
                    metrics.rateLimitFallback(app: app)
                    logger.bounded(.warning, "rate limit store unavailable; request admitted", key: app,
                                   [("app", app), ("route", route.rawValue), ("error", result.failureDetail)])
                }
                completion(refusal(decision, route: route))
                return
            }
            check(app: app, route: route, contactID: contactID, limit: limit, on: loop, completion: completion)
        }
    }

    /// A counter's name: the seeded (per process, so not steerable) hash of its app, route and contact; two that collide share a count.
    private static func name(app: String, route: Route, contactID: String) -> Int {
        var hasher = Hasher()
        hasher.combine(app)
        hasher.combine(route.rawValue)
        hasher.combine(contactID)
        return hasher.finalize()
    }

    private func refusal(_ decision: Decision, route: Route) -> ContractError? {
        guard case .refused(let seconds) = decision else { return nil }
        return ContractError(.rateLimited, "too many \(route.rawValue) requests; try again later", retryAfter: seconds)
    }

    /// Counts the request in when it fits: refused when the contact is at its limit as far as this
    /// process knows, sent first when the process's share is used up and `mayWait`.
    private func decide(_ name: Int, app: String, route: Route, contactID: String, limit: ClientPolicy.RateLimit, now: Int64,
                        mayWait: Bool) -> Decision {
        let seconds = Int32(clamping: max(limit.perSeconds, 1))
        let period = Int64(seconds) * 1000
        let window = now / period
        return counters.withLock { counters in
            // In place: one lookup, the counter's strings neither copied nor released.
            Self.count(&counters[name, default: Counter(app: app, contactID: contactID, window: window, periodSeconds: seconds, route: route)],
                       limit: limit, window: window, now: now, mayWait: mayWait)
        }
    }

    /// `decide` on the contact's counter, under the lock.
    private static func count(_ counter: inout Counter, limit: ClientPolicy.RateLimit, window: Int64, now: Int64, mayWait: Bool) -> Decision {
        let seconds = Int32(clamping: max(limit.perSeconds, 1))
        let period = Int64(seconds) * 1000
        if counter.window != window || counter.periodSeconds != seconds {
            counter.previous = counter.window == window - 1 && counter.periodSeconds == seconds ? Int32(clamping: counter.current) : 0
            counter.periodSeconds = seconds
            (counter.known, counter.unsent, counter.sending, counter.window, counter.made) = (0, 0, 0, window, false)
        }
        let elapsed = Double(now - window * period)
        let previousWeight = Double(counter.previous) * (1 - elapsed / Double(period))
        let requests = Double(min(limit.requests, Int(countCeiling)))
        if previousWeight + Double(counter.current) + 1 > requests {
            let wait = waitMillis(previous: Double(counter.previous), current: Double(counter.current), requests: requests,
                                  elapsed: elapsed, period: Double(period))
            return .refused(retryAfterSeconds: Int(max(1, min((wait / 1000).rounded(.up), 1e9))))
        }
        if mayWait, Int64(counter.unsent) + Int64(counter.sending) >= share(limit) {
            // Its key is made outside the lock (a digest).
            let unsent = counter
            counter.markSending()
            return .send(unsent, window: window)
        }
        counter.unsent += 1
        return .admitted
    }

    /// Takes the store's answer for `count`, added to window `window`: true when it answered.
    @discardableResult
    private func settle(_ name: Int, window: Int64, count: Int64, result: Result<Int64, StoreError>) -> Bool {
        counters.withLock { counters in
            guard let index = counters.index(forKey: name) else { return }
            Self.settle(&counters.values[index], window: window, count: count, result: result)
        }
        if case .success = result { return true }
        return false
    }

    private static func settle(_ counter: inout Counter, window: Int64, count: Int64, result: Result<Int64, StoreError>) {
        if counter.window == window {
            counter.sending = Int32(clamping: max(0, Int64(counter.sending) - count))
            switch result {
            // The total includes this count and whatever was added before it, by anyone.
            case .success(let total):
                // Bounded: a counter set by hand to near Int64.max must not overflow the sums.
                counter.known = max(counter.known, Int32(clamping: min(total, countCeiling)))
                counter.made = true
            // Not shared, still counted here.
            case .failure: counter.known = Int32(clamping: min(Int64(counter.known) + count, countCeiling))
            }
        } else if counter.window == window + 1, case .success(let total) = result {
            counter.previous = max(counter.previous, Int32(clamping: min(total, countCeiling)))
        }
    }

    /// How long until one more request fits: within this window once the previous one's weight
    /// has faded enough, else after this window ends, once this one's weight (as the previous) has.
    static func waitMillis(previous: Double, current: Double, requests: Double, elapsed: Double, period: Double) -> Double {
        if current + 1 <= requests, previous > 0 {
            return max(0, period * (1 - (requests - current - 1) / previous) - elapsed)
        }
        let rest = period - elapsed
        guard current > 0 else { return rest }
        return rest + max(0, period * (1 - (requests - 1) / current))
    }

    // MARK: The counts meet

    /// Every `syncMillis`: what this process admitted goes to the store from `loop`, a few hundred
    /// counters a turn (the requests on that loop go on between them), and counters of windows
    /// gone by are forgotten. Ends when the task is cancelled.
    func startSync(on loop: EventLoop) -> Task<Void, Never> {
        Task.detached { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(Self.syncMillis))
                for chunk in unsentCounts() {
                    loop.execute { [self] in send(chunk, on: loop) }
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
        }
    }

    /// Counts on their way to the store, and whose they are.
    private struct Outgoing: Sendable {
        var names: [Int] = []
        var windows: [Int64] = []
        var counts: [RateWindowCount] = []
    }

    /// Every counter's unsent count, now on its way, in chunks; forgets counters two windows old.
    private func unsentCounts() -> [Outgoing] {
        let now = Int64(SystemClock.epochMillis())
        var unsent: [(name: Int, counter: Counter)] = []
        counters.withLock { counters in
            var gone: [Int] = []
            // By index: a value changed in place keeps every index (and the table) as it is, and
            // an optional-chained `counters[name]?` change allocates its accessor's frame each time.
            var index = counters.startIndex
            while index != counters.endIndex {
                let (name, counter) = counters[index]
                // A counter two windows old counts for nothing any more.
                if now / counter.periodMillis - counter.window >= 2 {
                    gone.append(name)
                } else if counter.unsent > 0, shared != nil {
                    unsent.append((name, counter))
                    counters.values[index].markSending()
                }
                counters.formIndex(after: &index)
            }
            // Removed after the walk: a removal moves entries, so indices would not hold.
            for name in gone { counters.removeValue(forKey: name) }
            // A dictionary keeps its buckets when emptied: after a burst of contacts, copy it smaller.
            if !gone.isEmpty, counters.capacity > 4 * counters.count + 1024 {
                var smaller = [Int: Counter](minimumCapacity: counters.count)
                for (name, counter) in counters { smaller[name] = counter }
                counters = smaller
            }
        }
        // The keys (a digest each) are made outside the lock the requests take.
        var chunks: [Outgoing] = []
        var chunk = Outgoing()
        for (name, counter) in unsent {
            chunk.names.append(name)
            chunk.windows.append(counter.window)
            chunk.counts.append(counter.outgoing(digests))
            if chunk.counts.count == Self.syncChunk {
                chunks.append(chunk)
                chunk = Outgoing()
            }
        }
        if !chunk.counts.isEmpty { chunks.append(chunk) }
        return chunks
    }

    private static let syncChunk = 256

    private func send(_ outgoing: Outgoing, on loop: EventLoop) {
        shared?.add(outgoing.counts, on: loop) { [self] result in
            for index in outgoing.counts.indices {
                let one = result.map { totals in index < totals.count ? totals[index] : 0 }
                settle(outgoing.names[index], window: outgoing.windows[index], count: outgoing.counts[index].count, result: one)
            }
            if case .failure(let error) = result {
                logger.bounded(.warning, "rate limit store unavailable; counts kept in this process", key: "sync",
                               [("error", error.detail)])
            }
        }
    }
}

private extension Result where Failure == StoreError {
    var failureDetail: String {
        if case .failure(let error) = self { return error.detail }
        return ""
    }
}
