import Synchronization

/// A client address as 128 bits (IPv4 in its IPv4-mapped IPv6 form): a dictionary key that
/// costs no allocation.
struct AddressKey: Hashable, Sendable {
    var high: UInt64
    var low: UInt64
}

/// Concurrent connections per client address, counted over the whole server (every loop), so
/// that one address cannot hold every connection slot. A loop reserves a place when it accepts a
/// connection and gives it back when the connection closes: one lock per connection, none per
/// request.
///
/// Counted in one place rather than with libmicrohttpd's per-IP limit, which each daemon (each
/// loop) applies on its own: a limit divided among the loops refuses a client early whenever
/// the kernel's SO_REUSEPORT hash puts more than its share on one loop, and never exactly at the
/// configured number. Thread-safe.
final class AddressLimiter: Sendable {
    /// At most this many connections per address; 0 means no limit.
    let limit: Int
    private let counts = Mutex<[AddressKey: Int]>([:])

    init(limit: Int) { self.limit = limit }

    /// Takes a place for `address`; false when it already holds `limit` connections.
    func reserve(_ address: AddressKey) -> Bool {
        counts.withLock { counts in
            let held = counts[address, default: 0]
            guard held < limit else { return false }
            counts[address] = held + 1
            return true
        }
    }

    /// Gives back a place `reserve` took.
    func release(_ address: AddressKey) {
        counts.withLock { counts in
            guard let held = counts[address] else { return }
            if held <= 1 { counts[address] = nil } else { counts[address] = held - 1 }
        }
    }

    /// Connections currently counted for `address`. For tests.
    func held(_ address: AddressKey) -> Int { counts.withLock { $0[address, default: 0] } }
}
