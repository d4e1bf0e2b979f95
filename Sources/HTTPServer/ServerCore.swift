import CMicroHTTPD
import Loops
import Synchronization

/// What every loop of one server shares: the handler, the count of live requests and the
/// registry of suspended ones (needed to resume them before MHD_stop_daemon).
final class ServerCore: Sendable {
    private struct Registry {
        var suspended: [ObjectIdentifier: RequestContext] = [:]
        var stopping = false
    }

    let handler: any HTTPHandler
    /// Connections per client address, over every loop.
    let addresses: AddressLimiter
    let activeRequests = Atomic<Int>(0)
    /// `Keep-Alive: timeout=N` on every kept-alive response, N a second under the head deadline
    /// that closes an idle connection: a client that honours it retires the connection before the
    /// server closes it under a request it is sending (nil: no deadline, nothing to announce).
    let keepAlive: String?
    private let draining = Atomic<Bool>(false)
    private let registry = Mutex(Registry())

    init(handler: any HTTPHandler, connectionsPerAddress: Int, headTimeoutSeconds: Double = 0) {
        self.handler = handler
        self.addresses = AddressLimiter(limit: connectionsPerAddress)
        keepAlive = Self.keepAlive(headTimeoutSeconds: headTimeoutSeconds)
    }

    static func keepAlive(headTimeoutSeconds: Double) -> String? {
        guard headTimeoutSeconds > 0 else { return nil }
        return "timeout=" + String(max(1, Int(headTimeoutSeconds.rounded(.down)) - 1))
    }

    var isDraining: Bool { draining.load(ordering: .relaxed) }

    func startDraining() { draining.store(true, ordering: .relaxed) }

    /// False once the server is being stopped: the caller must answer without suspending.
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
            context.respond(RequestContext.unavailable)
        }
    }
}

// MARK: - MHD callbacks (global, capture nothing; `cls` is the daemon's DaemonContext)

/// MHD_OPTION_URI_LOG_CALLBACK: the first sight of a request. Its result becomes `*req_cls`.
func requestStarted(cls: UnsafeMutableRawPointer?, uri: UnsafePointer<CChar>?, connection: OpaquePointer?) -> UnsafeMutableRawPointer? {
    guard let cls, let connection else { return nil }
    let daemon = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue()
    daemon.core.activeRequests.add(1, ordering: .relaxed)
    let context = RequestContext(daemon: daemon, connection: connection, tracked: trackedConnection(connection),
                                 rawTarget: uri.map { String(cString: $0) } ?? "")
    return Unmanaged.passRetained(context).toOpaque()
}

/// MHD_AccessHandlerCallback.
func accessHandler(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?,
    uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>?,
    requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let method, let uploadDataSize, let pointer = requestContext?.pointee else { return .NO }
    let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
    return context.access(method: method, version: version, uploadData: uploadData, uploadSize: uploadDataSize)
}

/// MHD_RequestCompletedCallback: releases the reference taken in `requestStarted`; the
/// connection now waits for its next head (if it stays open; else "closed" follows).
func requestCompleted(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, reason: MHD_RequestTerminationCode
) {
    guard let requestContext, let pointer = requestContext.pointee else { return }
    requestContext.pointee = nil
    let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeRetainedValue()
    if let tracked = context.tracked { context.daemon.heads.awaitHead(tracked, now: EventLoop.now()) }
    context.core.activeRequests.subtract(1, ordering: .releasing)
}
