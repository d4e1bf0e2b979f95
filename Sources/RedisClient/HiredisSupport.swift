internal import CHiredis
#if canImport(Glibc)
import Glibc
#endif

/// What both context wrappers (``HiredisContext``, blocking, and ``NonBlockingHiredisContext``)
/// do with a `redisContext`: format commands into its output buffer, copy replies out of hiredis
/// memory, and translate its error fields. The pointers passed here stay owned by the caller,
/// except the reply given to `takeReply`, which this frees.
enum Hiredis {
    /// Copies the `redisReply` tree hiredis handed out into a ``RedisReply`` and frees it with
    /// `freeReplyObject`: the caller passes ownership and must not touch `raw` again.
    static func takeReply(_ raw: UnsafeMutableRawPointer) -> Result<RedisReply, RedisError> {
        defer { freeReplyObject(raw) }
        do {
            let reply = try convert(raw.assumingMemoryBound(to: redisReply.self))
            return .success(reply)
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

    /// Adds one command to the context's output buffer, encoded here in RESP (binary-safe: every
    /// argument goes with its length) and handed over in one piece with
    /// `redisAppendFormattedCommand`, which skips hiredis's own formatting. Nothing is written to
    /// the socket.
    static func append(_ arguments: [[UInt8]], to context: UnsafeMutablePointer<redisContext>) -> Bool {
        append(encoded: encode(arguments), to: context)
    }

    /// Adds one command already encoded in RESP (``encode(_:)``) to the output buffer.
    static func append(encoded command: [UInt8], to context: UnsafeMutablePointer<redisContext>) -> Bool {
        command.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                redisAppendFormattedCommand(context, chars.baseAddress, chars.count) == REDIS_OK
            }
        }
    }

    /// `*<count>\r\n` then `$<length>\r\n<bytes>\r\n` per argument, sized exactly up front.
    /// Generic over the argument's bytes, so a command of strings is encoded from their UTF-8
    /// storage with no byte array per argument.
    static func encode<Argument: Collection<UInt8>>(_ arguments: [Argument]) -> [UInt8] {
        var size = 3 + decimalLength(arguments.count)
        for argument in arguments { size += 5 + decimalLength(argument.count) + argument.count }
        var out: [UInt8] = []
        out.reserveCapacity(size)
        out.append(UInt8(ascii: "*"))
        appendDecimal(arguments.count, to: &out)
        out.append(contentsOf: [13, 10])
        for argument in arguments {
            out.append(UInt8(ascii: "$"))
            appendDecimal(argument.count, to: &out)
            out.append(contentsOf: [13, 10])
            out.append(contentsOf: argument)
            out.append(contentsOf: [13, 10])
        }
        return out
    }

    private static func decimalLength(_ value: Int) -> Int {
        var digits = 1
        var rest = value / 10
        while rest > 0 { digits += 1; rest /= 10 }
        return digits
    }

    private static func appendDecimal(_ value: Int, to out: inout [UInt8]) {
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        var rest = value
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
    }

    /// The AUTH and SELECT commands a new connection sends before any other, named for errors.
    /// The name never includes the password.
    static func setupSteps(_ configuration: RedisConfiguration) -> [(name: String, argv: [[UInt8]])] {
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
        return setup
    }

    /// The context's error as a ``RedisError``. A blocking socket reports its timeout
    /// (SO_RCVTIMEO/SO_SNDTIMEO) as an I/O error with errno EAGAIN: the only way to tell a timeout
    /// from a broken connection. A non-blocking context never fails with EAGAIN (hiredis treats
    /// it as "try again later"), so there every I/O error means the connection broke.
    static func error(of context: UnsafeMutablePointer<redisContext>, errno savedErrno: Int32) -> RedisError {
        let text = errorText(of: context)
        switch context.pointee.err {
        case REDIS_ERR_IO where savedErrno == EAGAIN || savedErrno == EWOULDBLOCK || savedErrno == ETIMEDOUT:
            return RedisError(kind: .timeout, detail: "no reply within the command timeout (\(text))")
        case REDIS_ERR_PROTOCOL:
            return RedisError(kind: .protocolError, detail: text)
        default:
            return RedisError(kind: .unavailable, detail: text.isEmpty ? "connection failed" : text)
        }
    }

    static func errorText(of context: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: context.pointee.errstr) { buffer in
            let length = buffer.firstIndex(of: 0) ?? buffer.count
            return String(decoding: buffer.prefix(length), as: UTF8.self)
        }
    }
}
