import Loops
import PWCore
import PWCrypto
import RedisClient
import Registration

/// The outbox's Redis Streams, one set per (app, upstream): `shards` streams that deliveries are
/// spread over by push token (so one token's deliveries share a stream and keep their order), a
/// lease per shard (the one replica that reads it), one consumer group for every replica, and a
/// dead-letter stream. Every key of one shard shares a hash tag, so each command and script
/// names one slot on a Redis Cluster.
///
/// Key layout: `pw:v2:{outbox:<app>:<upstream>:<shard>}:s` (the stream), `…:lease`, and
/// `…:q:<sha256(token)>` (the fingerprint of a registration of that token waiting in the shard);
/// `pw:v2:{outbox:<app>:<upstream>:dead}:s` (dead letters), `…:dead}:layout:<consumer>` (each
/// running process's shard count, renewed while it runs). The waiting mark shares the stream's
/// tag, so checking it, appending and setting it are one script on one slot.
///
/// Entries are written and read through `sealer`: with `store.encryption_key`, their push tokens
/// and Web Push secrets are sealed (`OutboxEntry.encoded(sealer:)`).
///
/// Thread-safe: stateless over the client's pipelined pool (workers run off the event loops).
package struct OutboxStreams: OutboxQueue {
    package let client: RedisClient
    package let sealer: StoreSealer
    /// Names a token's waiting mark, as the store's other keys name tokens.
    package let digests: KeyDigest
    package static let group = "pushwarden"

    /// - Parameter digests: must be the sidecars' (`store.digest_key`) wherever marks are set or
    ///   cleared; a reader of dead letters alone may leave it unkeyed.
    package init(client: RedisClient, sealer: StoreSealer = .none, digests: KeyDigest = .unkeyed) {
        self.client = client
        self.sealer = sealer
        self.digests = digests
    }

    /// The entry a stream message holds, its sealed fields opened.
    package func decode(_ message: Message) -> Result<OutboxEntry, OutboxEntry.DecodingFailure> {
        guard let body = message.body else { return .failure(.missing("e")) }
        return OutboxEntry.decode(body, sealer: sealer)
    }

    package typealias Upstream = OutboxTarget
    package typealias Mark = OutboxMark
    package typealias Message = OutboxMessage

    // MARK: Writing

    /// Appends `entry` to its shard's stream and sets or clears the token's waiting mark, in one
    /// script, over `loop`'s own connection when a request on that loop queues it (nil: the pool).
    /// Returns once Redis acknowledged it: the shard when appended, nil when the same registration
    /// already waited (nothing written).
    @discardableResult
    package func append(_ entry: OutboxEntry, to upstream: Upstream, mark: Mark = .cleared, on loop: EventLoop?) async throws(StoreError) -> Int? {
        let call = appendCall(entry, to: upstream, mark: mark)
        return try Self.appended(try await evaluate(Self.appendScript, keys: call.keys, arguments: call.arguments, on: loop), shard: call.shard).get()
    }

    /// ``append(_:to:mark:on:)`` sent now on `loop`'s own connection (call on its thread), without
    /// a task: the script leaves in the loop turn's write with what the caller sends before it waits.
    package func startAppend(_ entry: OutboxEntry, to upstream: Upstream, mark: Mark, on loop: EventLoop) -> Started<Result<Int?, StoreError>> {
        let call = appendCall(entry, to: upstream, mark: mark)
        let started = Started<Result<Int?, StoreError>>()
        client.evaluate(Self.appendScript, keys: call.keys, arguments: call.arguments, on: loop) { reply in
            started.complete(reply.flatMap { Self.appended($0, shard: call.shard) })
        }
        return started
    }

    private func appendCall(_ entry: OutboxEntry, to upstream: Upstream, mark: Mark) -> (shard: Int, keys: [String], arguments: [String]) {
        let (shard, markKey) = upstream.place(of: entry.pushToken, digests: digests)
        var arguments = [entry.encoded(sealer: sealer)]
        if case .waiting(let fingerprint, let seconds) = mark { arguments += [fingerprint, String(max(1, seconds))] }
        return (shard, [upstream.stream(shard), markKey], arguments)
    }

    /// The append script's answer: the shard when appended, nil when the registration already waited.
    private static func appended(_ reply: RedisReply, shard: Int) -> Result<Int?, StoreError> {
        switch reply {
        case .integer(1): .success(shard)
        case .integer(0): .success(nil)
        default: .failure(StoreError(.unexpectedReply, "unexpected append reply"))
        }
    }

    // MARK: Reading

    /// Creates the consumer group of every shard (and the streams), once per process.
    package func prepare(_ upstream: Upstream) async throws(StoreError) {
        for shard in 0..<upstream.shards {
            do {
                _ = try await send(["XGROUP", "CREATE", upstream.stream(shard), Self.group, "0", "MKSTREAM"])
            } catch where error.kind == .alreadyExists {
                continue  // another replica (or an earlier run) made it
            }
        }
    }

    /// Takes or renews the shard's lease for `owner` for `millis`. True when `owner` holds it.
    package func hold(_ shard: Int, of upstream: Upstream, owner: String, millis: Int, on loop: EventLoop? = nil) async throws(StoreError) -> Bool {
        let reply = try await evaluate(Self.holdScript, keys: [upstream.lease(shard)], arguments: [owner, String(millis)], on: loop)
        return reply == .integer(1)
    }

    /// Gives the lease back (only while `owner` still holds it).
    package func release(_ shard: Int, of upstream: Upstream, owner: String) async {
        _ = try? await evaluate(Self.releaseScript, key: upstream.lease(shard), arguments: [owner])
    }

    /// Entries of the shard that `consumer` has read but not acknowledged (in order, with `own`),
    /// then new ones, up to `count` in all. With `claimAfterMillis`, entries another consumer left
    /// pending that long are taken over first (and read as its own).
    package func read(_ shard: Int, of upstream: Upstream, consumer: String, count: Int, claimAfterMillis: Int?,
                      own: Bool, on loop: EventLoop? = nil) async throws(StoreError) -> [Message] {
        let stream = upstream.stream(shard)
        var own = own
        if let claimAfterMillis {
            let claimed = try await send(["XAUTOCLAIM", stream, Self.group, consumer, String(claimAfterMillis), "0-0", "COUNT", String(count),
                                          "JUSTID"], on: loop)
            // `[cursor, [ids], ...]`: a cursor past 0-0 means more waited than one call takes.
            if case .array(let parts) = claimed, parts.count >= 2 {
                if case .array(let ids) = parts[1], !ids.isEmpty { own = true }
                if parts[0].string != "0-0" { own = true }
            } else {
                own = true  // an answer not understood: read what may be ours
            }
        }
        var messages: [Message] = []
        if own {
            messages = Self.messages(ofRead: try await send(["XREADGROUP", "GROUP", Self.group, consumer, "COUNT", String(count),
                                                              "STREAMS", stream, "0"], on: loop))
        }
        if messages.count < count {
            messages += Self.messages(ofRead: try await send(["XREADGROUP", "GROUP", Self.group, consumer, "COUNT",
                                                               String(count - messages.count), "STREAMS", stream, ">"], on: loop))
        }
        return messages
    }

    /// Done: acknowledged and deleted in one step, so the stream holds only what still waits; a
    /// registration's waiting mark (`clearing` its token) goes in the same step, so the same
    /// content is queued again when it comes back.
    package func done(_ id: String, shard: Int, of upstream: Upstream, clearing pushToken: String? = nil, on loop: EventLoop? = nil) async throws(StoreError) {
        var keys = [upstream.stream(shard)]
        if let pushToken { keys.append(upstream.place(of: pushToken, digests: digests).mark) }
        _ = try await evaluate(Self.doneScript, keys: keys, arguments: [Self.group, id], on: loop)
    }

    /// Moves an entry to the dead-letter stream with why, then removes it from its shard (and
    /// clears a registration's waiting mark).
    package func deadLetter(_ message: Message, shard: Int, of upstream: Upstream, reason: String, status: Int?, code: String?,
                    clearing pushToken: String? = nil, on loop: EventLoop? = nil) async throws(StoreError) {
        var fields = ["XADD", upstream.dead, "*", "e", message.body ?? "", "reason", reason, "from", message.id,
                      "shards", String(upstream.shards)]
        if let status { fields += ["status", String(status)] }
        if let code { fields += ["code", code] }
        _ = try await send(fields, on: loop)
        try await done(message.id, shard: shard, of: upstream, clearing: pushToken, on: loop)
    }

    /// What waits in every shard, and the oldest entry's id time (ms since the epoch).
    package func depth(of upstream: Upstream) async throws(StoreError) -> (count: Int, oldestMillis: Int64?) {
        var count = 0
        var oldest: Int64?
        for shard in 0..<upstream.shards {
            if case .integer(let n) = try await send(["XLEN", upstream.stream(shard)]) {
                let (sum, overflow) = count.addingReportingOverflow(Int(n))
                count = overflow ? Int.max : max(0, sum)  // Redis's count, summed without a trap
            }
            let first = Self.messages(ofRange: try await send(["XRANGE", upstream.stream(shard), "-", "+", "COUNT", "1"]))
            if let ms = first.first?.idMillis { oldest = min(oldest ?? ms, ms) }
        }
        return (count, oldest)
    }

    /// Records, for `seconds`, that `consumer` reads `upstream` in `upstream.shards` shards: what
    /// `pushwarden outbox replay` without a policy places entries by (only while a sidecar runs).
    package func record(_ upstream: Upstream, consumer: String, seconds: Int) async throws(StoreError) {
        _ = try await send(["SET", upstream.layout(consumer), String(upstream.shards), "EX", String(max(1, seconds))])
    }

    // MARK: Dead letters (the `outbox` command)

    package func deadLetters(of upstream: Upstream, count: Int) async throws(StoreError) -> [(Message, [String: String])] {
        guard case .array(let entries) = try await send(["XRANGE", upstream.dead, "-", "+", "COUNT", String(count)]) else { return [] }
        return entries.compactMap { entry in
            guard case .array(let parts) = entry, parts.count == 2, let id = parts[0].string, case .array(let raw) = parts[1] else { return nil }
            var fields: [String: String] = [:]
            var index = 0
            while index + 1 < raw.count {
                if let key = raw[index].string { fields[key] = raw[index + 1].string ?? "" }
                index += 2
            }
            return (Message(id: id, body: fields["e"]), fields)
        }
    }

    /// Puts a dead letter back into its shard (a fresh entry: it waits behind what is there).
    package func replay(_ message: Message, entry: OutboxEntry, of upstream: Upstream) async throws(StoreError) {
        var fresh = entry
        fresh.acceptedAtMillis = Int64(SystemClock.epochMillis())
        try await append(fresh, to: upstream, mark: .cleared, on: nil)
        _ = try await send(["XDEL", upstream.dead, message.id])
    }

    package func drop(_ message: Message, of upstream: Upstream) async throws(StoreError) {
        _ = try await send(["XDEL", upstream.dead, message.id])
    }

    // MARK: Redis

    /// SET NX PX, or PEXPIRE while held by the same owner.
    private static let holdScript = LuaScript("""
        local current = redis.call('GET', KEYS[1])
        if current == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
        if current == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
        return 0
        """)
    private static let releaseScript = LuaScript(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")
    /// KEYS: the stream, the token's mark. ARGV: the entry, then (a registration) its fingerprint
    /// and the mark's seconds. 0 when that fingerprint already waits; else appended, 1.
    private static let appendScript = LuaScript("""
        if ARGV[2] then
          if redis.call('GET', KEYS[2]) == ARGV[2] then return 0 end
          redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
          redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
        else
          redis.call('XADD', KEYS[1], '*', 'e', ARGV[1])
          redis.call('DEL', KEYS[2])
        end
        return 1
        """)
    /// KEYS: the stream, and (a registration) the token's mark.
    private static let doneScript = LuaScript("""
        redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
        if KEYS[2] then redis.call('DEL', KEYS[2]) end
        return redis.call('XDEL', KEYS[1], ARGV[2])
        """)

    private func evaluate(_ script: LuaScript, key: String, arguments: [String]) async throws(StoreError) -> RedisReply {
        try await evaluate(script, keys: [key], arguments: arguments, on: nil)
    }

    private func evaluate(_ script: LuaScript, keys: [String], arguments: [String], on loop: EventLoop?) async throws(StoreError) -> RedisReply {
        let tail = [String(keys.count)] + keys + arguments
        do {
            return try await send(["EVALSHA", script.sha1] + tail, on: loop)
        } catch where error.kind == .missingScript {
            return try await send(["EVAL", script.source] + tail, on: loop)
        }
    }

    /// Through the pool unless a loop is named: a request's (`append`), or the one a worker's
    /// shard rides.
    private func send(_ arguments: [String], on loop: EventLoop? = nil) async throws(StoreError) -> RedisReply {
        let reply: RedisReply
        do {
            reply = try await client.send(arguments, on: loop)
        } catch {
            throw StoreError(error)
        }
        if case .error(let message) = reply { throw StoreError(replied: message) }
        return reply
    }

    /// `XREADGROUP`'s `[[stream, [[id, [field, value, ...]], ...]]]` (nil: nothing).
    package static func messages(ofRead reply: RedisReply) -> [Message] {
        guard case .array(let streams) = reply, case .array(let stream)? = streams.first, stream.count == 2 else { return [] }
        return messages(ofRange: stream[1])
    }

    /// `[[id, [field, value, ...]], ...]`; an entry deleted while pending reads as `[id, nil]`.
    package static func messages(ofRange reply: RedisReply) -> [Message] {
        guard case .array(let entries) = reply else { return [] }
        return entries.compactMap { entry in
            guard case .array(let parts) = entry, parts.count == 2, let id = parts[0].string else { return nil }
            guard case .array(let fields) = parts[1] else { return Message(id: id, body: nil) }
            var body: String?
            var index = 0
            while index + 1 < fields.count {
                if fields[index].string == "e" { body = fields[index + 1].string }
                index += 2
            }
            return Message(id: id, body: body)
        }
    }
}
