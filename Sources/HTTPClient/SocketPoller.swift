import PWCore
internal import CCurl
internal import CShims
#if canImport(Glibc)
import Glibc
#endif

/// Sole owner of one multi handle's epoll instance and its wake pipe: the "event library" side of
/// libcurl's socket interface (https://curl.se/libcurl/c/curl_multi_socket_action.html).
///
/// curl tells it which sockets to watch for what (`watch`, from CURLMOPT_SOCKETFUNCTION) and when
/// it next wants a timeout call (`setTimer`, from CURLMOPT_TIMERFUNCTION); the client's thread sleeps in
/// `wait` and hands ready sockets back to curl (an event loop instead nests this epoll set in its
/// own and calls `wait` without sleeping once it is readable). A wait costs O(ready sockets), not
/// O(connections) as `curl_multi_poll` did.
///
/// Thread-safety: `wake()` may be called from any thread; it only writes to the pipe, whose
/// descriptors stay open for the object's whole life. Everything else runs on the driving thread
/// (directly, or inside a curl call that fires the callbacks). Hence `@unchecked Sendable`.
/// The multi handle keeps the poller alive until after `curl_multi_cleanup`, whose socket
/// callbacks still reach it.
final class SocketPoller: @unchecked Sendable {
    private let epollFD: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let events: UnsafeMutablePointer<epoll_event>
    private let capacity: Int32 = 256
    /// CLOCK_MONOTONIC nanoseconds at which curl wants a `CURL_SOCKET_TIMEOUT` call; nil for none.
    private var deadline: UInt64?

    init?() {
        let epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { return nil }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            close(epollFD)
            return nil
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = fds[0]
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, fds[0], &event) == 0 else {
            close(fds[0])
            close(fds[1])
            close(epollFD)
            return nil
        }
        self.epollFD = epollFD
        self.wakeRead = fds[0]
        self.wakeWrite = fds[1]
        self.events = .allocate(capacity: Int(capacity))
        self.events.initialize(repeating: epoll_event(), count: Int(capacity))
    }

    deinit {
        events.deallocate()
        close(wakeWrite)
        close(wakeRead)
        close(epollFD)
    }

    /// The epoll descriptor, for an event loop that nests this set in its own.
    var descriptor: Int32 { epollFD }

    /// When curl next wants a timeout call (CLOCK_MONOTONIC nanoseconds), if it does.
    var nextDeadline: UInt64? { deadline }

    /// Makes a current or the next `wait` return. A full pipe already guarantees that, so a
    /// failed write is fine.
    func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// What the epoll set holds for one descriptor number.
    private struct Slot {
        /// The events the descriptor is registered with in the epoll set; 0 when not registered.
        var registered: UInt32 = 0
    }

    /// Indexed by descriptor number; grows to the highest descriptor curl has shown us.
    private var slots: [Slot] = []

    private func withSlot<R>(_ fd: Int32, _ body: (inout Slot) -> R) -> R {
        let index = Int(fd)
        if index >= slots.count { slots.append(contentsOf: repeatElement(Slot(), count: index + 1 - slots.count)) }
        return body(&slots[index])
    }

    /// CURLMOPT_SOCKETFUNCTION's work: watch `fd` for `what` (CURL_POLL_IN/OUT/INOUT), or stop (REMOVE).
    ///
    /// Epoll is told only about changes: curl repeats a socket's interest often, and a socket it
    /// starts watching is added directly rather than after a failed EPOLL_CTL_MOD.
    ///
    /// A socket curl stops watching leaves the epoll set at once. Keeping idle keep-alive sockets
    /// registered until their next use would save that and the re-add, but then HTTP/2 transfers
    /// failed now and then with CURLE_HTTP2_STREAM (about 4 in 100 runs of
    /// `concurrentCallsShareOneHTTP2Connection`, libcurl 7.88), even when the events of unwatched
    /// sockets were still handed to curl.
    func watch(_ fd: Int32, _ what: Int32) {
        guard fd >= 0 else { return }
        var interest: UInt32 = 0
        if what & Int32(CURL_POLL_IN) != 0 { interest |= EPOLLIN.rawValue }
        if what & Int32(CURL_POLL_OUT) != 0 { interest |= EPOLLOUT.rawValue }
        withSlot(fd) { slot in
            guard what != Int32(CURL_POLL_REMOVE), interest != 0 else {
                // Fails harmlessly when curl already closed the socket (close drops the registration).
                if slot.registered != 0 { _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil) }
                slot.registered = 0
                return
            }
            guard slot.registered != interest else { return }
            var event = epoll_event()
            event.events = interest
            event.data.fd = fd
            if slot.registered != 0 {
                // A descriptor number closed and reopened behind our back is not registered any more.
                if epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event) != 0, errno == ENOENT {
                    _ = epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event)
                }
            } else if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0, errno == EEXIST {
                _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
            }
            slot.registered = interest
        }
    }

    /// CURLOPT_OPENSOCKETFUNCTION's work: what curl does itself, plus a fresh slot for the number,
    /// so a number reused after a close curl did not report is never taken as still registered.
    func openSocket(family: Int32, type: Int32, protocol: Int32) -> Int32 {
        let fd = socket(family, type, `protocol`)
        guard fd >= 0 else { return fd }
        withSlot(fd) { $0 = Slot() }
        return fd
    }

    /// CURLOPT_CLOSESOCKETFUNCTION's work. The close also drops any epoll registration.
    func closeSocket(_ fd: Int32) -> Int32 {
        if fd >= 0, Int(fd) < slots.count { slots[Int(fd)] = Slot() }
        return close(fd)
    }

    /// CURLMOPT_TIMERFUNCTION's work: curl wants one timeout call in `milliseconds`; -1 cancels it.
    func setTimer(_ milliseconds: Int) {
        deadline = milliseconds < 0 ? nil : Self.now() + UInt64(milliseconds) * 1_000_000
    }

    /// True, once, when curl's deadline has passed: the caller then owes curl a timeout call.
    func takeDueTimeout() -> Bool {
        guard let deadline, Self.now() >= deadline else { return false }
        self.deadline = nil
        return true
    }

    /// Sleeps until a watched socket is ready, `wake()` is called, curl's deadline passes, or
    /// `capMillis` elapse; then calls `ready` with each ready socket and its `CURL_CSELECT_*` flags.
    func wait(capMillis: Int32, _ ready: (Int32, Int32) -> Void) {
        var timeout = capMillis
        if let deadline {
            let now = Self.now()
            // Rounded up: waking before the deadline would just cost another turn.
            let remaining = deadline > now ? (deadline - now + 999_999) / 1_000_000 : 0
            timeout = Int32(min(UInt64(capMillis), remaining))
        }
        let count = epoll_wait(epollFD, events, capacity, timeout)
        guard count > 0 else { return }
        for i in 0..<Int(count) {
            let event = events[i]
            let fd = event.data.fd
            if fd == wakeRead {
                drainWakePipe()
                continue
            }
            let flags = event.events
            var select: Int32 = 0
            // A hang-up or error is reported as readable/writable too, so curl reads or writes and
            // learns the failure itself.
            let failed = flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            if flags & EPOLLIN.rawValue != 0 || failed { select |= Int32(CURL_CSELECT_IN) }
            if flags & EPOLLOUT.rawValue != 0 || failed { select |= Int32(CURL_CSELECT_OUT) }
            if flags & EPOLLERR.rawValue != 0 { select |= Int32(CURL_CSELECT_ERR) }
            ready(fd, select)
        }
    }

    private func drainWakePipe() {
        var buffer = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while withUnsafeMutableBytes(of: &buffer, { read(wakeRead, $0.baseAddress, $0.count) }) > 0 {}
    }

    private static func now() -> UInt64 { MonotonicClock.nowNanos() }
}

/// CURLMOPT_SOCKETFUNCTION. `userp` is the multi handle's poller, unretained (the multi handle owns it).
let curlSocketCallback: pw_curl_socket_cb = { _, socket, what, userp, _ in
    guard let userp else { return -1 }
    Unmanaged<SocketPoller>.fromOpaque(userp).takeUnretainedValue().watch(socket, what)
    return 0
}

/// CURLMOPT_TIMERFUNCTION. `userp` as for `curlSocketCallback`. curl must not be re-entered here,
/// so it only records the deadline.
let curlTimerCallback: pw_curl_timer_cb = { _, milliseconds, userp in
    guard let userp else { return -1 }
    Unmanaged<SocketPoller>.fromOpaque(userp).takeUnretainedValue().setTimer(milliseconds)
    return 0
}

/// CURLOPT_OPENSOCKETFUNCTION. `clientp` is the multi handle's poller, unretained (the multi handle owns
/// it and outlives every easy handle and connection).
let curlOpenSocketCallback: @convention(c) (UnsafeMutableRawPointer?, curlsocktype, UnsafeMutablePointer<curl_sockaddr>?)
    -> curl_socket_t = { clientp, _, address in
    guard let clientp, let address else { return -1 }
    return Unmanaged<SocketPoller>.fromOpaque(clientp).takeUnretainedValue()
        .openSocket(family: address.pointee.family, type: address.pointee.socktype, protocol: address.pointee.protocol)
}

/// CURLOPT_CLOSESOCKETFUNCTION. `clientp` as for `curlOpenSocketCallback`; curl also calls it while
/// `curl_multi_cleanup` closes the cached connections, which is why the poller outlives that call.
let curlCloseSocketCallback: @convention(c) (UnsafeMutableRawPointer?, curl_socket_t) -> Int32 = { clientp, fd in
    guard let clientp else { return close(fd) }
    return Unmanaged<SocketPoller>.fromOpaque(clientp).takeUnretainedValue().closeSocket(fd)
}
