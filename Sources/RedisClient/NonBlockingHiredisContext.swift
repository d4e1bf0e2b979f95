internal import CHiredis
#if canImport(Glibc)
import Glibc
#endif

/// Owns one non-blocking `redisContext` that an event loop drives
/// (hiredis 0.14: `redisConnectNonBlock`, `redisBufferWrite`, `redisBufferRead`,
/// `redisGetReplyFromReader`; https://github.com/redis/hiredis/blob/v0.14.1/README.md).
///
/// Nothing here blocks: `connect` is only ever given a numeric address (``HostResolver`` finds it
/// off the loop), for which hiredis's `getaddrinfo` returns at once. The context is freed by `redisFree` in `deinit`, which closes ``fd``: stop watching
/// it first. Every reply is copied and freed before it is returned. Not thread-safe: confined to
/// the loop thread of the ``LoopConnection`` that owns it.
final class NonBlockingHiredisContext {
    private let context: UnsafeMutablePointer<redisContext>
    /// The socket, for the loop to watch. Owned by the context.
    let fd: Int32
    /// The numeric address connected to, for messages.
    let address: String

    private init(context: UnsafeMutablePointer<redisContext>, address: String) {
        self.context = context
        self.fd = context.pointee.fd
        self.address = address
    }

    deinit {
        redisFree(context)
    }

    /// Starts a TCP connect and returns at once; the socket turns writable when the connect
    /// completes or fails (``connectOutcome()`` tells which). A connect that fails at once (a
    /// refused loopback port, an unknown host) is a `.unavailable` failure here.
    static func connect(host: String, port: Int) -> Result<NonBlockingHiredisContext, RedisError> {
        let target = "\(host):\(port)"
        guard let raw = redisConnectNonBlock(host, Int32(clamping: port)) else {
            return .failure(RedisError(kind: .unavailable, detail: "connect \(target): out of memory"))
        }
        let connection = NonBlockingHiredisContext(context: raw, address: host)
        guard raw.pointee.err == 0 else {
            return .failure(RedisError(kind: .unavailable, detail: "connect \(target): \(Hiredis.errorText(of: raw))"))
        }
        _ = redisEnableKeepAlive(raw)
        return .success(connection)
    }

    /// Once the socket is writable after `connect`: nil when the connection is established, else
    /// why the connect failed (the socket's `SO_ERROR`).
    func connectOutcome() -> RedisError? {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else {
            return RedisError(kind: .unavailable, detail: "getsockopt: \(String(cString: strerror(errno)))")
        }
        guard error == 0 else { return RedisError(kind: .unavailable, detail: String(cString: strerror(error))) }
        return nil
    }

    /// Formats one command into the output buffer; nothing is written to the socket yet.
    func append(_ arguments: [[UInt8]]) -> Bool {
        Hiredis.append(arguments, to: context)
    }

    /// Adds one command already encoded in RESP; nothing is written to the socket yet.
    func append(encoded command: [UInt8]) -> Bool {
        Hiredis.append(encoded: command, to: context)
    }

    /// Writes as much of the output buffer as the socket takes in one `write` (`redisBufferWrite`).
    /// - Returns: `true` when the buffer is now empty; `false` when the socket is full (wait until
    ///   it is writable again).
    func write() -> Result<Bool, RedisError> {
        var done: Int32 = 0
        guard redisBufferWrite(context, &done) == REDIS_OK else {
            return .failure(Hiredis.error(of: context, errno: errno))
        }
        return .success(done != 0)
    }

    /// What one `redisBufferRead` takes from the socket at most: hiredis's read buffer.
    static let readChunk = 16 * 1024

    /// Reads what the socket holds (one `read` of at most ``readChunk`` bytes, `redisBufferRead`)
    /// into the reply parser. Nothing to read is not an error; EOF and resets are.
    /// - Returns: whether the read filled its buffer, so the socket may hold more.
    func read() -> Result<Bool, RedisError> {
        let before = context.pointee.reader?.pointee.len ?? 0
        guard redisBufferRead(context) == REDIS_OK else {
            return .failure(Hiredis.error(of: context, errno: errno))
        }
        let after = context.pointee.reader?.pointee.len ?? 0
        return .success(after > before && after - before >= Self.readChunk)
    }

    /// The next complete reply already read (`redisGetReplyFromReader`), or nil when the parser
    /// needs more bytes.
    func nextReply() -> Result<RedisReply?, RedisError> {
        var raw: UnsafeMutableRawPointer?
        guard redisGetReplyFromReader(context, &raw) == REDIS_OK else {
            return .failure(Hiredis.error(of: context, errno: errno))
        }
        guard let raw else { return .success(nil) }
        return Hiredis.takeReply(raw).map { $0 }
    }
}
