import PWCore
import RedisClient
import Registration

/// The counts and the export walk in Redis. Each shard of an app keeps, under its own hash tag,
/// an index of its installations (`InventoryShardKeys.index`, every score 0, so ordered by member)
/// and their counts (`counts`), both changed only by the two scripts here, in the same step: the
/// counts always agree with the index. The index agrees with the records (in the contacts' tags,
/// which a script of the shard cannot reach) as long as the batch that writes both arrives whole;
/// `reconcile` mends the rest.
extension RedisInventoryStore {
    /// KEYS: the token's holder, the shard's last-seen set, index and counts. ARGV[1] the contact to
    /// make the holder ('' leaves the holder alone), ARGV[2] last seen (ms; '' leaves it alone),
    /// ARGV[3] the last-seen member, ARGV[4] the index key (`<token>:<contact>:`), ARGV[5...] the
    /// upstreams that hold the installation now, merged with those its entry names. Answers the
    /// holder before (nil when none or left alone).
    static let shardWriteScript = LuaScript("""
        local previous = false
        if ARGV[1] ~= '' then previous = redis.call('SET', KEYS[1], ARGV[1], 'GET') end
        if ARGV[2] ~= '' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3]) end
        local key = ARGV[4]
        local found = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. key, '(' .. string.sub(key, 1, -2) .. ';', 'LIMIT', 0, 1)
        local old = found[1]
        local have, merged, added = {}, {}, {}
        if old then
          for name in string.gmatch(string.sub(old, #key + 1), '[^,]+') do
            if not have[name] then have[name] = true; merged[#merged + 1] = name end
          end
        end
        for i = 5, #ARGV do
          local name = ARGV[i]
          if not have[name] then have[name] = true; merged[#merged + 1] = name; added[#added + 1] = name end
        end
        if old and #added == 0 then return previous end
        if old then redis.call('ZREM', KEYS[3], old) else redis.call('HINCRBY', KEYS[4], 'i', 1) end
        redis.call('ZADD', KEYS[3], 0, key .. table.concat(merged, ','))
        for _, name in ipairs(added) do redis.call('HINCRBY', KEYS[4], 'u:' .. name, 1) end
        return previous
        """)

    /// KEYS as `shardWriteScript`'s. ARGV[2] the last-seen member, ARGV[3] the index key, ARGV[4]
    /// the guard ('' none; '-' the last-seen set must still lack the member; a number: its score
    /// must still be that, so a registration since wins), ARGV[5] `remove` or `set`. `remove`
    /// drops the installation's last-seen and index entries, and its holder while that is the
    /// contact in ARGV[1] ('' none). `set` makes the index entry name exactly ARGV[6...] and, with
    /// a time in ARGV[1], adds the last-seen entry if it lacks one. Answers 1 when it changed the
    /// index.
    static let shardFixScript = LuaScript("""
        local guard = ARGV[4]
        if guard ~= '' then
          local score = redis.call('ZSCORE', KEYS[2], ARGV[2])
          if guard == '-' then
            if score then return 0 end
          elseif not score or tonumber(score) ~= tonumber(guard) then return 0 end
        end
        local key = ARGV[3]
        local found = redis.call('ZRANGEBYLEX', KEYS[3], '[' .. key, '(' .. string.sub(key, 1, -2) .. ';')
        local wanted = key .. table.concat(ARGV, ',', 6)
        if ARGV[5] == 'remove' then
          if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
          redis.call('ZREM', KEYS[2], ARGV[2])
        else
          if ARGV[1] ~= '' then redis.call('ZADD', KEYS[2], 'NX', ARGV[1], ARGV[2]) end
          if #found == 1 and found[1] == wanted then return 0 end
        end
        local changed = 0
        for _, member in ipairs(found) do
          redis.call('ZREM', KEYS[3], member)
          redis.call('HINCRBY', KEYS[4], 'i', -1)
          for name in string.gmatch(string.sub(member, #key + 1), '[^,]+') do redis.call('HINCRBY', KEYS[4], 'u:' .. name, -1) end
          changed = 1
        end
        if ARGV[5] ~= 'remove' then
          redis.call('ZADD', KEYS[3], 0, wanted)
          redis.call('HINCRBY', KEYS[4], 'i', 1)
          for i = 6, #ARGV do redis.call('HINCRBY', KEYS[4], 'u:' .. ARGV[i], 1) end
          changed = 1
        end
        return changed
        """)

    /// KEYS[1] a shard's index, KEYS[2] its counts; ARGV[1] the largest index counted here. Counts
    /// the index in one step and rewrites the counts when they differ (answers 1), or answers -1
    /// for an index too large to count without holding Redis up (its counts are trusted: the two
    /// scripts above keep them with the index).
    static let recountScript = LuaScript("""
        local size = redis.call('ZCARD', KEYS[1])
        if size > tonumber(ARGV[1]) then return -1 end
        local counts = {i = size}
        for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
          for name in string.gmatch(string.sub(member, 131), '[^,]+') do
            local field = 'u:' .. name
            counts[field] = (counts[field] or 0) + 1
          end
        end
        local current = redis.call('HGETALL', KEYS[2])
        local old, changed = {}, 0
        for i = 1, #current, 2 do old[current[i]] = tonumber(current[i + 1]) end
        for field, value in pairs(counts) do if old[field] ~= value then changed = 1 end end
        for field, value in pairs(old) do if counts[field] == nil and value ~= 0 then changed = 1 end end
        if changed == 0 then return 0 end
        redis.call('DEL', KEYS[2])
        for field, value in pairs(counts) do redis.call('HSET', KEYS[2], field, value) end
        return 1
        """)

    /// Shards with more installations than this are not recounted (about 5 million for an app).
    static let recountLimit = 20_000

    /// The four keys of a token's shard the scripts take, in their order.
    static func shardKeys(_ shard: InventoryShardKeys, _ token: TokenKeys) -> [String] {
        [shard.holder(of: token), shard.seen, shard.index, shard.counts]
    }

    // MARK: Counts

    /// Each shard's counts and contact count: 512 small reads, pipelined through the pool.
    package func counts(app: AppInventoryKeys) async throws(StoreError) -> InventoryCounts {
        let commands = app.shards.map { ["HGETALL", $0.counts] } + app.shards.map { ["SCARD", $0.contacts] }
        let replies = try await store.sendConcurrently(commands)
        var counts = InventoryCounts()
        for reply in replies.prefix(app.shards.count) {
            guard case .array(let items) = reply else { throw StoreError(.unexpectedReply, "unexpected HGETALL reply") }
            var index = 0
            while index + 1 < items.count {
                if let field = items[index].string, let value = items[index + 1].string.flatMap({ Int($0) }) {
                    if field == "i" {
                        counts.installations += value
                    } else if field.hasPrefix("u:") {
                        counts.upstreams[String(field.dropFirst(2)), default: 0] += value
                    }
                }
                index += 2
            }
        }
        for reply in replies.dropFirst(app.shards.count) {
            guard case .integer(let members) = reply else { throw StoreError(.unexpectedReply, "unexpected SCARD reply") }
            counts.contacts += Int(members)
        }
        // A count below zero is drift the next reconcile mends; it is never shown.
        counts.installations = max(0, counts.installations)
        counts.upstreams = counts.upstreams.mapValues { max(0, $0) }
        return counts
    }

    // MARK: The walk

    /// Shard after shard from the position's, each read by `ZRANGEBYLEX` after the position's key;
    /// shards that come back short are followed by the next ones, several at a time (more the
    /// smaller the page), so an empty app is walked in a few round trips.
    package func page(app: AppInventoryKeys, after position: InventoryPosition?, limit: Int) async throws(StoreError) -> InventoryPage {
        let limit = max(1, limit)
        var shard = position?.token.shard ?? 0
        // Past every member of the position's key (`<token>:<contact>:...` < `<token>:<contact>;`).
        var lower = position.map { "(" + String($0.indexKey.dropLast()) + ";" } ?? "-"
        var entries: [InventoryPosition] = []
        while shard < AppInventoryKeys.shardCount {
            let remaining = limit - entries.count
            let width = max(1, min(32, 4096 / remaining, AppInventoryKeys.shardCount - shard))
            let commands = (shard..<(shard + width)).enumerated().map { offset, index in
                ["ZRANGEBYLEX", app.shards[index].index, offset == 0 ? lower : "-", "+", "LIMIT", "0", String(remaining)]
            }
            let replies = try await store.sendConcurrently(commands)
            for (offset, reply) in replies.enumerated() {
                guard case .array(let members) = reply else { throw StoreError(.unexpectedReply, "unexpected ZRANGEBYLEX reply") }
                for member in members {
                    // A member another writer put there is skipped, not shown.
                    guard let text = member.string, let (entry, _) = InventoryPosition.parse(indexMember: text),
                          entry.token.shard == shard + offset else { continue }
                    entries.append(entry)
                    if entries.count == limit { return InventoryPage(entries: entries, more: true) }
                }
            }
            shard += width
            lower = "-"
        }
        return InventoryPage(entries: entries, more: false)
    }

    // MARK: Reconciling

    /// One shard: every installation its index or its last-seen set names is looked up in its
    /// contact's record. A record the index lacks, or names other upstreams than its entry, gets
    /// its entry (and counts) set from the record; an entry with no record goes. Each change is
    /// guarded by the installation's last-seen time, so a registration that came meanwhile wins
    /// and is left for the next pass. Then the counts are checked against the index (up to
    /// `recountLimit` entries), and the shard's contacts: one with no record left goes.
    package func reconcile(shard index: Int, app: AppInventoryKeys) async throws(StoreError) -> Int {
        guard app.shards.indices.contains(index) else { return 0 }
        let shard = app.shards[index]
        struct Candidate {
            var position: InventoryPosition
            var upstreams: [String]?
            var seenScore: String?
        }
        var candidates: [String: Candidate] = [:]
        var lower = "-"
        while true {
            guard case .array(let members) = try await store.send(["ZRANGEBYLEX", shard.index, lower, "+", "LIMIT", "0", "1000"], on: nil) else {
                throw StoreError(.unexpectedReply, "unexpected ZRANGEBYLEX reply")
            }
            for member in members.compactMap(\.string) {
                guard let (position, upstreams) = InventoryPosition.parse(indexMember: member) else { continue }
                candidates[position.indexKey] = Candidate(position: position, upstreams: upstreams)
            }
            guard members.count == 1000, let last = members.last?.string else { break }
            lower = "(" + last
        }
        var start = 0
        while true {
            guard case .array(let items) = try await store.send(["ZRANGE", shard.seen, String(start), String(start + 999), "WITHSCORES"], on: nil) else {
                throw StoreError(.unexpectedReply, "unexpected ZRANGE reply")
            }
            var item = 0
            while item + 1 < items.count {
                if let member = items[item].string, let score = items[item + 1].string, let (contact, token) = Self.parseSeenMember(member),
                   token.shard == index {
                    let position = InventoryPosition(token: token, contact: contact)
                    candidates[position.indexKey, default: Candidate(position: position)].seenScore = score
                }
                item += 2
            }
            guard items.count == 2000 else { break }
            start += 1000
        }
        let list = Array(candidates.values)
        let records = try await store.sendConcurrently(list.map { ["HGET", $0.position.contact.inventory, $0.position.token.digest] })
        var fixes: [(keys: [String], arguments: [String])] = []
        var contacts: Set<String> = []
        for (candidate, reply) in zip(list, records) {
            let position = candidate.position
            let arguments = [Self.seenMember(position.contact, position.token), position.indexKey, candidate.seenScore ?? "-"]
            let keys = Self.shardKeys(shard, position.token)
            if let raw = reply.string, let record = StoredInstallation.decode(raw, token: position.token) {
                contacts.insert(position.contact.digest)
                if candidate.upstreams != record.upstreams || candidate.seenScore == nil {
                    fixes.append((keys, [String(record.lastSeenMillis)] + arguments + ["set"] + record.upstreams))
                }
            } else if reply == .null {
                fixes.append((keys, [""] + arguments + ["remove"]))
            }
        }
        var mended = 0
        let results = await mapConcurrently(fixes, width: 32) { [store] fix in
            await capture { () async throws(StoreError) in
                try await store.evaluate(Self.shardFixScript, keys: fix.keys, arguments: fix.arguments, on: nil)
            }
        }
        for result in results where try result.get() == .integer(1) { mended += 1 }
        if !contacts.isEmpty {
            _ = try await store.sendConcurrently(contacts.map { ["SADD", app.shard(of: ContactKeys(digest: $0)).contacts, $0] })
        }
        let recounted = try await store.evaluate(Self.recountScript, keys: [shard.index, shard.counts], arguments: [String(Self.recountLimit)],
                                                 on: nil)
        if recounted == .integer(1) { mended += 1 }
        return mended + (try await reconcileContacts(shard))
    }

    /// The shard's contacts whose inventory is empty leave its set. One that registers meanwhile
    /// is added back by its next write, or by the next pass over the shard its tokens are in.
    private func reconcileContacts(_ shard: InventoryShardKeys) async throws(StoreError) -> Int {
        var cursor = "0"
        var removed = 0
        repeat {
            guard case .array(let parts) = try await store.send(["SSCAN", shard.contacts, cursor, "COUNT", "1000"], on: nil), parts.count == 2,
                  let next = parts[0].string, case .array(let members) = parts[1] else {
                throw StoreError(.unexpectedReply, "unexpected SSCAN reply")
            }
            cursor = next
            let digests = members.compactMap(\.string)
            let exists = try await store.sendConcurrently(digests.map { ["EXISTS", ContactKeys(digest: $0).inventory] })
            let gone = zip(digests, exists).filter { $0.1 == .integer(0) }.map(\.0)
            if !gone.isEmpty {
                _ = try await store.send(["SREM", shard.contacts] + gone, on: nil)
                removed += gone.count
            }
        } while cursor != "0"
        return removed
    }
}
