import Loops
import PWCore
import RedisClient
import Registration

/// The dead-token guard in Redis: every replica counts an app's removals in the same per-minute
/// counters and sees the same held reports. An app's keys share one hash tag, so the script that
/// decides and counts runs on one node of a cluster.
package final class RedisDeadTokenStore: DeadTokenStore {
    let store: RedisStore

    package init(store: RedisStore) { self.store = store }

    /// KEYS: the current minute's counter, the previous minute's, the held reports; ARGV: the
    /// removals asked for, the limit, the share of the previous minute still in the last 60 s
    /// (per million). Admits none while reports are held; counts what it admits; answers it.
    private static let admitScript = LuaScript("""
        if redis.call('HLEN', KEYS[3]) > 0 then return 0 end
        local current = tonumber(redis.call('GET', KEYS[1]) or '0')
        local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
        local used = current + math.ceil(previous * tonumber(ARGV[3]) / 1000000)
        local admitted = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used)
        if admitted <= 0 then return 0 end
        redis.call('INCRBY', KEYS[1], admitted)
        redis.call('PEXPIRE', KEYS[1], 180000)
        return admitted
        """)

    /// KEYS[1] the held reports; ARGV[1] the field, ARGV[2] the record that must still be there.
    private static let unholdScript = LuaScript("""
        if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
        redis.call('HDEL', KEYS[1], ARGV[1])
        return 1
        """)

    package func admit(_ count: Int, limit: Int, app: DeadTokenKeys, nowMillis: Int64) async throws(StoreError) -> Int {
        guard count > 0 else { return 0 }
        let minute = nowMillis / 60_000
        let elapsed = nowMillis - minute * 60_000
        let remaining = (60_000 - elapsed) * 1_000_000 / 60_000
        let reply = try await store.evaluate(Self.admitScript, keys: [app.window(minute), app.window(minute - 1), app.held],
                                             arguments: [String(count), String(limit), String(remaining)], on: nil)
        guard case .integer(let admitted) = reply, admitted >= 0 else { throw StoreError(.unexpectedReply, "unexpected dead-token admit reply") }
        return Int(min(Int64(count), admitted))
    }

    /// The sizes of the app's last-seen shards (and of the index of builds before the shards):
    /// a `ZCARD` each, which the caller asks for at most once a minute.
    package func installationCount(app: AppInventoryKeys) async throws(StoreError) -> Int {
        let replies = try await store.sendConcurrently(app.shards.map { ["ZCARD", $0.seen] } + [["ZCARD", app.legacySeen]])
        var total = 0
        for reply in replies {
            guard case .integer(let count) = reply, count >= 0 else { throw StoreError(.unexpectedReply, "unexpected ZCARD reply") }
            // Sizes come from a store others can write: a sum past Int's range is taken as its end.
            let (sum, overflow) = total.addingReportingOverflow(Int(count))
            total = overflow ? Int.max : sum
        }
        return total
    }

    package func hold(_ reports: [HeldReport], app: DeadTokenKeys) async throws(StoreError) {
        // Commands of a bounded size, so no one command holds Redis long.
        var start = 0
        while start < reports.count {
            let chunk = reports[start..<min(reports.count, start + 200)]
            _ = try await store.send(["HSET", app.held] + chunk.flatMap { [$0.field, $0.record] }, on: nil)
            start += chunk.count
        }
    }

    package func held(app: DeadTokenKeys, cursor: String, limit: Int) async throws(StoreError) -> (next: String, reports: [HeldReport]) {
        let reply = try await store.send(["HSCAN", app.held, cursor, "COUNT", String(max(1, limit))], on: nil)
        guard case .array(let parts) = reply, parts.count == 2, let next = parts[0].string, case .array(let items) = parts[1] else {
            throw StoreError(.unexpectedReply, "unexpected HSCAN reply")
        }
        var reports: [HeldReport] = []
        var index = 0
        while index + 1 < items.count {
            if let field = items[index].string, let record = items[index + 1].string { reports.append(HeldReport(field: field, record: record)) }
            index += 2
        }
        return (next, reports)
    }

    package func heldCount(app: DeadTokenKeys) async throws(StoreError) -> Int {
        guard case .integer(let count) = try await store.send(["HLEN", app.held], on: nil), count >= 0 else {
            throw StoreError(.unexpectedReply, "unexpected HLEN reply")
        }
        return Int(count)
    }

    package func unhold(_ field: String, ifStill record: String, app: DeadTokenKeys) async throws(StoreError) -> Bool {
        try await store.evaluate(Self.unholdScript, keys: [app.held], arguments: [field, record], on: nil) == .integer(1)
    }
}
