import CMicroHTTPD
import CShims
import Glibc
import Loops
import PWCore
import Synchronization

/// An HTTP/1.1 server on libmicrohttpd with one event loop per configured thread.
///
/// Each loop owns a libmicrohttpd daemon without threads of its own, on its own listening socket
/// (`SO_REUSEPORT`: the kernel spreads connections over the loops). A request lives on the loop
/// that accepted it: the handler starts on that thread and may answer at once, or later from any
/// thread while the connection is suspended (holding no thread). Whatever else the handler puts
/// on the same loop (a Redis connection, say) shares its epoll set, so a request can be read,
/// looked up and answered without ever leaving its thread.
/// Connections are kept alive unless a response says `Connection: close`.
///
/// A head that a proxy in front could frame or read differently (`RequestFraming`) gets the
/// handler's `refuse` answer and the connection closed. Some answers stay libmicrohttpd 0.9.75's
/// own (a short HTML page, no handler call, connection closed), because it sends them from
/// inside its parser, before any callback that could answer runs, and offers no hook to replace
/// them: 414 (request line over the connection memory), 505 (HTTP major version not 1) and 400
/// for a version string that is not `HTTP/d.d`, both checked before the URI-log callback; 431
/// (header block over the connection memory); 400 for a field line without a colon; 400 (413
/// when it overflows) for a Content-Length that is not all digits, a comma list included; 400
/// for malformed chunk framing in a body. A request line without a target or version is closed
/// without an answer.
///
/// Ownership: the server owns its loops, daemons and listening sockets and stops them exactly
/// once, in `shutdown` or, failing that, in `deinit`. Thread-safe.
public final class HTTPServer: Sendable {
    private enum Lifecycle {
        case running
        case draining
        case stopped
    }

    private let core: ServerCore
    private let loops: [ServerLoop]
    private let lifecycle = Mutex(Lifecycle.running)
    /// The bound port (the kernel's choice when configured with 0).
    public let port: Int

    /// Binds and starts serving.
    /// - Throws: `HTTPServerError` for an invalid configuration, a host that is not an IP
    ///   literal, or when a loop cannot start (port in use, thread creation failed).
    public init(configuration: HTTPServerConfiguration, handler: some HTTPHandler) throws(HTTPServerError) {
        try configuration.validate()
        let core = ServerCore(handler: handler, connectionsPerAddress: configuration.perAddressConnectionLimit,
                              headTimeoutSeconds: configuration.headTimeoutSeconds)
        var loops: [ServerLoop] = []
        let guardSocket = try ServerLoop.listenSocket(configuration.host, port: configuration.port, guard: true)
        defer { close(guardSocket) }
        let port = Int(pw_socket_port(guardSocket))
        do throws(HTTPServerError) {
            for index in 0..<configuration.threads {
                let loop = try ServerLoop(index: index, port: port, configuration: configuration, core: core)
                loops.append(loop)
            }
        } catch {
            for loop in loops { loop.stop() }
            throw error
        }
        self.core = core
        self.loops = loops
        self.port = port
    }

    deinit {
        let stop = lifecycle.withLock { state -> Bool in
            guard state != .stopped else { return false }
            state = .stopped
            return true
        }
        if stop { stopLoops() }
    }

    /// Stops accepting (new connection attempts are refused), lets in-flight requests finish for
    /// up to `gracePeriodSeconds`, then stops every loop. Responses sent meanwhile carry
    /// `Connection: close`. Requests still running at the deadline are cut off with a 503; their
    /// handlers' results are dropped. Idempotent: a second call returns once the first has finished.
    public func shutdown(gracePeriodSeconds: Double) async {
        let first = lifecycle.withLock { state -> Bool in
            guard state == .running else { return false }
            state = .draining
            return true
        }
        guard first else {
            while lifecycle.withLock({ $0 != .stopped }) {
                try? await Task.sleep(for: .milliseconds(5))
            }
            return
        }
        core.startDraining()
        for loop in loops { loop.quiesce() }
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(max(0, gracePeriodSeconds) * 1000))
        while core.activeRequests.load(ordering: .acquiring) > 0 && clock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        stopLoops()
        lifecycle.withLock { $0 = .stopped }
    }

    /// The server's event loops: work made for one of them (its Redis connection, its upstream
    /// connections) runs on its thread, as a request's does.
    public var eventLoops: [EventLoop] { loops.map(\.loop) }

    /// Requests between their request line and MHD's completion notice. For tests.
    var activeRequestCount: Int { core.activeRequests.load(ordering: .acquiring) }


    private func stopLoops() {
        // MHD_stop_daemon panics on a suspended connection, so wake every one first.
        core.resumeAllForStop()
        for loop in loops { loop.stop() }
    }
}

/// What every callback of one daemon needs: the server's shared core, the loop the daemon
/// runs on and the loop's head deadlines. The mutable state is loop-confined (hence
/// `@unchecked`): `needsRun` is set when a connection was resumed (or ended), so that the loop
/// runs the daemon at the end of its turn; `pendingAddress` is the address place reserved for
/// the connection MHD is accepting, until its "started" notice takes it.
final class DaemonContext: @unchecked Sendable {
    let core: ServerCore
    let loop: EventLoop
    let heads: HeadDeadlines
    var needsRun = false
    var pendingAddress: AddressKey?

    init(core: ServerCore, loop: EventLoop, headTimeoutSeconds: Double) {
        self.core = core
        self.loop = loop
        self.heads = HeadDeadlines(timeout: UInt64(headTimeoutSeconds * 1_000_000_000), loop: loop)
    }

    /// Gives back a reservation no connection took (MHD dropped the connection after accepting).
    func releasePendingAddress() {
        guard let address = pendingAddress else { return }
        pendingAddress = nil
        core.addresses.release(address)
    }
}

/// One event loop and the libmicrohttpd daemon it drives.
///
/// Ownership: owns the loop, the daemon and the listening socket. The daemon holds one reference
/// to its `DaemonContext`, released once MHD_stop_daemon has returned.
/// Thread-safety: the daemon is only ever touched on the loop's thread (`MHD_run`, quiesce,
/// stop), except for `MHD_resume_connection`, which libmicrohttpd allows from any thread.
final class ServerLoop: LoopDescriptorHandler, LoopParticipant, @unchecked Sendable {
    let core: ServerCore
    let loop: EventLoop
    let port: Int
    private let daemon: OpaquePointer
    private let listenSocket: Int32
    private let daemonEpoll: Int32
    private let context: DaemonContext
    private let stopped = Atomic<Bool>(false)
    // Loop-confined.
    private var daemonStopped = false
    private var deadline: UInt64?

    init(index: Int, port: Int, configuration: HTTPServerConfiguration, core: ServerCore) throws(HTTPServerError) {
        let socket = try Self.listenSocket(configuration.host, port: port, guard: false)
        let isIPv6 = configuration.host.contains(":")
        let loop: EventLoop
        do {
            loop = try EventLoop(name: "\(configuration.name)-\(index)")
        } catch {
            close(socket)
            throw HTTPServerError(message: "cannot start an event loop: \(error.detail)")
        }
        self.core = core
        self.loop = loop
        self.listenSocket = socket
        self.port = Int(pw_socket_port(socket))

        // The connection limit is per daemon: a loop takes its share. The per-address limit is
        // counted over every loop, by the shared AddressLimiter (MHD's own per-IP limit, per
        // daemon, is not used).
        let loops = configuration.threads
        let perLoopLimit = (configuration.connectionLimit + loops - 1) / loops
        var flags = MHD_USE_EPOLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_TURBO.rawValue
        if isIPv6 { flags |= MHD_USE_IPv6.rawValue }
        var startErrno: Int32 = 0
        let context = DaemonContext(core: core, loop: loop, headTimeoutSeconds: configuration.headTimeoutSeconds)
        // The daemon's own reference to its context, released after MHD_stop_daemon.
        let contextPointer = Unmanaged.passRetained(context).toOpaque()
        var settings = pw_mhd_settings(
            flags: flags, listen_fd: socket, cls: contextPointer,
            access_cb: accessHandler, completed_cb: requestCompleted, uri_log_cb: requestStarted,
            accept_cb: acceptPolicy, connection_cb: connectionNotified,
            connection_limit: UInt32(perLoopLimit),
            connection_timeout_seconds: UInt32(configuration.connectionTimeoutSeconds),
            connection_memory_limit: configuration.connectionMemoryLimit)
        let daemon = pw_mhd_start_external(&settings, &startErrno)
        guard let daemon else {
            Unmanaged<DaemonContext>.fromOpaque(contextPointer).release()
            close(socket)
            let reason = startErrno == 0 ? "unknown error" : String(cString: strerror(startErrno))
            throw HTTPServerError(message: "cannot start serving on \(configuration.host) port \(port): \(reason)")
        }
        self.context = context
        self.daemon = daemon
        self.daemonEpoll = pw_mhd_epoll_fd(daemon)
        do {
            try loop.start()
        } catch {
            MHD_stop_daemon(daemon)
            Unmanaged.passUnretained(context).release()
            close(socket)
            throw HTTPServerError(message: "cannot start an event loop: \(error.detail)")
        }
        loop.execute { [self] in
            loop.watch(daemonEpoll, read: true, write: false, handler: self)
            loop.add(self)
            run()
        }
    }

    /// A listening socket of its own (SO_REUSEPORT), or the guard that proves the port free
    /// (see `pw_listen_socket`).
    static func listenSocket(_ host: String, port: Int, guard isGuard: Bool) throws(HTTPServerError) -> Int32 {
        var isIPv6: Int32 = 0, error: Int32 = 0, socketErrno: Int32 = 0
        let socket = pw_listen_socket(host, UInt16(port), 1024, isGuard ? 1 : 0, &isIPv6, &error, &socketErrno)
        guard socket >= 0 else {
            if error == Int32(PW_MHD_BAD_HOST.rawValue) {
                throw HTTPServerError(message: "host \"\(host)\" is not an IPv4 or IPv6 literal")
            }
            throw HTTPServerError(message: "cannot listen on \(host) port \(port): \(String(cString: strerror(socketErrno)))")
        }
        return socket
    }

    // MARK: Loop callbacks

    func descriptorReady(readable: Bool, writable: Bool) { run() }

    func turnEnded(now: UInt64) {
        if context.needsRun || (deadline.map { now >= $0 } ?? false) || (context.heads.nextDeadline.map { now >= $0 } ?? false) {
            run()
        }
    }

    /// Now when a connection was resumed after this turn's `turnEnded` (by a later participant),
    /// so the loop does not sleep on it; else the earlier of MHD's timeout and the oldest head's
    /// deadline.
    var nextDeadline: UInt64? {
        if context.needsRun { return 0 }
        guard let heads = context.heads.nextDeadline else { return deadline }
        return min(deadline ?? heads, heads)
    }

    private func run() {
        guard !daemonStopped else { return }
        context.needsRun = false
        _ = MHD_run(daemon)
        context.releasePendingAddress()
        // Heads overdue are ended; MHD closes them on its next run, right after this turn.
        if context.heads.sweep(now: EventLoop.now()) > 0 { context.needsRun = true }
        let millis = pw_mhd_timeout_millis(daemon)
        deadline = millis < 0 ? nil : EventLoop.now() + UInt64(millis) * 1_000_000
    }

    // MARK: Lifecycle (any thread)

    /// Stops accepting: the daemon forgets its socket and the kernel refuses new connections.
    func quiesce() {
        loop.execute { [self] in
            guard !daemonStopped else { return }
            _ = MHD_quiesce_daemon(daemon)
            // Quiescing only stops accept(); shutting the socket down makes the kernel refuse new
            // connections at once instead of queueing them in the backlog. It stays open (so its
            // number cannot be reused under MHD) until the daemon is stopped.
            _ = Glibc.shutdown(listenSocket, Int32(SHUT_RDWR))
        }
    }

    /// Stops the daemon on the loop's thread, then the loop; closes the socket. Idempotent.
    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.execute { [self] in
            guard !daemonStopped else { return }
            daemonStopped = true
            loop.unwatch(daemonEpoll)
            // Quiesced first, so that MHD leaves the socket to us whatever state it is in.
            _ = MHD_quiesce_daemon(daemon)
            MHD_stop_daemon(daemon)
            // No callback can run any more: drop the daemon's reference.
            Unmanaged.passUnretained(context).release()
        }
        loop.stop()
        if !daemonStopped {
            // The loop had already ended: nothing runs the daemon any more.
            daemonStopped = true
            _ = MHD_quiesce_daemon(daemon)
            MHD_stop_daemon(daemon)
            Unmanaged.passUnretained(context).release()
        }
        _ = close(listenSocket)
    }
}
