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
    /// Concurrent connections per client IP and loop; 0 means unlimited.
    public var perIPConnectionLimit: Int
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
        perIPConnectionLimit: Int = 0,
        connectionTimeoutSeconds: Int = 30,
        connectionMemoryLimit: Int = 32 * 1024,
        name: String = "pw-http"
    ) {
        self.host = host
        self.port = port
        self.threads = threads
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
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
        try check((0...maxC).contains(perIPConnectionLimit), "perIPConnectionLimit must be >= 0, got \(perIPConnectionLimit)")
        try check((0...maxC).contains(connectionTimeoutSeconds), "connectionTimeoutSeconds must be >= 0, got \(connectionTimeoutSeconds)")
        try check(connectionMemoryLimit >= 4096, "connectionMemoryLimit must be at least 4096 bytes, got \(connectionMemoryLimit)")
    }
}
