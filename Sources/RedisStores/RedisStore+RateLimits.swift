import Loops
import PWCore
import Registration

/// The per-contact limits every replica on this Redis shares: one script per admitted request,
/// one key per app, route and contact under the contact's hash tag, Redis's own clock.
extension RedisStore: SharedRateLimits {
    /// KEYS[1] the contact's state for the route: its theoretical arrival time (ms, as text).
    /// ARGV[1] requests, ARGV[2] period (ms). Returns 0 when admitted, else the milliseconds
    /// until a request would be.
    static let gcraScript = LuaScript("""
        local time = redis.call('TIME')
        local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
        local period = tonumber(ARGV[2])
        local interval = period / tonumber(ARGV[1])
        local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
        if tat < now then tat = now end
        local admitAt = tat + interval - period
        if now < admitAt then return math.ceil(admitAt - now) end
        tat = tat + interval
        redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now))
        return 0
        """)

    package func admit(_ key: String, requests: Int, periodMillis: UInt64, on loop: EventLoop,
                       completion: @escaping (Result<Int64, StoreError>) -> Void) {
        evaluate(Self.gcraScript, keys: [key], arguments: [String(requests), String(periodMillis)], on: loop) { result in
            switch result {
            case .success(.integer(let wait)): completion(.success(wait))
            case .success: completion(.failure(StoreError(.unexpectedReply, "unexpected reply")))
            case .failure(let error): completion(.failure(error))
            }
        }
    }
}
