import PWCore
import Synchronization

/// When this process last wrote each installation's last-seen time, so that a dedupe hit writes
/// it at most once per interval (contract section 8).
///
/// Keyed by a 64-bit hash of the registration's fingerprint, not its text, so a registration storm
/// leaves little resident. Bounded: emptied when it reaches `capacity` entries, which at worst
/// costs one more write per installation. Two installations whose hashes collide share one time:
/// one may see its last-seen refreshed up to one interval later, never expired early by it (a
/// write it skips is at most one interval late, and the interval is a tenth of `expire_after`).
///
/// A dictionary, not a fixed table of slots: once the installations of an interval outnumber the
/// slots, every hit writes again (BENCHMARKS.md, "Where the figures in comments went").
///
/// Thread-safety: one lock; the loops read the clock before taking it, so a time handed in may
/// be earlier than the one another thread just wrote (compared, never subtracted).
package final class TouchMemory: Sendable {
    /// 3/4 of a power of two, so a full memory fills its table: a dictionary keeps its load under
    /// 3/4, and one entry more would double the table.
    static let defaultCapacity = 196_608

    private let written = Mutex<[UInt64: UInt64]>([:])
    private let capacity: Int
    private let now: @Sendable () -> UInt64

    init(capacity: Int = TouchMemory.defaultCapacity, now: @escaping @Sendable () -> UInt64 = { MonotonicClock.nowNanos() }) {
        self.capacity = max(1, capacity)
        self.now = now
    }

    /// Whether `key`'s last-seen time should be written now (and, if so, notes that it is).
    func due(_ key: String, intervalMillis: Int) -> Bool {
        let time = now()
        let interval = UInt64(max(intervalMillis, 1)) * 1_000_000
        let slot = Self.slot(key)
        let capacity = self.capacity
        return written.withLock { written in
            // `last` may be a moment after `time`: another thread read the clock after this one.
            if let last = written[slot], time < last &+ interval { return false }
            if written[slot] == nil, written.count >= capacity { written.removeAll(keepingCapacity: true) }
            written[slot] = time
            return true
        }
    }

    /// Notes that `key`'s record was just written (a registration that was forwarded).
    func written(_ key: String) {
        let time = now()
        let slot = Self.slot(key)
        let capacity = self.capacity
        written.withLock { written in
            if written[slot] == nil, written.count >= capacity { written.removeAll(keepingCapacity: true) }
            written[slot] = time
        }
    }

    private static func slot(_ key: String) -> UInt64 {
        var hasher = Hasher()
        hasher.combine(key)
        return UInt64(bitPattern: Int64(hasher.finalize()))
    }
}
