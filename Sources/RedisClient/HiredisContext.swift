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

        for step in Hiredis.setupSteps(configuration) {
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

    /// Formats one command into hiredis's output buffer; nothing is written to the socket yet.
    func append(_ arguments: [[UInt8]]) -> Bool {
        Hiredis.append(arguments, to: context)
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
        return Hiredis.takeReply(raw)
    }

    private func currentError(errno savedErrno: Int32) -> RedisError {
        Hiredis.error(of: context, errno: savedErrno)
    }

    private var errorText: String { Hiredis.errorText(of: context) }
}

extension timeval {
    init(millis: Int) {
        let clamped = max(1, millis)
        self.init(tv_sec: clamped / 1000, tv_usec: (clamped % 1000) * 1000)
    }
}
