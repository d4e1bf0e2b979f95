#if canImport(Glibc)
import Glibc
#endif
import HTTPServer
import PWCore
import Registration

/// Process-level settings that are not policy: where to listen, which store, how loud to log.
/// Flags win over `PUSHWARDEN_*` environment variables, which win over these defaults.
public struct ServeConfiguration: Sendable {
    public var listen: HostPort
    public var admin: HostPort
    /// `redis://...` or `redis+cluster://seed,seed...`; nil runs on the embedded in-memory store.
    public var redisURL: String?
    public var logLevel: Logger.Level
    /// Event loops (threads) of the client listener (0: one per core).
    public var threads: Int
    /// How long in-flight requests may take to finish on shutdown.
    public var shutdownGraceSeconds: Double
    /// Concurrent client connections from one address (over every loop); 0 means unlimited.
    /// Behind a front proxy every connection has the proxy's address: raise it there.
    public var connectionsPerAddress: Int = 1_024
    /// Seconds a client connection may take to send a complete request head (from its start, or
    /// from the previous response on a kept-alive connection) before it is closed; 0: no limit.
    public var headTimeoutSeconds: Double = 10
    /// Upstream connections kept per provider host (HTTP/1.1 needs one per in-flight call), shared
    /// out evenly between the event loops, each of which keeps its own.
    public var upstreamConnectionsPerHost: Int = 512

    public init(listen: HostPort = HostPort(host: "127.0.0.1", port: 8080), admin: HostPort = HostPort(host: "127.0.0.1", port: 9090),
                redisURL: String? = nil, logLevel: Logger.Level = .info, threads: Int = 0, shutdownGraceSeconds: Double = 10) {
        self.listen = listen
        self.admin = admin
        self.redisURL = redisURL
        self.logLevel = logLevel
        self.threads = threads
        self.shutdownGraceSeconds = shutdownGraceSeconds
    }
}

/// `HOST:PORT`, with IPv6 hosts in brackets (`[::1]:8080`).
public struct HostPort: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `HOST:PORT` or `:PORT` (every IPv4 address); the port is required.
    public init?(_ text: String) {
        let written = text.hasPrefix(":") ? "0.0.0.0" + text : text
        guard case .success(let authority) = Authority.parse(written), let port = authority.port else { return nil }
        self.host = String(authority.host)
        self.port = port
    }

    public var description: String { Authority.format(host: host, port: port) }
}

extension ServeConfiguration {
    /// The `PUSHWARDEN_*` environment variables, read here and nowhere else; a flag of the same
    /// meaning wins over each.
    public enum Variable: String, Sendable, CaseIterable {
        case policy = "PUSHWARDEN_POLICY"
        case listen = "PUSHWARDEN_LISTEN"
        case admin = "PUSHWARDEN_ADMIN"
        case redisURL = "PUSHWARDEN_REDIS_URL"
        case logLevel = "PUSHWARDEN_LOG_LEVEL"
        case threads = "PUSHWARDEN_THREADS"
        case connectionsPerAddress = "PUSHWARDEN_CONNECTIONS_PER_ADDRESS"
        case headTimeout = "PUSHWARDEN_HEAD_TIMEOUT"
        case shutdownGrace = "PUSHWARDEN_SHUTDOWN_GRACE"
        case policyKey = "PUSHWARDEN_POLICY_KEY"
        case watch = "PUSHWARDEN_WATCH"

        /// The variable's value; unset and empty read alike (nil).
        public var value: String? {
            guard let value = getenv(rawValue) else { return nil }
            let text = String(cString: value)
            return text.isEmpty ? nil : text
        }
    }

    /// What `serve` runs with besides the policy's contents.
    public struct Serve: Sendable {
        public var configuration: ServeConfiguration
        public var policyPath: String
        /// The Ed25519 public key (PEM) the policy file's signature is checked with.
        public var policyKeyPath: String?
        /// Reload when the policy file changes, besides on SIGHUP.
        public var watch: Bool
    }

    /// `serve`'s settings: each flag (named without its `--`) wins over its environment variable,
    /// which wins over the default.
    ///
    /// - Throws: the first setting that does not hold up, in words for the operator.
    public static func serve(flags: [String: String],
                             environment: (Variable) -> String? = { $0.value }) throws(ConfigurationError) -> Serve {
        func setting(_ flag: String, _ variable: Variable) -> String? { flags[flag] ?? environment(variable) }
        guard let policyPath = setting("policy", .policy) else { throw ConfigurationError("serve needs --policy FILE") }
        var configuration = ServeConfiguration()
        if let listen = setting("listen", .listen) {
            guard let hostPort = HostPort(listen) else { throw ConfigurationError("--listen must be HOST:PORT") }
            configuration.listen = hostPort
        }
        if let admin = setting("admin", .admin) {
            guard let hostPort = HostPort(admin) else { throw ConfigurationError("--admin must be HOST:PORT") }
            configuration.admin = hostPort
        }
        configuration.redisURL = setting("redis", .redisURL)
        if let level = setting("log-level", .logLevel) {
            guard let parsed = Logger.Level(name: level) else { throw ConfigurationError("--log-level must be debug, info, warning or error") }
            configuration.logLevel = parsed
        }
        if let threads = setting("threads", .threads) {
            guard let n = Int(threads), (1...256).contains(n) else { throw ConfigurationError("--threads must be 1 to 256") }
            configuration.threads = n
        }
        if let limit = setting("connections-per-address", .connectionsPerAddress) {
            guard let n = Int(limit), (0...1_000_000).contains(n) else {
                throw ConfigurationError("--connections-per-address must be 0 (no limit) to 1000000")
            }
            configuration.connectionsPerAddress = n
        }
        if let timeout = setting("head-timeout", .headTimeout) {
            guard let seconds = Double(timeout), seconds >= 0, seconds <= 86_400 else {
                throw ConfigurationError("--head-timeout must be 0 (no limit) to 86400 seconds")
            }
            configuration.headTimeoutSeconds = seconds
        }
        if let grace = environment(.shutdownGrace) {
            guard let seconds = Double(grace), seconds >= 0 else { throw ConfigurationError("PUSHWARDEN_SHUTDOWN_GRACE must be seconds") }
            configuration.shutdownGraceSeconds = seconds
        }
        let watchValue = setting("watch", .watch) ?? "false"
        guard ["true", "1", "false", "0"].contains(watchValue) else { throw ConfigurationError("PUSHWARDEN_WATCH must be true, 1, false or 0") }
        return Serve(configuration: configuration, policyPath: policyPath, policyKeyPath: setting("policy-key", .policyKey),
                     watch: watchValue == "true" || watchValue == "1")
    }

    /// Event loops the client listener runs: `threads`, or one per core.
    public var loopCount: Int { threads > 0 ? threads : HTTPServerConfiguration().threads }
}
