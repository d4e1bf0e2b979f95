import PWCore

/// One upstream call. A plain value: the client copies what it needs before the call starts.
public struct HTTPClientRequest: Sendable {
    /// An RFC 9110 token such as `POST`; anything else is refused before libcurl sees it.
    public var method: String
    /// `http://` or `https://` only; other schemes are refused.
    public var url: String
    /// Sent in this order. An empty value is sent as an empty header, not dropped.
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Bound on the whole call, connection and queueing for a pooled connection included.
    /// Values below 1 are treated as 1.
    public var timeoutMillis: Int
    public var connectTimeoutMillis: Int

    public init(
        method: String,
        url: String,
        headers: HTTPHeaders = [:],
        body: [UInt8] = [],
        timeoutMillis: Int = 2000,
        connectTimeoutMillis: Int = 1000
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMillis = timeoutMillis
        self.connectTimeoutMillis = connectTimeoutMillis
    }
}

/// Whatever status the upstream answered, 4xx and 5xx included: those are responses, not errors.
public struct HTTPClientResponse: Sendable {
    public var status: Int
    /// Headers of the final response (those of any 1xx interim response are dropped).
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, headers: HTTPHeaders, body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why a call produced no response.
public struct HTTPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The call's (or the connect) deadline passed.
        case timeout
        /// Name resolution or TCP connect failed (refused, unreachable).
        case connect
        /// TLS handshake or certificate verification failed.
        case tls
        /// The upstream broke HTTP: nothing or garbage back, a reset mid-response, an HTTP/2 error.
        case protocolError
        /// The response (headers or body) exceeded `HTTPClientConfiguration.maxResponseBytes`.
        case tooLarge
        /// The client was shut down before the call completed.
        case shutdown
        /// Anything else: a refused request (bad scheme, method or header), cancellation, curl failures.
        case other
    }

    public var kind: Kind
    /// libcurl's static error text or our own reason; never contains the URL or headers.
    /// For logs only, never for clients.
    public var detail: String

    public init(kind: Kind, detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "HTTPClientError(\(kind)): \(detail)" }

    static let shutdown = HTTPClientError(kind: .shutdown, detail: "client shut down")
    static let cancelled = HTTPClientError(kind: .other, detail: "cancelled")
}

public struct HTTPClientConfiguration: Sendable {
    /// Connections kept per host (HTTP/1.1 needs one per in-flight request; HTTP/2 multiplexes).
    /// Transfers beyond this wait for a free connection, inside their own timeout.
    public var maxConnectionsPerHost: Int
    /// Upper bound on open connections overall; also the size of the idle-connection cache.
    public var maxTotalConnections: Int
    /// Cap on a response's body, and separately on its headers.
    public var maxResponseBytes: Int
    public var userAgent: String
    /// A PEM CA bundle to trust instead of the system store (a private upstream CA).
    /// Verification itself can never be switched off.
    public var caBundlePath: String?

    public init(
        maxConnectionsPerHost: Int = 64,
        maxTotalConnections: Int = 512,
        maxResponseBytes: Int = 1 << 20,
        userAgent: String = "pushwarden",
        caBundlePath: String? = nil
    ) {
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.maxTotalConnections = maxTotalConnections
        self.maxResponseBytes = maxResponseBytes
        self.userAgent = userAgent
        self.caBundlePath = caBundlePath
    }
}
