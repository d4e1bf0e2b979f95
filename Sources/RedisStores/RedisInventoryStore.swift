import Loops
import PWCore
import RedisClient
import Registration

/// The inventory in Redis, beside the dedupe state (`RedisStore`). Every command touches keys of
/// one hash tag only (the contact's or one of the app's shards), so the inventory works on a Redis
/// Cluster as it does on one Redis; `record`'s three commands leave together and cost one round
/// trip on a loop's connection.
package final class RedisInventoryStore: InventoryStore {
    let store: RedisStore

    package init(store: RedisStore) { self.store = store }

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
    /// must still be there. Answers {removed, records left}.
    private static let removeScript = LuaScript("""
        if ARGV[2] and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return {0, 1} end
        redis.call('HDEL', KEYS[1], ARGV[1])
        return {1, redis.call('HLEN', KEYS[1])}
        """)

    /// KEYS[1] the lease; ARGV[1] owner, ARGV[2] ttl (ms).
    private static let leaseScript = LuaScript("""
        local holder = redis.call('GET', KEYS[1])
        if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
        if holder then return 0 end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return 1
        """)

    /// The shard's script (holder, last seen, index and counts), the record's merge script and the
    /// contact's place among the app's contacts: three hash tags (the token's shard, the contact,
    /// the contact's shard), so on a cluster up to three masters; one batch.
    package func record(_ write: InventoryWrite, on loop: EventLoop?) async throws(StoreError) -> InventoryWriteResult {
        let now = String(write.nowMillis)
        let shard = write.app.shard(of: write.token)
        let recordKeys = [write.contact.inventory]
        // The merge script's arguments, made only when it runs (a record most likely new never needs them).
        func recordArguments() -> [String] {
            let upstreams = JSONValue.array(write.upstreams.map { .string($0) }).encodedString()
            return [write.token.digest, write.sealed, write.platform, write.pushService, upstreams, now]
        }
        let shardKeys = Self.shardKeys(shard, write.token)
        let shardArguments = [write.contact.digest, now, Self.seenMember(write.contact, write.token),
                              InventoryPosition(token: write.token, contact: write.contact).indexKey] + write.upstreams
        // A record most likely new is inserted whole (`HSETNX`, then `HLEN`: two plain commands cost
        // Redis a fraction of the merge script, which re-reads and re-encodes the JSON); only when
        // one was there after all is it merged, in a round trip of its own.
        let insert = write.likelyNew
            ? [["HSETNX", write.contact.inventory, write.token.digest,
                StoredInstallation.encode(sealed: write.sealed, platform: write.platform, pushService: write.pushService,
                                          upstreams: Self.unique(write.upstreams), firstSeen: write.nowMillis, lastSeen: write.nowMillis)],
               ["HLEN", write.contact.inventory]]
            : [["EVALSHA", Self.recordScript.sha1, "1"] + recordKeys + recordArguments()]
        var commands = [["EVALSHA", Self.shardWriteScript.sha1, "4"] + shardKeys + shardArguments] + insert
            + [["SADD", write.app.shard(of: write.contact).contacts, write.contact.digest]]
        // The session index rides in the same batch: no round trip of its own.
        if let session = write.session { commands.append(["SET", session.key, write.contact.digest, "PX", String(session.ttlMillis)]) }
        let replies = await store.sendAll(commands, on: loop)
        // A Redis that has not seen a script (a restart, SCRIPT FLUSH) gets it whole, once.
        let ownerReply: RedisReply
        switch replies[0] {
        case .success(let reply): ownerReply = reply
        case .failure(let error) where error.kind == .missingScript:
            ownerReply = try await store.evaluate(Self.shardWriteScript, keys: shardKeys, arguments: shardArguments, on: loop)
        case .failure(let error): throw error
        }
        var recordReply: RedisReply
        switch replies[1] {
        case .success(let reply): recordReply = reply
        case .failure(let error) where error.kind == .missingScript:
            recordReply = try await store.evaluate(Self.recordScript, keys: recordKeys, arguments: recordArguments(), on: loop)
        case .failure(let error): throw error
        }
        for reply in replies.dropFirst(2) { _ = try reply.get() }
        if write.likelyNew {
            // HSETNX's 1 (inserted) and HLEN's count; a 0: the record was there, merge into it.
            if recordReply == .integer(1), case .integer(let count) = try replies[2].get() {
                recordReply = .array([.integer(1), .integer(count)])
            } else if recordReply == .integer(0) {
                recordReply = try await store.evaluate(Self.recordScript, keys: recordKeys, arguments: recordArguments(), on: loop)
            }
        }
        guard case .array(let counts) = recordReply, counts.count == 2, case .integer(let isNew) = counts[0],
              case .integer(let count) = counts[1] else { throw StoreError(.unexpectedReply, "unexpected inventory reply") }
        let previous = ownerReply.string.flatMap { $0 == write.contact.digest ? nil : ContactKeys(digest: $0) }
        return InventoryWriteResult(previousOwner: previous, isNew: isNew == 1, count: Int(count))
    }

    /// The names once each, in order (what the merge script makes of a new record's list).
    private static func unique(_ names: [String]) -> [String] {
        var seen = Set<String>()
        return names.filter { seen.insert($0).inserted }
    }

    package func sessionHolder(_ key: String, nowMillis: Int64, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        try await store.get(key, on: loop).flatMap { $0.utf8.count == 64 ? ContactKeys(digest: $0) : nil }
    }

    /// The shard's holder; for a token no write has touched since the shards came, the holder an
    /// earlier build kept under the token's own key.
    package func owner(of token: TokenKeys, app: AppInventoryKeys, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        if let digest = try await store.get(app.shard(of: token).holder(of: token), on: loop) { return ContactKeys(digest: digest) }
        return try await store.get(token.legacyOwner, on: loop).map(ContactKeys.init(digest:))
    }

    package func installation(_ token: TokenKeys, of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> StoredInstallation? {
        let reply = try await store.send(["HGET", contact.inventory, token.digest], on: loop)
        return reply.string.flatMap { StoredInstallation.decode($0, token: token) }
    }

    package func installations(of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> [StoredInstallation] {
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

    /// The record, then (when it went) the shard's holder, last-seen and index entries, the
    /// contact's place among the app's contacts when it was its last record, and what an earlier
    /// build kept (the token's own holder key, the app's whole last-seen index).
    package func remove(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, ifStill expected: String?, on loop: EventLoop?) async throws(StoreError) -> Bool {
        let reply = try await store.evaluate(Self.removeScript, keys: [contact.inventory], arguments: [token.digest] + (expected.map { [$0] } ?? []),
                                             on: loop)
        guard case .array(let parts) = reply, parts.count == 2, case .integer(1) = parts[0] else { return false }
        let member = Self.seenMember(contact, token)
        _ = try await store.evaluate(Self.shardFixScript, keys: Self.shardKeys(app.shard(of: token), token),
                                     arguments: [contact.digest, member, InventoryPosition(token: token, contact: contact).indexKey, "", "remove"],
                                     on: loop)
        if case .integer(0) = parts[1] { _ = try await store.send(["SREM", app.shard(of: contact).contacts, contact.digest], on: loop) }
        try await store.release(token.legacyOwner, owner: contact.digest, on: loop)
        _ = try await store.send(["ZREM", app.legacySeen, member], on: loop)
        return true
    }

    /// Each shard's oldest `limit / 64 + 4` before the cutoff, and the legacy index's oldest
    /// `limit`, merged oldest first: the oldest `limit` of the app unless one shard holds more
    /// than its share of them (the rest come in the next passes).
    package func seen(before cutoffMillis: Int64, app: AppInventoryKeys, limit: Int) async throws(StoreError) -> [(contact: ContactKeys, token: TokenKeys)] {
        let bound = "(" + String(cutoffMillis)
        let perShard = String(limit / 64 + 4)
        let commands = app.shards.map { ["ZRANGEBYSCORE", $0.seen, "-inf", bound, "WITHSCORES", "LIMIT", "0", perShard] }
            + [["ZRANGEBYSCORE", app.legacySeen, "-inf", bound, "WITHSCORES", "LIMIT", "0", String(limit)]]
        var found: [(score: Double, member: String)] = []
        for reply in try await store.sendConcurrently(commands) {
            guard case .array(let items) = reply else { throw StoreError(.unexpectedReply, "unexpected ZRANGEBYSCORE reply") }
            var index = 0
            while index + 1 < items.count {
                if let member = items[index].string, let score = items[index + 1].string.flatMap(Double.init) {
                    found.append((score, member))
                }
                index += 2
            }
        }
        return found.sorted { ($0.score, $0.member) < ($1.score, $1.member) }
            .prefix(limit)
            .compactMap { Self.parseSeenMember($0.member) }
    }

    /// The installation's record is gone: its last-seen and index entries go, the counts with them.
    package func forgetSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys) async throws(StoreError) {
        let member = Self.seenMember(contact, token)
        _ = try await store.evaluate(Self.shardFixScript, keys: Self.shardKeys(app.shard(of: token), token),
                                     arguments: ["", member, InventoryPosition(token: token, contact: contact).indexKey, "", "remove"], on: nil)
        _ = try await store.send(["ZREM", app.legacySeen, member], on: nil)
    }

    package func indexSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, at millis: Int64,
                           upstreams: [String]) async throws(StoreError) {
        let member = Self.seenMember(contact, token)
        _ = try await store.send(["ZADD", app.shard(of: token).seen, String(millis), member], on: nil)
        // An entry an earlier build indexed only app-wide is new to its shard's index: counted now.
        _ = try await store.evaluate(Self.shardWriteScript, keys: Self.shardKeys(app.shard(of: token), token),
                                     arguments: ["", "", member, InventoryPosition(token: token, contact: contact).indexKey] + upstreams, on: nil)
        _ = try await store.send(["ZREM", app.legacySeen, member], on: nil)
    }

    package func releaseLease(_ key: String, owner: String) async throws(StoreError) {
        try await store.release(key, owner: owner, on: nil)
    }

    package func lease(_ key: String, owner: String, ttlMillis: Int) async throws(StoreError) -> Bool {
        let reply = try await store.evaluate(Self.leaseScript, keys: [key], arguments: [owner, String(max(ttlMillis, 1))], on: nil)
        return reply == .integer(1)
    }
}
