import PWCore
import Synchronization

/// Store writes that failed after an upstream took the change they record (a dedupe commit, an
/// identity, an inventory record), retried until the store answers again: a master failover must
/// not make PushWarden forget a registration it answered.
///
/// Keyed by what they write: a newer write for the same key replaces a waiting one, so a late
/// retry never puts back an older value. Bounded in count and age; whatever falls out is counted
/// and logged. Retries run in one task that exists only while something waits.
public final class PendingWrites: Sendable {
    /// What a pending write records: the metric's `kind`.
    public enum Kind: String, Sendable, CaseIterable {
        case dedupe, identity, inventory
    }

    public struct Limits: Sendable {
        /// Writes kept at once; past this a new one is dropped.
        public var capacity: Int
        /// How long a write is retried before it is dropped.
        public var maxAgeMillis: UInt64
        public var firstBackoffMillis: UInt64
        public var maxBackoffMillis: UInt64

        public init(capacity: Int = 20_000, maxAgeMillis: UInt64 = 10 * 60_000, firstBackoffMillis: UInt64 = 100, maxBackoffMillis: UInt64 = 2_000) {
            self.capacity = capacity
            self.maxAgeMillis = maxAgeMillis
            self.firstBackoffMillis = firstBackoffMillis
            self.maxBackoffMillis = maxBackoffMillis
        }
    }

    public typealias Write = @Sendable () async throws(StoreError) -> Void

    private struct Entry {
        let kind: Kind
        let write: Write
        /// Tells this entry from a newer one under the same key once its retry comes back.
        let generation: UInt64
        let since: UInt64
        var due: UInt64
        var backoff: UInt64
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var nextGeneration: UInt64 = 0
        var draining = false
    }

    private let state = Mutex(State())
    private let limits: Limits
    private let metrics: Metrics
    private let logger: Logger
    private let clock: @Sendable () -> UInt64

    public init(metrics: Metrics, logger: Logger, limits: Limits = Limits(), clock: @escaping @Sendable () -> UInt64 = MonotonicClock.nowMillis) {
        self.metrics = metrics
        self.logger = logger
        self.limits = limits
        self.clock = clock
    }

    /// Writes waiting now.
    public var count: Int { state.withLock { $0.entries.count } }

    /// Keeps `write` to retry (replacing one waiting under `key`) after it failed with `error`.
    public func add(_ kind: Kind, key: String, error: StoreError, _ write: @escaping Write) {
        let now = clock()
        let (startDrain, kept) = state.withLock { state -> (Bool, Bool) in
            // Full: the new write is the one dropped (finding the oldest would cost a scan per write).
            if state.entries[key] == nil, state.entries.count >= limits.capacity { return (false, false) }
            state.nextGeneration += 1
            state.entries[key] = Entry(kind: kind, write: write, generation: state.nextGeneration, since: now,
                                       due: now + limits.firstBackoffMillis, backoff: limits.firstBackoffMillis)
            let start = !state.draining
            state.draining = true
            return (start, true)
        }
        guard kept else { return drop(kind, reason: "capacity") }
        metrics.storeWrite(kind: kind.rawValue, result: "deferred")
        logger.bounded(.warning, "store write failed after the upstream took the change; retrying until the store answers", key: "pending-writes",
                       [("kind", kind.rawValue), ("error", error.detail)])
        if startDrain { Task.detached { [self] in await drain() } }
    }

    /// Waits up to `millis` for every waiting write to go through: false when some still wait.
    public func flushed(withinMillis millis: UInt64) async -> Bool {
        let deadline = clock() + millis
        while count > 0 {
            if clock() >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    /// Forgets a waiting write: a newer one for `key` succeeded or is being made.
    public func cancel(_ key: String) {
        state.withLock { _ = $0.entries.removeValue(forKey: key) }
    }

    /// Retries what is due until nothing waits.
    private func drain() async {
        while true {
            let now = clock()
            let (due, wait) = state.withLock { state -> ([(String, Entry)], UInt64?) in
                for (key, entry) in state.entries where now >= entry.since + limits.maxAgeMillis {
                    state.entries[key] = nil
                    drop(entry.kind, reason: "max_age")
                }
                if state.entries.isEmpty {
                    state.draining = false
                    return ([], nil)
                }
                let due = state.entries.filter { $0.value.due <= now }.map { ($0.key, $0.value) }
                let next = state.entries.values.map(\.due).min() ?? now
                return (due, next > now ? next - now : 0)
            }
            guard let wait else { return }
            if due.isEmpty {
                try? await Task.sleep(for: .milliseconds(max(wait, 1)))
                continue
            }
            let results = await mapConcurrently(due, width: 32) { item in
                await capture { () async throws(StoreError) in try await item.1.write() }
            }
            let after = clock()
            state.withLock { state in
                for ((key, entry), result) in zip(due, results) {
                    // A newer write under this key came meanwhile: it stands on its own.
                    guard let current = state.entries[key], current.generation == entry.generation else { continue }
                    switch result {
                    case .success:
                        state.entries[key] = nil
                        metrics.storeWrite(kind: entry.kind.rawValue, result: "stored")
                    case .failure:
                        var next = current
                        next.backoff = min(limits.maxBackoffMillis, current.backoff * 2)
                        next.due = after + next.backoff
                        state.entries[key] = next
                    }
                }
            }
        }
    }

    private func drop(_ kind: Kind, reason: String) {
        metrics.storeWrite(kind: kind.rawValue, result: "dropped")
        logger.bounded(.error, "store write dropped before the store answered; the change stands upstream but this record of it is lost",
                       key: "pending-writes-dropped", [("kind", kind.rawValue), ("reason", reason)])
    }
}
