import Synchronization

/// Bounds the log lines that outside traffic can cause: for each key (a line's logger, message
/// and reason, with its app), at most `linesPerWindow` lines per window; the lines left out are
/// counted, and the next line of that key that is written says how many (`suppressed`).
///
/// Memory is bounded too: at most `maxKeys` keys are tracked at once. When a flood of distinct
/// keys fills the table within one window, further new keys share one overflow key, so an
/// attacker who varies the reason still gets one line per window in all.
///
/// Thread-safe through one `Mutex`; it is taken only for lines that pass the level check.
public final class LogLimiter: Sendable {
    public let windowMillis: UInt64
    public let linesPerWindow: Int
    public let maxKeys: Int
    private let now: @Sendable () -> UInt64

    private struct Entry {
        var windowStart: UInt64
        var written: Int
        var suppressed: Int
    }

    private static let overflowKey = "\u{0}overflow"
    private let table = Mutex<[String: Entry]>([:])

    /// - Parameter now: monotonic milliseconds; tests pass their own clock.
    public init(windowMillis: UInt64 = 1000, linesPerWindow: Int = 1, maxKeys: Int = 1024,
                now: @escaping @Sendable () -> UInt64 = { MonotonicClock.nowMillis() }) {
        self.windowMillis = max(1, windowMillis)
        self.linesPerWindow = max(1, linesPerWindow)
        self.maxKeys = max(1, maxKeys)
        self.now = now
    }

    /// Whether a line with this key may be written now: nil when it is to be left out, otherwise
    /// the number of lines of the key left out since the last one written.
    public func admit(_ key: String) -> Int? {
        return table.withLock { table -> Int? in
            // Read under the lock: a time read before it could precede a window another thread
            // started meanwhile, and the unsigned differences below would trap.
            let now = now()
            var key = key
            if table[key] == nil, table.count >= maxKeys {
                // Keys whose window is over are forgotten, with whatever count they held.
                table = table.filter { now - $0.value.windowStart < windowMillis }
                if table.count >= maxKeys { key = Self.overflowKey }
            }
            var entry = table[key] ?? Entry(windowStart: now, written: 0, suppressed: 0)
            if now - entry.windowStart >= windowMillis {
                entry.windowStart = now
                entry.written = 0
            }
            guard entry.written < linesPerWindow else {
                entry.suppressed += 1
                table[key] = entry
                return nil
            }
            let suppressed = entry.suppressed
            entry.written += 1
            entry.suppressed = 0
            table[key] = entry
            return suppressed
        }
    }
}
