import CMicroHTTPD
import CShims
import Glibc
import PWCore
import Synchronization

/// An HTTP/1.1 server on libmicrohttpd: a pool of epoll threads parses requests and writes
/// responses; a request whose body is complete is suspended (holding no thread) while
/// `HTTPHandler.handle` runs on Swift concurrency, then resumed to send the answer.
/// Connections are kept alive unless a response says `Connection: close`.
///
/// Ownership: the server owns its MHD daemon and stops it exactly once, in `shutdown` or,
/// failing that, in `deinit`. Thread-safe.
public final class HTTPServer: Sendable {
    private enum Lifecycle {
        case running(daemon: OpaquePointer)
        case draining
        case stopped
    }

    private let core: ServerCore
    private let lifecycle: Mutex<Lifecycle>
    /// The bound port (the kernel's choice when configured with 0).
    public let port: Int

    /// Binds and starts serving.
    /// - Throws: `HTTPServerError` for an invalid configuration, a host that is not an IP
    ///   literal, or when MHD cannot start (port in use, thread creation failed).
    public init(configuration: HTTPServerConfiguration, handler: some HTTPHandler) throws(HTTPServerError) {
        try configuration.validate()
        let core = ServerCore(handler: handler)
        // The daemon's own reference to the core, released after MHD_stop_daemon.
        let context = Unmanaged.passRetained(core).toOpaque()
        let flags = MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue
            | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_TURBO.rawValue
        var error: Int32 = 0
        var startErrno: Int32 = 0
        let daemon = pw_mhd_start(
            flags, configuration.host, UInt16(configuration.port),
            accessHandler, context,
            requestCompleted, context,
            requestStarted, context,
            configuration.threads == 1 ? 0 : UInt32(configuration.threads),
            UInt32(configuration.connectionLimit),
            UInt32(configuration.perIPConnectionLimit),
            UInt32(configuration.connectionTimeoutSeconds),
            configuration.connectionMemoryLimit,
            &error, &startErrno)
        guard let daemon else {
            Unmanaged<ServerCore>.fromOpaque(context).release()
            if error == Int32(PW_MHD_BAD_HOST.rawValue) {
                throw HTTPServerError(message: "host \"\(configuration.host)\" is not an IPv4 or IPv6 literal")
            }
            let reason = startErrno == 0 ? "unknown error" : String(cString: strerror(startErrno))
            throw HTTPServerError(message: "cannot listen on \(configuration.host) port \(configuration.port): \(reason)")
        }
        self.core = core
        self.port = Int(pw_mhd_bound_port(daemon))
        self.lifecycle = Mutex(.running(daemon: daemon))
    }

    deinit {
        let daemon = lifecycle.withLock { state -> OpaquePointer? in
            guard case .running(let daemon) = state else { return nil }
            state = .stopped
            return daemon
        }
        if let daemon { stop(daemon, listenSocket: nil) }
    }

    /// Stops accepting (MHD_quiesce_daemon; new connection attempts are refused), lets
    /// in-flight requests finish for up to `gracePeriodSeconds`, then stops the daemon.
    /// Responses sent meanwhile carry `Connection: close`. Requests still running at the
    /// deadline are cut off; their handlers' results are dropped. Idempotent: a second call
    /// returns once the first has finished.
    public func shutdown(gracePeriodSeconds: Double) async {
        let daemon = lifecycle.withLock { state -> OpaquePointer? in
            guard case .running(let daemon) = state else { return nil }
            state = .draining
            return daemon
        }
        guard let daemon else {
            while lifecycle.withLock({ if case .stopped = $0 { false } else { true } }) {
                try? await Task.sleep(for: .milliseconds(5))
            }
            return
        }
        core.startDraining()
        let listenSocket = MHD_quiesce_daemon(daemon)
        if listenSocket >= 0 {
            // Quiescing only stops accept(); shutting the socket down makes the kernel refuse
            // new connections at once instead of queueing them in the backlog. It stays open
            // (so its number cannot be reused under MHD) until the daemon is stopped.
            _ = Glibc.shutdown(listenSocket, Int32(SHUT_RDWR))
        }
        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(max(0, gracePeriodSeconds) * 1000))
        while core.activeRequests.load(ordering: .acquiring) > 0 && clock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        stop(daemon, listenSocket: listenSocket >= 0 ? listenSocket : nil)
        lifecycle.withLock { $0 = .stopped }
    }

    /// Requests between their request line and MHD's completion notice. For tests.
    var activeRequestCount: Int { core.activeRequests.load(ordering: .acquiring) }

    private func stop(_ daemon: OpaquePointer, listenSocket: Int32?) {
        // MHD_stop_daemon panics on a suspended connection, so wake every one first.
        core.resumeAllForStop()
        MHD_stop_daemon(daemon)
        if let listenSocket { _ = close(listenSocket) }
        // No callback can run any more: drop the daemon's reference.
        Unmanaged.passUnretained(core).release()
    }
}

/// What every MHD callback of one daemon shares: the handler, the count of live requests and
/// the registry of suspended ones (needed to resume them before MHD_stop_daemon).
final class ServerCore: Sendable {
    private struct Registry {
        var suspended: [ObjectIdentifier: RequestContext] = [:]
        var stopping = false
    }

    let handler: any HTTPHandler
    let activeRequests = Atomic<Int>(0)
    private let draining = Atomic<Bool>(false)
    private let registry = Mutex(Registry())

    init(handler: any HTTPHandler) { self.handler = handler }

    var isDraining: Bool { draining.load(ordering: .relaxed) }

    func startDraining() { draining.store(true, ordering: .relaxed) }

    /// False once the daemon is being stopped: the caller must answer without suspending.
    func registerSuspended(_ context: RequestContext) -> Bool {
        registry.withLock { r in
            guard !r.stopping else { return false }
            r.suspended[ObjectIdentifier(context)] = context
            return true
        }
    }

    func unregisterSuspended(_ context: RequestContext) {
        _ = registry.withLock { $0.suspended.removeValue(forKey: ObjectIdentifier(context)) }
    }

    /// Refuses further suspensions and resumes every suspended connection with a 503.
    func resumeAllForStop() {
        let contexts = registry.withLock { r in
            r.stopping = true
            return Array(r.suspended.values)
        }
        for context in contexts {
            context.resume(with: RequestContext.unavailable)
        }
    }
}

// MARK: - MHD callbacks (global, capture nothing; `cls` is the daemon's ServerCore reference)

/// MHD_OPTION_URI_LOG_CALLBACK: the first sight of a request. Its result becomes `*req_cls`.
private func requestStarted(cls: UnsafeMutableRawPointer?, uri: UnsafePointer<CChar>?, connection: OpaquePointer?) -> UnsafeMutableRawPointer? {
    guard let cls, let connection else { return nil }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    core.activeRequests.add(1, ordering: .relaxed)
    let context = RequestContext(core: core, connection: connection, rawTarget: uri.map { String(cString: $0) } ?? "")
    return Unmanaged.passRetained(context).toOpaque()
}

/// MHD_AccessHandlerCallback.
private func accessHandler(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?,
    uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>?,
    requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let method, let uploadDataSize, let pointer = requestContext?.pointee else { return .NO }
    let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
    return context.access(method: method, uploadData: uploadData, uploadSize: uploadDataSize)
}

/// MHD_RequestCompletedCallback: releases the reference taken in `requestStarted`.
private func requestCompleted(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, reason: MHD_RequestTerminationCode
) {
    guard let requestContext, let pointer = requestContext.pointee else { return }
    requestContext.pointee = nil
    let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue()
    context.core.activeRequests.subtract(1, ordering: .releasing)
}
