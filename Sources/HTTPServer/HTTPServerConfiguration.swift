import Glibc

/// How an `HTTPServer` listens and what it tolerates from clients.
public struct HTTPServerConfiguration: Sendable {
    /// An IPv4 or IPv6 literal ("127.0.0.1", "0.0.0.0", "::1", "::"); host names are refused.
    public var host: String
    /// 0 binds any free port; read the result from `HTTPServer.port`.
    public var port: Int
    /// Event loops (one thread each), each with its own listening socket; the kernel spreads
    /// connections over them. A request waiting on its handler holds none of them.
    public var threads: Int
    /// Concurrent connections over which new ones are refused, shared out evenly between the loops.
    public var connectionLimit: Int
    /// Concurrent connections from one client address, counted over the whole server (every
    /// loop); more are closed as soon as they are accepted. 0 means unlimited. The default,
    /// about a tenth of the default connection limit, keeps one address from holding every
    /// connection while a front proxy (all of whose connections share its address) still gets
    /// 1,024; raise it behind a busier proxy.
    public var perAddressConnectionLimit: Int
    /// Seconds a connection may take to send a complete request head, counted from its start or,
    /// on a kept-alive connection, from the end of the previous response; then it is closed
    /// without an answer. Unlike the idle timeout, a trickle of bytes does not extend it, so a
    /// slow client costs a connection for this long at most; an idle kept-alive connection is
    /// closed after it too. 0 disables it.
    public var headTimeoutSeconds: Double
    /// Idle seconds after which a connection is closed (also bounds slow clients).
    public var connectionTimeoutSeconds: Int
    /// Per-connection memory pool in bytes. It holds the request head, so it bounds the header
    /// block size: a larger head is refused by the server itself without reaching the handler.
    public var connectionMemoryLimit: Int
    /// Names the loop threads `<name>-<index>` (at most 15 bytes are kept), so `top -H` and
    /// profilers tell one server's loops from another's.
    public var name: String

    public init(
        host: String = "127.0.0.1",
        port: Int = 0,
        threads: Int = HTTPServerConfiguration.coreCount,
        connectionLimit: Int = 10_000,
        perAddressConnectionLimit: Int = 1_024,
        headTimeoutSeconds: Double = 10,
        connectionTimeoutSeconds: Int = 30,
        connectionMemoryLimit: Int = 32 * 1024,
        name: String = "pw-http"
    ) {
        self.host = host
        self.port = port
        self.threads = threads
        self.connectionLimit = connectionLimit
        self.perAddressConnectionLimit = perAddressConnectionLimit
        self.headTimeoutSeconds = headTimeoutSeconds
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.connectionMemoryLimit = connectionMemoryLimit
        self.name = name
    }

    /// Online CPU cores, at least 1.
    public static var coreCount: Int { max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

    func validate() throws(HTTPServerError) {
        func check(_ ok: Bool, _ message: String) throws(HTTPServerError) {
            if !ok { throw HTTPServerError(message: message) }
        }
        let maxC = Int(UInt32.max)
        try check((0...65_535).contains(port), "port \(port) is outside 0...65535")
        try check((1...1024).contains(threads), "threads must be in 1...1024, got \(threads)")
        try check((1...maxC).contains(connectionLimit), "connectionLimit must be positive, got \(connectionLimit)")
        try check(perAddressConnectionLimit >= 0, "perAddressConnectionLimit must be >= 0, got \(perAddressConnectionLimit)")
        try check(headTimeoutSeconds >= 0 && headTimeoutSeconds <= 86_400, "headTimeoutSeconds must be in 0...86400, got \(headTimeoutSeconds)")
        try check((0...maxC).contains(connectionTimeoutSeconds), "connectionTimeoutSeconds must be >= 0, got \(connectionTimeoutSeconds)")
        try check(connectionMemoryLimit >= 4096, "connectionMemoryLimit must be at least 4096 bytes, got \(connectionMemoryLimit)")
    }
}
