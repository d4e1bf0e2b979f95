import Loops
import PWCore
import RedisClient

/// The inventory in Redis, beside the dedupe state (`RedisStore`). Every command touches keys of
/// one hash tag only (the contact's, the token's or the app's), so the inventory works on a Redis
/// Cluster as it does on one Redis; `record`'s three commands leave together and cost one round
/// trip on a loop's connection.
final class RedisInventoryStore: InventoryStore {
    let store: RedisStore

    init(store: RedisStore) { self.store = store }

    /// KEYS[1] the contact's inventory; ARGV: token digest, sealed, platform, push service,
    /// upstreams (a JSON array), now (ms). Merges with the record already there (first seen and
    /// the upstreams it named are kept) and answers {is new, installation count}.
    private static let recordScript = LuaScript("""
        local current = redis.call('HGET', KEYS[1], ARGV[1])
        local record
        if current then
          local ok, decoded = pcall(cjson.decode, current)
          if ok and type(decoded) == 'table' then record = decoded end
        end
        local isNew = 0
        if not current then isNew = 1 end
        if not record then record = {} end
        local now = tonumber(ARGV[6])
        local names, merged = {}, {}
        if type(record.u) == 'table' then
          for _, name in ipairs(record.u) do
            if type(name) == 'string' and not names[name] then names[name] = true; merged[#merged + 1] = name end
          end
        end
        for _, name in ipairs(cjson.decode(ARGV[5])) do
          if not names[name] then names[name] = true; merged[#merged + 1] = name end
        end
        local first = tonumber(record.f) or now
        local encoded = cjson.encode({x = ARGV[2], p = ARGV[3], s = ARGV[4], u = merged, f = first, l = now})
        redis.call('HSET', KEYS[1], ARGV[1], encoded)
        return {isNew, redis.call('HLEN', KEYS[1])}
        """)

    /// KEYS[1] the contact's inventory; ARGV[1] token digest, ARGV[2] (optional) the record that
    /// must still be there.
    private static let removeScript = LuaScript("""
        if ARGV[2] and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
        redis.call('HDEL', KEYS[1], ARGV[1])
        return 1
        """)

    /// KEYS[1] the lease; ARGV[1] owner, ARGV[2] ttl (ms).
    private static let leaseScript = LuaScript("""
        local holder = redis.call('GET', KEYS[1])
        if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
        if holder then return 0 end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return 1
        """)

    /// The holder's `SET … GET`, the record's merge script and the last-seen `ZADD`: three hash
    /// tags, so three commands (on a cluster, up to three masters), sent in one batch.
    func record(_ write: InventoryWrite, on loop: EventLoop?) async throws(StoreError) -> InventoryWriteResult {
        let upstreams = JSONValue.array(write.upstreams.map { .string($0) }).encodedString()
        let now = String(write.nowMillis)
        let recordKeys = [write.contact.inventory]
        let recordArguments = [write.token.digest, write.sealed, write.platform, write.pushService, upstreams, now]
        let replies = await store.sendAll([
            ["SET", write.token.owner, write.contact.digest, "GET"],
            ["EVALSHA", Self.recordScript.sha1, "1"] + recordKeys + recordArguments,
            ["ZADD", write.app.seen, now, Self.seenMember(write.contact, write.token)],
        ], on: loop)
        let ownerReply = try replies[0].get()
        let recordReply: RedisReply
        switch replies[1] {
        case .success(let reply): recordReply = reply
        case .failure(let error) where error.kind == .missingScript:
            // This Redis has not seen the script (a restart, SCRIPT FLUSH): sent whole, once.
            recordReply = try await store.evaluate(Self.recordScript, keys: recordKeys, arguments: recordArguments, on: loop)
        case .failure(let error): throw error
        }
        _ = try replies[2].get()
        guard case .array(let counts) = recordReply, counts.count == 2, case .integer(let isNew) = counts[0],
              case .integer(let count) = counts[1] else { throw StoreError(.unexpectedReply, "unexpected inventory reply") }
        let previous = ownerReply.string.flatMap { $0 == write.contact.digest ? nil : ContactKeys(digest: $0) }
        return InventoryWriteResult(previousOwner: previous, isNew: isNew == 1, count: Int(count))
    }

    func owner(of token: TokenKeys, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        try await store.get(token.owner, on: loop).map(ContactKeys.init(digest:))
    }

    func installation(_ token: TokenKeys, of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> StoredInstallation? {
        let reply = try await store.send(["HGET", contact.inventory, token.digest], on: loop)
        return reply.string.flatMap { StoredInstallation.decode($0, token: token) }
    }

    func installations(of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> [StoredInstallation] {
        guard case .array(let items) = try await store.send(["HGETALL", contact.inventory], on: loop) else {
            throw StoreError(.unexpectedReply, "unexpected HGETALL reply")
        }
        var result: [StoredInstallation] = []
        var index = 0
        while index + 1 < items.count {
            if let field = items[index].string, let value = items[index + 1].string,
               let installation = StoredInstallation.decode(value, token: TokenKeys(digest: field)) {
                result.append(installation)
            }
            index += 2
        }
        return result
    }

    func remove(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, ifStill expected: String?, on loop: EventLoop?) async throws(StoreError) -> Bool {
        let reply = try await store.evaluate(Self.removeScript, keys: [contact.inventory], arguments: [token.digest] + (expected.map { [$0] } ?? []),
                                             on: loop)
        guard case .integer(1) = reply else { return false }
        try await store.release(token.owner, owner: contact.digest, on: loop)
        _ = try await store.send(["ZREM", app.seen, Self.seenMember(contact, token)], on: loop)
        return true
    }

    func seen(before cutoffMillis: Int64, app: AppInventoryKeys, limit: Int) async throws(StoreError) -> [(contact: ContactKeys, token: TokenKeys)] {
        guard case .array(let items) = try await store.send(["ZRANGEBYSCORE", app.seen, "-inf", "(" + String(cutoffMillis), "LIMIT", "0", String(limit)], on: nil) else {
            throw StoreError(.unexpectedReply, "unexpected ZRANGEBYSCORE reply")
        }
        return items.compactMap { $0.string.flatMap(Self.parseSeenMember) }
    }

    func forgetSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys) async throws(StoreError) {
        _ = try await store.send(["ZREM", app.seen, Self.seenMember(contact, token)], on: nil)
    }

    func lease(_ key: String, owner: String, ttlMillis: Int) async throws(StoreError) -> Bool {
        let reply = try await store.evaluate(Self.leaseScript, keys: [key], arguments: [owner, String(max(ttlMillis, 1))], on: nil)
        return reply == .integer(1)
    }
}
