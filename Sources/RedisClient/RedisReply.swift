/// One decoded Redis reply, detached from hiredis memory (the `redisReply` tree is copied and freed
/// on the connection's I/O thread before the caller sees this value).
///
/// A server error such as `-ERR wrong number of arguments` is a reply, not a thrown error: the
/// command reached Redis and Redis answered.
public enum RedisReply: Sendable, Equatable {
    case status(String)
    case error(String)
    case integer(Int64)
    case bulk([UInt8])
    case null
    case array([RedisReply])
}

extension RedisReply {
    /// The text of a bulk or status reply; `nil` for other replies and for bulk bytes that are not UTF-8.
    public var string: String? {
        switch self {
        case .status(let text): return text
        case .bulk(let bytes): return String(validating: bytes, as: UTF8.self)
        default: return nil
        }
    }

    /// `true` for `.null`, the reply to GET on a missing key or to `SET ... NX` that did not set.
    public var isNull: Bool { self == .null }
}
