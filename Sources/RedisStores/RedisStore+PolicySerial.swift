import PWCore
import Registration

extension RedisStore: PolicySerialRecord {
    /// `pw:v2:{policy}:serial`, a hash of `serial` and `sha256`: one per Redis, shared by every
    /// replica (and never expiring).
    static let policySerialKey = "pw:v2:{policy}:serial"

    /// KEYS[1] the record; ARGV[1] serial, ARGV[2] sha256. Returns 0 when admitted, else the
    /// record's `{serial, sha256}`. Serials stay below 2^53, exact as Lua numbers.
    private static let admitSerialScript = LuaScript("""
        local seen = redis.call('HMGET', KEYS[1], 'serial', 'sha256')
        if seen[1] then
          local held, new = tonumber(seen[1]), tonumber(ARGV[1])
          if held > new or (held == new and seen[2] ~= ARGV[2]) then return {seen[1], seen[2] or ''} end
          if held == new then return 0 end
        end
        redis.call('HSET', KEYS[1], 'serial', ARGV[1], 'sha256', ARGV[2])
        return 0
        """)

    package func admit(_ version: PolicyVersion) async throws(StoreError) -> PolicyVersion? {
        let reply = try await evaluate(Self.admitSerialScript, keys: [Self.policySerialKey],
                                       arguments: [String(version.serial), version.sha256], on: nil)
        if case .integer(0) = reply { return nil }
        guard case .array(let items) = reply, items.count == 2, let serialText = items[0].string, let serial = Int(serialText),
              let sha256 = items[1].string else {
            throw StoreError(.unexpectedReply, "unexpected reply to the policy serial script")
        }
        return PolicyVersion(serial: serial, sha256: sha256)
    }
}
