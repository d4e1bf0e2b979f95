import PWCore
import PWCrypto
import Synchronization

/// What one call to an app's introspection endpoint (RFC 7662) decided about a token.
public enum IntrospectionAnswer: Sendable, Equatable {
    /// `active: true` with a usable contact; the session's `expiresAt` is the answer's `exp`.
    case active(Session)
    /// `active: false`, no usable contact, an `exp` already past, or a 4xx.
    case refused(AuthFailure)
    /// Nothing to go by: no answer (down, timeout), a 5xx, or a reply that is no introspection
    /// answer. Never cached. `reason` is for the log.
    case unavailable(String)

    /// Judges the endpoint's reply (RFC 7662, section 2.2). `now` is the wall-clock time `exp`
    /// is judged against.
    ///
    /// Where RFC 7662 and the contract are silent: a `200` whose body is not a JSON object, or any
    /// status other than 200, 4xx and 5xx (a redirect, which is never followed), is `unavailable`
    /// (the endpoint's fault, not the client's); a JSON object without a boolean `active`, or with
    /// an `exp` that is not a number, is `refused`.
    public static func judge(status: Int, body: [UInt8], contactField: String, now: Double) -> IntrospectionAnswer {
        switch status {
        case 200:
            break
        case 400..<500:
            return .refused(AuthFailure("introspection endpoint answered \(status)"))
        case 500..<600:
            return .unavailable("introspection endpoint answered \(status)")
        default:
            return .unavailable("introspection endpoint answered \(status), not 200")
        }
        guard let answer = (try? JSONValue.parse(body))?.objectValue else {
            return .unavailable("introspection answer is not a JSON object")
        }
        switch answer["active"] {
        case .bool(true)?: break
        case .bool(false)?: return .refused(AuthFailure("token is not active"))
        default: return .refused(AuthFailure("introspection answer has no boolean active"))
        }
        var expiresAt: Double?
        switch answer["exp"] {
        case nil, .null?:
            break
        case .number(let text)?:
            guard let exp = Double(text), exp.isFinite else { return .refused(AuthFailure("exp is not a number")) }
            guard now < exp else { return .refused(AuthFailure("expired (exp)")) }
            expiresAt = exp
        default:
            return .refused(AuthFailure("exp is not a number"))
        }
        guard let value = answer[contactField] else { return .refused(AuthFailure("answer has no \(contactField)")) }
        switch SessionVerifier.contactID(value, named: "contact field \(contactField)") {
        case .success(let contact):
            return .active(Session(contactID: contact, subject: answer["sub"]?.stringValue, expiresAt: expiresAt))
        case .failure(let failure):
            return .refused(failure)
        }
    }
}

/// The answers of one app's introspection endpoint, by a hash of the token, and the calls in
/// flight, so that concurrent lookups of one token make one call.
///
/// - An active answer is kept for the app's `cache_ttl`, never past its `exp`; a refusal for
///   `refusalSeconds`; an unavailable answer not at all.
/// - At most `capacity` answers are kept. A new one beyond that evicts the oldest answer (in the
///   order they arrived: with one TTL per app, also the one that expires first); an expired
///   answer is dropped when a lookup meets it.
/// - Keys are SHA-256 digests of the token: the token itself is never kept.
///
/// - Important: thread-safe (one lock); waiters are called by whoever settles the call, outside
///   the lock, and must hop to their own thread themselves.
public final class IntrospectionCache: Sendable {
    /// How long a refusal is kept (docs/configuration.md, sessions).
    public static let refusalSeconds = 5.0
    /// Answers kept per app unless told otherwise.
    public static let defaultCapacity = 20_000

    /// A token's SHA-256.
    public struct Key: Hashable, Sendable {
        let words: (UInt64, UInt64, UInt64, UInt64)

        public init(token: String) {
            let digest = SHA256.hash(Array(token.utf8))
            func word(_ at: Int) -> UInt64 { digest[at..<(at + 8)].reduce(0) { $0 << 8 | UInt64($1) } }
            words = (word(0), word(8), word(16), word(24))
        }

        public static func == (a: Key, b: Key) -> Bool {
            a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
        }

        public func hash(into hasher: inout Hasher) {
            // Already a uniform digest: one word is as good as all four for a bucket.
            hasher.combine(words.0)
        }
    }

    public typealias Waiter = @Sendable (IntrospectionAnswer) -> Void

    /// What `join` found.
    public enum Join: Sendable {
        /// A cached answer; the waiter was not kept.
        case answered(IntrospectionAnswer)
        /// A call for this token is under way; the waiter is called when it settles.
        case waiting
        /// No call was under way: the caller makes it and then calls `settle`; the waiter is kept.
        case lead
    }

    private struct Entry {
        let answer: IntrospectionAnswer
        let until: Double
        let sequence: UInt64
    }

    private struct State {
        var entries: [Key: Entry] = [:]
        /// Keys in arrival order, with the sequence of the entry each was stored with; an item
        /// whose entry was replaced or dropped since is skipped (and compacted away).
        var order: [(key: Key, sequence: UInt64)] = []
        var head = 0
        var sequence: UInt64 = 0
        var pending: [Key: [Waiter]] = [:]

        mutating func answer(_ key: Key, now: Double) -> IntrospectionAnswer? {
            guard let entry = entries[key] else { return nil }
            guard now < entry.until else {
                entries[key] = nil
                return nil
            }
            return entry.answer
        }
    }

    public let capacity: Int
    private let ttl: Double
    private let clock: any WallClock
    private let state = Mutex(State())

    /// - Parameters:
    ///   - ttlSeconds: the app's `cache_ttl` (0: active answers are not kept).
    ///   - capacity: answers kept at most (at least 1).
    ///   - clock: the time answers expire by, and `exp` is judged against.
    public init(ttlSeconds: Int, capacity: Int = IntrospectionCache.defaultCapacity, clock: any WallClock = SystemClock()) {
        self.ttl = Double(max(0, ttlSeconds))
        self.capacity = max(1, capacity)
        self.clock = clock
    }

    /// The time by the cache's clock.
    public func now() -> Double { clock.now() }

    /// The cached answer for `key`, if one is in force: the hot path, one lock and no allocation.
    public func cached(_ key: Key) -> IntrospectionAnswer? {
        let now = clock.now()
        return state.withLock { $0.answer(key, now: now) }
    }

    /// The cached answer, or a place among the waiters of the call for `key`.
    public func join(_ key: Key, _ waiter: @escaping Waiter) -> Join {
        let now = clock.now()
        return state.withLock { state in
            if let answer = state.answer(key, now: now) { return .answered(answer) }
            if state.pending[key] != nil {
                state.pending[key]?.append(waiter)
                return .waiting
            }
            state.pending[key] = [waiter]
            return .lead
        }
    }

    /// Ends the call for `key` with `answer`: keeps it as the rules say and returns every waiter,
    /// the leader's first, for the caller to call with `answer`.
    public func settle(_ key: Key, _ answer: IntrospectionAnswer) -> [Waiter] {
        let now = clock.now()
        var until: Double?
        switch answer {
        case .active(let session):
            until = min(now + ttl, session.expiresAt ?? .infinity)
        case .refused:
            until = now + Self.refusalSeconds
        case .unavailable:
            until = nil
        }
        let capacity = self.capacity
        return state.withLock { state in
            let waiters = state.pending.removeValue(forKey: key) ?? []
            guard let until, until > now else { return waiters }
            if state.entries[key] == nil, state.entries.count >= capacity { Self.evictOldest(&state) }
            state.sequence += 1
            state.entries[key] = Entry(answer: answer, until: until, sequence: state.sequence)
            state.order.append((key, state.sequence))
            // Replaced and dropped entries leave stale items behind: keep the list near the live count.
            if state.order.count - state.head > 2 * state.entries.count + 64 { Self.compact(&state) }
            return waiters
        }
    }

    /// Answers kept now (expired ones not yet met included).
    public var count: Int { state.withLock { $0.entries.count } }

    private static func evictOldest(_ state: inout State) {
        while state.head < state.order.count {
            let item = state.order[state.head]
            state.head += 1
            if state.entries[item.key]?.sequence == item.sequence {
                state.entries[item.key] = nil
                break
            }
        }
        if state.head > 1024, state.head * 2 > state.order.count { compact(&state) }
    }

    private static func compact(_ state: inout State) {
        let live = state.order[state.head...].filter { state.entries[$0.key]?.sequence == $0.sequence }
        state.order = Array(live)
        state.head = 0
    }
}
