import PWCore
/// One Redis node's address: a host name or IP literal (IPv6 without brackets) and a port.
public struct RedisEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var description: String { Authority.format(host: host, port: port) }
}

/// Where Redis is and how patient to be with it.
///
/// The defaults suit the dedupe path: Redis is an optimisation there, so a slow or absent Redis
/// must cost milliseconds, not request latency.
public struct RedisConfiguration: Sendable, Equatable {
    public var host: String
    public var port: Int
    /// Seed nodes of a Redis Cluster (`redis+cluster://`); empty for a single Redis. With seeds,
    /// `host` and `port` are the first seed's, and `database` is 0 (a cluster has no other).
    public var clusterSeeds: [RedisEndpoint] = []
    /// How often a cluster client reads the slot map again even when nothing told it to (a
    /// `MOVED`, a failed node, `CLUSTERDOWN` ask for it at once).
    public var clusterRefreshMillis: Int = 5_000
    /// ACL user for `AUTH user password` (Redis 6+); `nil` sends `AUTH password`.
    public var username: String?
    public var password: String?
    public var database: Int
    /// Pipelined connections, each with its own I/O thread.
    public var connections: Int = 2
    public var connectTimeoutMillis: Int = 200
    /// Socket send/receive timeout while a batch is in flight.
    public var commandTimeoutMillis: Int = 200
    /// After a failed connect or a command timeout, commands on that connection fail at once
    /// with `.unavailable` for this long before the next connect attempt.
    public var reconnectBackoffMillis: Int = 500

    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        connections: Int = 2,
        connectTimeoutMillis: Int = 200,
        commandTimeoutMillis: Int = 200,
        reconnectBackoffMillis: Int = 500
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.connections = connections
        self.connectTimeoutMillis = connectTimeoutMillis
        self.commandTimeoutMillis = commandTimeoutMillis
        self.reconnectBackoffMillis = reconnectBackoffMillis
    }

    /// A cluster client is configured when it has seeds.
    public var isCluster: Bool { !clusterSeeds.isEmpty }

    /// Parses `redis://[[user]:password@]host[:port][/db]` or, for a Redis Cluster,
    /// `redis+cluster://[[user]:password@]host[:port][,host[:port]...]` (seed nodes; any one
    /// that answers gives the slot map).
    ///
    /// User and password may be percent-encoded. IPv6 hosts go in brackets (`redis://[::1]:6379`).
    /// Other schemes (`rediss`, `unix`), query strings and fragments are refused rather than ignored,
    /// so a URL never silently means less than it says; so is a database other than 0 on a cluster.
    /// - Throws: `RedisError` of kind `.protocolError` naming what is wrong; the password is never
    ///   echoed in the message.
    public init(url: String) throws(RedisError) {
        func invalid(_ why: String) -> RedisError {
            RedisError(kind: .protocolError, detail: "invalid Redis URL: \(why)")
        }
        let lowered = url.lowercased()
        let cluster = lowered.hasPrefix("redis+cluster://")
        let prefix = cluster ? "redis+cluster://" : "redis://"
        guard lowered.hasPrefix(prefix) else {
            if let colon = url.firstIndex(of: ":") {
                throw invalid("unsupported scheme '\(url[..<colon])', expected redis:// or redis+cluster://")
            }
            throw invalid("expected redis://host[:port][/db]")
        }
        var rest = Substring(url.dropFirst(prefix.count))
        if rest.contains("?") || rest.contains("#") { throw invalid("query strings and fragments are not supported") }

        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !path.isEmpty {
                guard path.allSatisfy(\.isASCII), let db = Int(path), db >= 0 else {
                    throw invalid("database must be a non-negative integer")
                }
                database = db
            }
        }

        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            guard let colon = userinfo.firstIndex(of: ":") else {
                throw invalid("credentials must be written user:password@ or :password@")
            }
            let user = try Self.percentDecoded(userinfo[..<colon], invalid: invalid("bad percent-encoding in user"))
            let pass = try Self.percentDecoded(userinfo[userinfo.index(after: colon)...], invalid: invalid("bad percent-encoding in password"))
            username = user.isEmpty ? nil : user
            password = pass.isEmpty ? nil : pass
        }

        func endpoint(_ text: Substring) throws(RedisError) -> RedisEndpoint {
            let authority: Authority
            switch Authority.parse(text) {
            case .success(let parsed): authority = parsed
            case .failure(.unclosedBracket): throw invalid("unterminated IPv6 address")
            case .failure(.textAfterBracket): throw invalid("unexpected text after IPv6 address")
            case .failure(.emptyHost): throw invalid("missing host")
            case .failure(.colonInHost): throw invalid("an IPv6 host must be written in brackets")
            case .failure(.badPort): throw invalid("port must be 1-65535")
            }
            guard !authority.host.contains(where: { $0 == " " || $0 == "@" || $0 == "/" || $0 == "," }) else { throw invalid("bad host") }
            guard authority.port != 0 else { throw invalid("port must be 1-65535") }
            return RedisEndpoint(host: String(authority.host), port: authority.port ?? 6379)
        }
        guard cluster else {
            let single = try endpoint(rest)
            self.init(host: single.host, port: single.port, username: username, password: password, database: database)
            return
        }
        guard database == 0 else { throw invalid("a Redis Cluster has database 0 only") }
        var seeds: [RedisEndpoint] = []
        for part in rest.split(separator: ",", omittingEmptySubsequences: false) {
            let seed = try endpoint(part)
            if !seeds.contains(seed) { seeds.append(seed) }
        }
        self.init(host: seeds[0].host, port: seeds[0].port, username: username, password: password)
        clusterSeeds = seeds
    }

    /// This configuration aimed at one node (a cluster node the slot map names).
    func aimed(at node: RedisEndpoint) -> RedisConfiguration {
        var copy = self
        copy.host = node.host
        copy.port = node.port
        copy.database = 0
        return copy
    }

    private static func percentDecoded(_ text: Substring, invalid: @autoclosure () -> RedisError) throws(RedisError) -> String {
        guard text.contains("%") else { return String(text) }
        var bytes: [UInt8] = []
        var utf8 = text.utf8[...]
        while let byte = utf8.popFirst() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard utf8.count >= 2,
                  let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16)
            else { throw invalid() }
            bytes.append(value)
            utf8 = utf8.dropFirst(2)
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else { throw invalid() }
        return decoded
    }
}
