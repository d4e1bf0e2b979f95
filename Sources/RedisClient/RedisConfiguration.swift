import PWCore
/// Where Redis is and how patient to be with it.
///
/// The defaults suit the dedupe path: Redis is an optimisation there, so a slow or absent Redis
/// must cost milliseconds, not request latency.
public struct RedisConfiguration: Sendable, Equatable {
    public var host: String
    public var port: Int
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

    /// Parses `redis://[[user]:password@]host[:port][/db]`.
    ///
    /// User and password may be percent-encoded. IPv6 hosts go in brackets (`redis://[::1]:6379`).
    /// Other schemes (`rediss`, `unix`), query strings and fragments are refused rather than ignored,
    /// so a URL never silently means less than it says.
    /// - Throws: `RedisError` of kind `.protocolError` naming what is wrong; the password is never
    ///   echoed in the message.
    public init(url: String) throws(RedisError) {
        func invalid(_ why: String) -> RedisError {
            RedisError(kind: .protocolError, detail: "invalid Redis URL: \(why)")
        }
        let prefix = "redis://"
        guard url.lowercased().hasPrefix(prefix) else {
            if let colon = url.firstIndex(of: ":") {
                throw invalid("unsupported scheme '\(url[..<colon])', expected redis://")
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

        let authority: Authority
        switch Authority.parse(rest) {
        case .success(let parsed): authority = parsed
        case .failure(.unclosedBracket): throw invalid("unterminated IPv6 address")
        case .failure(.textAfterBracket): throw invalid("unexpected text after IPv6 address")
        case .failure(.emptyHost): throw invalid("missing host")
        case .failure(.colonInHost): throw invalid("an IPv6 host must be written in brackets")
        case .failure(.badPort): throw invalid("port must be 1-65535")
        }
        guard !authority.host.contains(where: { $0 == " " || $0 == "@" || $0 == "/" }) else { throw invalid("bad host") }
        guard authority.port != 0 else { throw invalid("port must be 1-65535") }
        self.init(host: String(authority.host), port: authority.port ?? 6379, username: username, password: password, database: database)
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
