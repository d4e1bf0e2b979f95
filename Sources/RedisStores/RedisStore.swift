import Loops
import PWCore
import PWCrypto
import RedisClient
import Registration

/// The shared store: several PushWarden processes behind one Redis see the same dedupe state and
/// the same in-flight locks.
public final class RedisStore: DedupeStore {
    /// Also the outbox's: it shares the store's Redis.
    package let client: RedisClient
    public let kind = "redis"

    /// Deletes the lock only while it still holds this owner (compare-and-delete in one step).
    private static let releaseScript = LuaScript(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")

    public init(client: RedisClient) { self.client = client }

    public func get(_ key: String, on loop: EventLoop?) async throws(StoreError) -> String? {
        try Self.value(ofGET: try await send(["GET", key], on: loop))
    }

    /// On the loop's own Redis connection: the GETs of one loop turn share one write.
    public func peek(_ key: String, on loop: EventLoop, completion: @escaping (Result<String?, StoreError>) -> Void) {
        client.send(bytes: [Self.getCommand, Array(key.utf8)], on: loop) { result in
            switch result {
            case .success(let reply):
                completion(Result { () throws(StoreError) in try Self.value(ofGET: reply) })
            case .failure(let error):
                completion(.failure(StoreError(error)))
            }
        }
    }

    private static let getCommand = Array("GET".utf8)

    private static func value(ofGET reply: RedisReply) throws(StoreError) -> String? {
        switch reply {
        case .null: return nil
        case .error(let message): throw StoreError(replied: message)
        default:
            guard let value = reply.string else { throw StoreError(.unexpectedReply, "unexpected GET reply") }
            return value
        }
    }

    public func set(_ key: String, _ value: String, ttlSeconds: Int, on loop: EventLoop?) async throws(StoreError) {
        try expectOK(try await send(["SET", key, value, "EX", String(max(ttlSeconds, 1))], on: loop))
    }

    public func delete(_ key: String, on loop: EventLoop?) async throws(StoreError) {
        _ = try await send(["DEL", key], on: loop)
    }

    public func release(_ key: String, owner: String, on loop: EventLoop?) async throws(StoreError) {
        _ = try await evaluate(Self.releaseScript, keys: [key], arguments: [owner], on: loop)
    }

    /// KEYS[1] entry, KEYS[2] lock; ARGV[1] fingerprint, ARGV[2] ttl (s), ARGV[3] owner.
    private static let commitAndUnlockScript = LuaScript("""
        redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
        if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
        return 1
        """)

    /// `SET lock owner NX PX ttl` and `GET entry`, sent together (one round trip, no script: two
    /// plain commands cost Redis a fraction of a Lua call). The `GET` runs after the `SET`, so it
    /// sees every commit made before the lock was taken, as the lock holder's commit-and-unlock
    /// sets the entry before it frees the lock. A lock taken for an entry that turns out current is
    /// given back at once.
    public func checkAndLock(entry: String, fingerprint: String, lock: String, owner: String,
                             ttlMillis: Int, on loop: EventLoop?) async throws(StoreError) -> LockAttempt {
        let (set, get) = try await sendPair(["SET", lock, owner, "NX", "PX", String(max(ttlMillis, 1))], ["GET", entry], on: loop)
        let current = try Self.value(ofGET: get) == fingerprint
        switch set {
        case .status("OK"):
            guard current else { return .acquired }
            try await release(lock, owner: owner, on: loop)
            return .current
        case .null:
            return current ? .current : .busy
        default:
            throw StoreError(.unexpectedReply, "unexpected SET NX reply")
        }
    }

    public func commitAndUnlock(entry: String, fingerprint: String, ttlSeconds: Int, lock: String,
                                owner: String, on loop: EventLoop?) async throws(StoreError) {
        _ = try await evaluate(Self.commitAndUnlockScript, keys: [entry, lock],
                               arguments: [fingerprint, String(max(ttlSeconds, 1)), owner], on: loop)
    }

    public func commitAndUnlock(entry: String, fingerprint: String, ttlSeconds: Int, lock: String, owner: String,
                                on loop: EventLoop, completion: @escaping (Result<Void, StoreError>) -> Void) {
        evaluate(Self.commitAndUnlockScript, keys: [entry, lock], arguments: [fingerprint, String(max(ttlSeconds, 1)), owner], on: loop) { result in
            completion(result.map { _ in () })
        }
    }

    public func isReachable() async -> Bool { await client.ping() }

    /// Runs a script by its SHA-1 (Redis keeps compiled scripts), sending the source only when
    /// this Redis has not seen it yet (after a restart or SCRIPT FLUSH), which also caches it.
    func evaluate(_ script: LuaScript, keys: [String], arguments: [String], on loop: EventLoop?) async throws(StoreError) -> RedisReply {
        let tail = [String(keys.count)] + keys + arguments
        do {
            return try await send(["EVALSHA", script.sha1] + tail, on: loop)
        } catch where error.kind == .missingScript {
            return try await send(["EVAL", script.source] + tail, on: loop)
        }
    }

    /// ``evaluate(_:keys:arguments:)`` on `loop`'s own connection, without a task: `completion`
    /// is called on the loop's thread with the script's reply, or why there is none (an error
    /// reply included). Call on `loop`.
    func evaluate(_ script: LuaScript, keys: [String], arguments: [String], on loop: EventLoop,
                  completion: @escaping (Result<RedisReply, StoreError>) -> Void) {
        client.evaluate(script, keys: keys, arguments: arguments, on: loop, completion: completion)
    }

    /// Over `loop`'s own connection when the operation is made for a loop, else through the
    /// client's pipelined pool: the caller's choice, whatever thread the task runs on.
    func send(_ arguments: [String], on loop: EventLoop?) async throws(StoreError) -> RedisReply {
        let result: Result<RedisReply, RedisError>
        do {
            result = .success(try await client.send(arguments, on: loop))
        } catch {
            result = .failure(error)
        }
        return try Self.reply(result)
    }

    /// Two commands in one round trip on a loop's connection (both leave in the turn's write);
    /// one after the other through the pool with no loop.
    private func sendPair(_ first: [String], _ second: [String], on loop: EventLoop?) async throws(StoreError) -> (RedisReply, RedisReply) {
        let replies = await sendAll([first, second], on: loop)
        return (try replies[0].get(), try replies[1].get())
    }

    /// Several commands in one round trip on a loop's connection (all leave in the turn's
    /// write), with no task per command; one after the other through the pool with no loop.
    /// Each command's reply or failure (an error reply included), in the commands' order.
    func sendAll(_ commands: [[String]], on loop: EventLoop?) async -> [Result<RedisReply, StoreError>] {
        guard !commands.isEmpty else { return [] }
        guard let loop else {
            var results: [Result<RedisReply, StoreError>] = []
            results.reserveCapacity(commands.count)
            for command in commands {
                do { results.append(.success(try await send(command, on: nil))) } catch { results.append(.failure(error)) }
            }
            return results
        }
        let raw = await withCheckedContinuation { (continuation: BatchContinuation) in
            // On the loop (the hot path) without a job: the hop's closure is made only for a hop.
            if loop.isCurrent {
                startAll(commands, on: loop, continuation)
            } else if !loop.execute({ [self] in startAll(commands, on: loop, continuation) }) {
                let stopped = Result<RedisReply, RedisError>.failure(RedisError(kind: .closed, detail: "event loop stopped"))
                continuation.resume(returning: Array(repeating: stopped, count: commands.count))
            }
        }
        return raw.map { result in Result { () throws(StoreError) in try Self.reply(result) } }
    }

    /// Many commands through the pool, off the loops, up to 32 at a time (the pool pipelines
    /// them): the replies in the commands' order, or the first failure. For the background work
    /// that reads many keys at once (the sweeper's shards).
    func sendConcurrently(_ commands: [[String]]) async throws(StoreError) -> [RedisReply] {
        let results = await mapConcurrently(commands, width: 32) { [self] command in
            await capture { () async throws(StoreError) in try await send(command, on: nil) }
        }
        guard results.count == commands.count else { throw StoreError(.unexpectedReply, "\(results.count) replies to \(commands.count) commands") }
        var replies: [RedisReply] = []
        replies.reserveCapacity(results.count)
        for result in results { replies.append(try result.get()) }
        return replies
    }

    private typealias BatchContinuation = CheckedContinuation<[Result<RedisReply, RedisError>], Never>

    /// Sends every command on `loop`'s connection; call on `loop`.
    private func startAll(_ commands: [[String]], on loop: EventLoop, _ continuation: BatchContinuation) {
        let batch = ReplyBatch(count: commands.count, loop: loop, continuation: continuation)
        for (index, command) in commands.enumerated() {
            client.send(command, on: loop) { result in batch.deliver(index, result) }
        }
    }

    static func reply(_ result: Result<RedisReply, RedisError>) throws(StoreError) -> RedisReply {
        let reply: RedisReply
        switch result {
        case .success(let value): reply = value
        case .failure(let error): throw StoreError(error)
        }
        if case .error(let message) = reply { throw StoreError(replied: message) }
        return reply
    }

    private func expectOK(_ reply: RedisReply) throws(StoreError) {
        guard case .status("OK") = reply else { throw StoreError(.unexpectedReply, "unexpected reply") }
    }
}

/// Every Redis-backed store reads Redis's failures here, once.
extension StoreError {
    init(_ error: RedisError) {
        switch error.kind {
        case .timeout: self.init(.timeout, "redis timeout: \(error.detail)")
        case .protocolError: self.init(.unexpectedReply, "redis protocol error: \(error.detail)")
        case .unavailable, .closed: self.init(.unavailable, "redis \(error.kind): \(error.detail)")
        }
    }

    /// An error reply. Its first word is Redis's error code (`NOSCRIPT No matching script...`):
    /// read here, at the protocol's edge, into a kind.
    init(replied message: String) {
        switch message.prefix(while: { $0 != " " }) {
        case "NOSCRIPT": self.init(.missingScript, "redis error: \(message)")
        case "BUSYGROUP": self.init(.alreadyExists, "redis error: \(message)")
        case "NOGROUP": self.init(.missingGroup, "redis error: \(message)")
        default: self.init(.refused, "redis error: \(message)")
        }
    }
}

extension RedisClient {
    /// A script by its SHA-1 on `loop`'s own connection, without a task, its source sent only when
    /// this Redis has not seen it: `completion` is called on the loop's thread with the reply, or
    /// why there is none (an error reply included). Call on `loop`.
    func evaluate(_ script: LuaScript, keys: [String], arguments: [String], on loop: EventLoop,
                  completion: @escaping (Result<RedisReply, StoreError>) -> Void) {
        // Encoded from the strings' own storage: no byte array per argument.
        var command = ["EVALSHA", script.sha1, String(keys.count)]
        command.reserveCapacity(3 + keys.count + arguments.count)
        command += keys
        command += arguments
        send(command, on: loop) { [self] result in
            let first = Result { () throws(StoreError) in try RedisStore.reply(result) }
            guard case .failure(let error) = first, error.kind == .missingScript else {
                completion(first)
                return
            }
            command[0] = "EVAL"
            command[1] = script.source
            send(command, on: loop) { result in
                completion(Result { () throws(StoreError) in try RedisStore.reply(result) })
            }
        }
    }
}

/// A Lua script and the SHA-1 Redis knows it by.
package struct LuaScript: Sendable {
    let source: String
    let sha1: String

    init(_ source: String) {
        self.source = source
        self.sha1 = SHA1.hexHash(Array(source.utf8))
    }
}

/// The replies of one batch of commands on one loop, collected until the last arrives. On one
/// connection they arrive in order, but on a cluster the commands go to several masters, and a
/// redirected one (MOVED, ASK, TRYAGAIN) completes later than those after it. Loop-confined.
private final class ReplyBatch {
    private var replies: [Result<RedisReply, RedisError>?]
    private var outstanding: Int
    private let continuation: CheckedContinuation<[Result<RedisReply, RedisError>], Never>
    /// For the checks only; the loop outlives every batch sent on it.
    private unowned(unsafe) let loop: EventLoop

    init(count: Int, loop: EventLoop, continuation: CheckedContinuation<[Result<RedisReply, RedisError>], Never>) {
        replies = Array(repeating: nil, count: count)
        outstanding = count
        self.loop = loop
        self.continuation = continuation
    }

    func deliver(_ index: Int, _ result: Result<RedisReply, RedisError>) {
        loop.assertOnLoop("ReplyBatch")
        replies[index] = result
        outstanding -= 1
        if outstanding == 0 { continuation.resume(returning: replies.map { $0! }) }
    }
}
