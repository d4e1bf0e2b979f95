internal import CHiredis
#if canImport(Glibc)
import Glibc
#endif

/// Owns one blocking `redisContext` (https://github.com/redis/hiredis/blob/v0.14.1/README.md).
///
/// The context is created by `redisConnectWithTimeout` and freed by `redisFree` in `deinit`; every
/// `redisReply` it hands out is copied into a ``RedisReply`` and freed with `freeReplyObject`
/// before the read returns. Not thread-safe: a context is confined to its connection's I/O thread.
final class HiredisContext {
    private let context: UnsafeMutablePointer<redisContext>

    private init(context: UnsafeMutablePointer<redisContext>) {
        self.context = context
    }

    deinit {
        redisFree(context)
    }

    /// Connects, sets the command timeout, then sends AUTH and SELECT as the configuration asks.
    /// Any failure yields `.unavailable`: a half-set-up connection is never handed out.
    static func connect(_ configuration: RedisConfiguration) -> Result<HiredisContext, RedisError> {
        let target = "\(configuration.host):\(configuration.port)"
        guard let raw = redisConnectWithTimeout(
            configuration.host, Int32(clamping: configuration.port), timeval(millis: configuration.connectTimeoutMillis)
        ) else {
            return .failure(RedisError(kind: .unavailable, detail: "connect \(target): out of memory"))
        }
        let connection = HiredisContext(context: raw)
        if raw.pointee.err != 0 {
            return .failure(RedisError(kind: .unavailable, detail: "connect \(target): \(connection.errorText)"))
        }
        guard redisSetTimeout(raw, timeval(millis: configuration.commandTimeoutMillis)) == REDIS_OK else {
            return .failure(RedisError(kind: .unavailable, detail: "connect \(target): cannot set timeout: \(connection.errorText)"))
        }
        _ = redisEnableKeepAlive(raw)

        var setup: [(name: String, argv: [[UInt8]])] = []
        if let password = configuration.password {
            var argv: [[UInt8]] = [Array("AUTH".utf8)]
            if let username = configuration.username { argv.append(Array(username.utf8)) }
            argv.append(Array(password.utf8))
            setup.append(("AUTH", argv))
        }
        if configuration.database != 0 {
            setup.append(("SELECT", [Array("SELECT".utf8), Array(String(configuration.database).utf8)]))
        }
        for step in setup {
            guard connection.append(step.argv) else {
                return .failure(RedisError(kind: .unavailable, detail: "\(step.name) on \(target): \(connection.errorText)"))
            }
            switch connection.readReply() {
            case .success(.error(let message)):
                return .failure(RedisError(kind: .unavailable, detail: "\(step.name) on \(target) refused: \(message)"))
            case .success:
                continue
            case .failure(let error):
                return .failure(RedisError(kind: .unavailable, detail: "\(step.name) on \(target): \(error.detail)"))
            }
        }
        return .success(connection)
    }

    /// Formats one command into hiredis's output buffer (`redisAppendCommandArgv`, binary-safe:
    /// every argument is passed with its length). Nothing is written to the socket yet.
    func append(_ arguments: [[UInt8]]) -> Bool {
        var flat: [UInt8] = []
        flat.reserveCapacity(arguments.reduce(1) { $0 + $1.count })
        var lengths: [Int] = []
        lengths.reserveCapacity(arguments.count)
        for argument in arguments {
            flat.append(contentsOf: argument)
            lengths.append(argument.count)
        }
        flat.append(0)  // never empty, so the base address is never nil
        return flat.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress!)
            var pointers: [UnsafePointer<CChar>?] = []
            pointers.reserveCapacity(arguments.count)
            var offset = 0
            for length in lengths {
                pointers.append(base.advanced(by: offset).assumingMemoryBound(to: CChar.self))
                offset += length
            }
            return redisAppendCommandArgv(context, Int32(arguments.count), &pointers, lengths) == REDIS_OK
        }
    }

    /// Writes the whole output buffer (`redisBufferWrite` until done) in as few syscalls as the
    /// socket allows. Blocks for at most the command timeout per write.
    func flush() -> RedisError? {
        var done: Int32 = 0
        while done == 0 {
            if redisBufferWrite(context, &done) != REDIS_OK {
                return currentError(errno: errno)
            }
        }
        return nil
    }

    /// Reads the next reply in pipeline order (`redisGetReply`), copies it and frees it.
    func readReply() -> Result<RedisReply, RedisError> {
        var raw: UnsafeMutableRawPointer?
        let status = redisGetReply(context, &raw)
        let savedErrno = errno
        guard status == REDIS_OK, let raw else {
            return .failure(currentError(errno: savedErrno))
        }
        defer { freeReplyObject(raw) }
        do {
            return .success(try Self.convert(raw.assumingMemoryBound(to: redisReply.self)))
        } catch {
            return .failure(error)
        }
    }

    private static func convert(_ reply: UnsafePointer<redisReply>) throws(RedisError) -> RedisReply {
        let value = reply.pointee
        func bytes() -> [UInt8] {
            guard let str = value.str, value.len > 0 else { return [] }
            return Array(UnsafeRawBufferPointer(start: str, count: value.len))
        }
        switch value.type {
        case REDIS_REPLY_STRING: return .bulk(bytes())
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER: return .integer(Int64(value.integer))
        case REDIS_REPLY_NIL: return .null
        case REDIS_REPLY_ARRAY:
            var elements: [RedisReply] = []
            elements.reserveCapacity(value.elements)
            for index in 0..<value.elements {
                guard let element = value.element[index] else {
                    throw RedisError(kind: .protocolError, detail: "array reply with a missing element")
                }
                elements.append(try convert(element))
            }
            return .array(elements)
        default:
            throw RedisError(kind: .protocolError, detail: "unknown reply type \(value.type)")
        }
    }

    /// hiredis reports a socket timeout (SO_RCVTIMEO/SO_SNDTIMEO on a blocking socket) as an I/O
    /// error with errno EAGAIN; that is the only way to tell a timeout from a broken connection.
    private func currentError(errno savedErrno: Int32) -> RedisError {
        let text = errorText
        switch context.pointee.err {
        case REDIS_ERR_IO where savedErrno == EAGAIN || savedErrno == EWOULDBLOCK || savedErrno == ETIMEDOUT:
            return RedisError(kind: .timeout, detail: "no reply within the command timeout (\(text))")
        case REDIS_ERR_PROTOCOL:
            return RedisError(kind: .protocolError, detail: text)
        default:
            return RedisError(kind: .unavailable, detail: text.isEmpty ? "connection failed" : text)
        }
    }

    private var errorText: String {
        withUnsafeBytes(of: context.pointee.errstr) { buffer in
            let length = buffer.firstIndex(of: 0) ?? buffer.count
            return String(decoding: buffer.prefix(length), as: UTF8.self)
        }
    }
}

extension timeval {
    init(millis: Int) {
        let clamped = max(1, millis)
        self.init(tv_sec: clamped / 1000, tv_usec: (clamped % 1000) * 1000)
    }
}
