import PWCore
import Synchronization

/// When this process last wrote each installation's last-seen time, so that a dedupe hit writes
/// it at most once per interval (contract section 8).
///
/// A table of `slots` entries (a power of two), each the 64-bit hash of a registration's
/// fingerprint (its tag) and the monotonic time of the last write, found by the hash: 16 bytes a
/// slot, allocated at the first write and never grown (1 MiB at the default, whatever the number
/// of installations; the dictionary before it held up to 200,000 entries, 4.2 MiB, for good once
/// it had filled). An installation whose slot holds another's tag counts as not written: it
/// writes and takes the slot. So a crowded table costs writes, and never makes a write late:
/// two installations sharing a slot cannot keep each other's last-seen from being refreshed.
///
/// Thread-safety: one lock around the table; the loops read the clock before taking it, so a
/// time handed in may be earlier than the one another thread just wrote (compared, never
/// subtracted).
final class TouchMemory: Sendable {
    private struct Slot {
        var tag: UInt64
        var nanos: UInt64
    }

    static let defaultSlots = 1 << 16

    private let table = Mutex<[Slot]>([])
    private let mask: Int
    private let now: @Sendable () -> UInt64

    init(slots: Int = TouchMemory.defaultSlots, now: @escaping @Sendable () -> UInt64 = { MonotonicClock.nowNanos() }) {
        precondition(slots > 0 && slots & (slots - 1) == 0, "slots must be a power of two")
        mask = slots - 1
        self.now = now
    }

    /// Whether `key`'s last-seen time should be written now (and, if so, notes that it is).
    func due(_ key: String, intervalMillis: Int) -> Bool {
        let time = now()
        let interval = UInt64(max(intervalMillis, 1)) * 1_000_000
        let (tag, index) = Self.place(key, mask: mask)
        return table.withLock { table in
            if table.isEmpty { table = Array(repeating: Slot(tag: 0, nanos: 0), count: mask + 1) }
            let slot = table[index]
            // `slot.nanos` may be a moment after `time`: another thread read the clock after this one.
            if slot.tag == tag, time < slot.nanos &+ interval { return false }
            table[index] = Slot(tag: tag, nanos: time)
            return true
        }
    }

    /// Notes that `key`'s record was just written (a registration that was forwarded).
    func written(_ key: String) {
        let time = now()
        let (tag, index) = Self.place(key, mask: mask)
        table.withLock { table in
            if table.isEmpty { table = Array(repeating: Slot(tag: 0, nanos: 0), count: mask + 1) }
            table[index] = Slot(tag: tag, nanos: time)
        }
    }

    /// The key's tag (never 0, the empty slot's) and slot (from the hash's high bits).
    private static func place(_ key: String, mask: Int) -> (tag: UInt64, index: Int) {
        var hasher = Hasher()
        hasher.combine(key)
        let hash = UInt64(bitPattern: Int64(hasher.finalize()))
        return (hash | 1, Int(truncatingIfNeeded: hash >> 32) & mask)
    }
}
