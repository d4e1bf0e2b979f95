/// Why a command got no reply from Redis.
///
/// `detail` carries hiredis's error text for logs; it is not meant for clients.
///
/// - Important: after `.timeout` (and `.unavailable` raised mid-flight) the command may or may not
///   have run on the server. Only idempotent commands are safe to retry blindly.
public struct RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable, CustomStringConvertible {
        /// No connection: connect failed, AUTH/SELECT failed, the connection broke, or the
        /// reconnect backoff has not elapsed yet.
        case unavailable
        /// Redis did not answer within `commandTimeoutMillis`.
        case timeout
        /// The reply could not be parsed, or a Redis URL could not be parsed.
        case protocolError
        /// The client was closed before the command was sent.
        case closed

        /// Named without reflection: during an outage every failed command is described.
        public var description: String {
            switch self {
            case .unavailable: "unavailable"
            case .timeout: "timeout"
            case .protocolError: "protocolError"
            case .closed: "closed"
            }
        }
    }

    public var kind: Kind
    public var detail: String

    public init(kind: Kind, detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "RedisError(\(kind)): \(detail)" }
}
