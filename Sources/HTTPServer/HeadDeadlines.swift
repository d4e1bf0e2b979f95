import CShims
import Loops

/// One client connection as its loop tracks it, from libmicrohttpd's "started" notice to its
/// "closed" notice: the address place it holds and, while a request head is awaited, its place
/// in the loop's `HeadDeadlines`.
///
/// Loop-confined (hence `@unchecked Sendable`): every field is read and written on the
/// connection's loop thread only, inside MHD callbacks or the loop's own turn.
final class TrackedConnection: @unchecked Sendable {
    let connection: OpaquePointer
    /// The place reserved in the server's `AddressLimiter`, or nil when none was taken.
    let address: AddressKey?
    /// Monotonic nanoseconds since which a head has been awaited (the connection's start or the
    /// previous response's completion).
    var awaitingSince: UInt64 = 0
    fileprivate var previous: TrackedConnection?
    fileprivate var next: TrackedConnection?
    fileprivate var linked = false

    init(connection: OpaquePointer, address: AddressKey?) {
        self.connection = connection
        self.address = address
    }
}

/// The connections of one loop that are waiting for a request head, oldest first, so that a
/// client trickling its head (one header line every few seconds resets libmicrohttpd's idle
/// timeout every time) is cut off once the head has taken `timeout`, whatever it still sends.
///
/// A connection joins at the tail when it starts and after each response, and leaves when its
/// head is complete (the first access call) or it closes: all O(1), no allocation. Since
/// everyone joins with the current time, the list stays ordered, and a sweep looks only at the
/// overdue ones at its front. The loop wakes for the front's deadline: no timer per connection
/// or per request.
///
/// Loop-confined: used on its loop's thread only (checked in debug builds).
final class HeadDeadlines {
    /// Nanoseconds a head may take; 0 disables the deadline.
    let timeout: UInt64
    private var first: TrackedConnection?
    private var last: TrackedConnection?
    /// The daemon's loop, which outlives its daemon context and this.
    private unowned let loop: EventLoop

    init(timeout: UInt64, loop: EventLoop) {
        self.timeout = timeout
        self.loop = loop
    }

    /// Starts (or restarts) the wait for a head on `connection` at `now`.
    func awaitHead(_ connection: TrackedConnection, now: UInt64) {
        loop.assertOnLoop("HeadDeadlines")
        guard timeout > 0 else { return }
        remove(connection)
        connection.awaitingSince = now
        connection.previous = last
        connection.next = nil
        if let last { last.next = connection } else { first = connection }
        last = connection
        connection.linked = true
    }

    /// The head is complete, or the connection is gone.
    func remove(_ connection: TrackedConnection) {
        loop.assertOnLoop("HeadDeadlines")
        guard connection.linked else { return }
        if let previous = connection.previous { previous.next = connection.next } else { first = connection.next }
        if let next = connection.next { next.previous = connection.previous } else { last = connection.previous }
        connection.previous = nil
        connection.next = nil
        connection.linked = false
    }

    /// When the oldest wait runs out, or nil when nothing waits.
    var nextDeadline: UInt64? { first.map { $0.awaitingSince &+ timeout } }

    /// Ends every connection whose head is overdue at `now` (shutdown of its socket: libmicrohttpd
    /// then closes it on its next run) and returns how many it ended.
    func sweep(now: UInt64) -> Int {
        loop.assertOnLoop("HeadDeadlines")
        var ended = 0
        while let oldest = first, oldest.awaitingSince &+ timeout <= now {
            remove(oldest)
            _ = pw_mhd_shutdown_connection(oldest.connection)
            ended += 1
        }
        return ended
    }
}
