import CMicroHTTPD
import CShims
import Glibc
import Loops

// MARK: - MHD connection callbacks (global, capture nothing; `cls` is the daemon's DaemonContext)

/// MHD_AcceptPolicyCallback: called on the loop for every accepted connection, before MHD
/// creates it. Reserves the client address's place in the server's `AddressLimiter`, or refuses
/// the connection (MHD closes it at once) when the address holds its limit.
func acceptPolicy(cls: UnsafeMutableRawPointer?, address: UnsafePointer<sockaddr>?, length: socklen_t) -> MHD_Result {
    guard let cls else { return .YES }
    let daemon = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue()
    daemon.releasePendingAddress()
    let limiter = daemon.core.addresses
    guard limiter.limit > 0 else { return .YES }
    var high: UInt64 = 0
    var low: UInt64 = 0
    guard pw_sockaddr_key(address, length, &high, &low) == 0 else { return .YES }
    let key = AddressKey(high: high, low: low)
    guard limiter.reserve(key) else { return .NO }
    // Handed to the connection in its "started" notice, which MHD sends before it accepts the
    // next one; released after the run if MHD dropped the connection instead.
    daemon.pendingAddress = key
    return .YES
}

/// MHD_NotifyConnectionCallback: a connection started or closed. Its `TrackedConnection` lives
/// in `*socket_context` with one retain, from "started" to "closed" (which MHD sends exactly once
/// for every started connection, also from MHD_stop_daemon).
func connectionNotified(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection, let socketContext else { return }
    let daemon = Unmanaged<DaemonContext>.fromOpaque(cls).takeUnretainedValue()
    // MHD_CONNECTION_NOTIFY_STARTED (0) and MHD_CONNECTION_NOTIFY_CLOSED (1), by their values.
    switch code.rawValue {
    case 0:
        let tracked = TrackedConnection(connection: connection, address: daemon.pendingAddress)
        daemon.pendingAddress = nil
        daemon.heads.awaitHead(tracked, now: EventLoop.now())
        socketContext.pointee = Unmanaged.passRetained(tracked).toOpaque()
    case 1:
        guard let pointer = socketContext.pointee else { return }
        socketContext.pointee = nil
        let tracked = Unmanaged<TrackedConnection>.fromOpaque(pointer).takeRetainedValue()
        daemon.heads.remove(tracked)
        if let address = tracked.address { daemon.core.addresses.release(address) }
    default:
        break
    }
}

/// The connection's `TrackedConnection`, from inside a request callback.
func trackedConnection(_ connection: OpaquePointer) -> TrackedConnection? {
    pw_mhd_socket_context(connection).map { Unmanaged<TrackedConnection>.fromOpaque($0).takeUnretainedValue() }
}
