import RedisClient

/// The shared store: several PushWarden processes behind one Redis see the same dedupe state and
/// the same in-flight locks.
public final class RedisStore: DedupeStore {
    private let client: RedisClient
    public let kind = "redis"

    /// Deletes the lock only while it still holds this owner (compare-and-delete in one step).
    private static let releaseScript =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"

    public init(client: RedisClient) { self.client = client }

    public func get(_ key: String) async throws(StoreError) -> String? {
        switch try await send(["GET", key]) {
        case .null: return nil
        case let reply:
            guard let value = reply.string else { throw StoreError("unexpected GET reply") }
            return value
        }
    }

    public func set(_ key: String, _ value: String, ttlSeconds: Int) async throws(StoreError) {
        try expectOK(try await send(["SET", key, value, "EX", String(max(ttlSeconds, 1))]))
    }

    public func delete(_ key: String) async throws(StoreError) {
        _ = try await send(["DEL", key])
    }

    public func acquire(_ key: String, owner: String, ttlMillis: Int) async throws(StoreError) -> Bool {
        switch try await send(["SET", key, owner, "NX", "PX", String(max(ttlMillis, 1))]) {
        case .status("OK"): return true
        case .null: return false
        default: throw StoreError("unexpected SET NX reply")
        }
    }

    public func release(_ key: String, owner: String) async throws(StoreError) {
        _ = try await send(["EVAL", Self.releaseScript, "1", key, owner])
    }

    public func isReachable() async -> Bool { await client.ping() }

    private func send(_ arguments: [String]) async throws(StoreError) -> RedisReply {
        let reply: RedisReply
        do {
            reply = try await client.send(arguments)
        } catch {
            throw StoreError("redis \(error.kind): \(error.detail)")
        }
        if case .error(let message) = reply { throw StoreError("redis error: \(message)") }
        return reply
    }

    private func expectOK(_ reply: RedisReply) throws(StoreError) {
        guard case .status("OK") = reply else { throw StoreError("unexpected reply") }
    }
}
