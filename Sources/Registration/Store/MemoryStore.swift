#if canImport(Glibc)
import Glibc
#endif
import Loops
import PWCore
import Synchronization

/// The embedded store: one process, nothing shared, nothing survives a restart.
///
/// Thread-safe through one `Mutex`. Expired entries are dropped when read and swept every
/// `sweepInterval` writes, so memory tracks the live entries. The loop an operation is made for
/// changes nothing here.
public final class MemoryStore: DedupeStore {
    private struct Entry {
        var value: String
        var expiresAt: UInt64  // monotonic nanoseconds
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var writesSinceSweep = 0
    }

    private let state = Mutex(State())
    private let sweepInterval = 4096
    public let kind = "memory"

    public init() {}

    public func get(_ key: String, on loop: EventLoop?) async throws(StoreError) -> String? {
        lookup(key)
    }

    public func peek(_ key: String, on loop: EventLoop, completion: @escaping (Result<String?, StoreError>) -> Void) {
        completion(.success(lookup(key)))
    }

    private func lookup(_ key: String) -> String? {
        let now = MonotonicClock.nowNanos()
        return state.withLock { state in
            guard let entry = state.entries[key] else { return nil }
            if entry.expiresAt <= now {
                state.entries[key] = nil
                return nil
            }
            return entry.value
        }
    }

    public func set(_ key: String, _ value: String, ttlSeconds: Int, on loop: EventLoop?) async throws(StoreError) {
        write(key, value, ttlNanos: UInt64(max(ttlSeconds, 1)) * 1_000_000_000)
    }

    public func delete(_ key: String, on loop: EventLoop?) async throws(StoreError) {
        _ = state.withLock { $0.entries.removeValue(forKey: key) }
    }

    public func release(_ key: String, owner: String, on loop: EventLoop?) async throws(StoreError) {
        state.withLock { state in
            if state.entries[key]?.value == owner { state.entries[key] = nil }
        }
    }

    public func checkAndLock(entry: String, fingerprint: String, lock: String, owner: String,
                             ttlMillis: Int, on loop: EventLoop?) async throws(StoreError) -> LockAttempt {
        let now = MonotonicClock.nowNanos()
        return state.withLock { state in
            if let current = state.entries[entry], current.expiresAt > now, current.value == fingerprint { return .current }
            if let held = state.entries[lock], held.expiresAt > now { return .busy }
            state.entries[lock] = Entry(value: owner, expiresAt: now + UInt64(max(ttlMillis, 1)) * 1_000_000)
            return .acquired
        }
    }

    public func commitAndUnlock(entry: String, fingerprint: String, ttlSeconds: Int, lock: String,
                                owner: String, on loop: EventLoop?) async throws(StoreError) {
        write(entry, fingerprint, ttlNanos: UInt64(max(ttlSeconds, 1)) * 1_000_000_000)
        state.withLock { state in
            if state.entries[lock]?.value == owner { state.entries[lock] = nil }
        }
    }

    public func commitAndUnlock(entry: String, fingerprint: String, ttlSeconds: Int, lock: String, owner: String,
                                on loop: EventLoop, completion: @escaping (Result<Void, StoreError>) -> Void) {
        write(entry, fingerprint, ttlNanos: UInt64(max(ttlSeconds, 1)) * 1_000_000_000)
        state.withLock { state in
            if state.entries[lock]?.value == owner { state.entries[lock] = nil }
        }
        completion(.success(()))
    }

    public func isReachable() async -> Bool { true }

    /// Live and not yet swept entries, for tests and metrics.
    public var count: Int { state.withLock { $0.entries.count } }

    private func write(_ key: String, _ value: String, ttlNanos: UInt64) {
        let now = MonotonicClock.nowNanos()
        state.withLock { state in
            state.entries[key] = Entry(value: value, expiresAt: now + ttlNanos)
            state.writesSinceSweep += 1
            if state.writesSinceSweep >= sweepInterval {
                state.writesSinceSweep = 0
                state.entries = state.entries.filter { $0.value.expiresAt > now }
            }
        }
    }
}
