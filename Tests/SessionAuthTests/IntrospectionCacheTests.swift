import PWCore
import Synchronization
import Testing
@testable import SessionAuth

/// The introspection cache's rules without a network: what is kept and how long, the bound and
/// what it evicts, one leader per token; and how an endpoint's reply is judged.
@Suite struct IntrospectionCacheTests {
    final class Clock: WallClock, Sendable {
        let time = Mutex<Double>(1_700_000_000)
        func now() -> Double { time.withLock { $0 } }
        func advance(_ seconds: Double) { time.withLock { $0 += seconds } }
    }

    static func active(_ contact: String, exp: Double? = nil) -> IntrospectionAnswer {
        .active(Session(contactID: contact, expiresAt: exp))
    }

    /// Looks `token` up the way the sidecar does on a miss: lead, settle with `answer`.
    static func store(_ cache: IntrospectionCache, _ token: String, _ answer: IntrospectionAnswer) {
        let key = IntrospectionCache.Key(token: token)
        guard case .lead = cache.join(key, { _ in }) else { Issue.record("\(token): not the leader"); return }
        #expect(cache.settle(key, answer).count == 1)
    }

    @Test func boundedAndEvictsTheOldestAnswer() {
        let cache = IntrospectionCache(ttlSeconds: 60, capacity: 3, clock: Clock())
        for n in 0..<4 { Self.store(cache, "t\(n)", Self.active("c\(n)")) }
        #expect(cache.count == 3)
        #expect(cache.cached(IntrospectionCache.Key(token: "t0")) == nil, "the oldest answer went first")
        for n in 1..<4 { #expect(cache.cached(IntrospectionCache.Key(token: "t\(n)")) == Self.active("c\(n)")) }
        // Many more answers than the bound: never more than the bound kept.
        for n in 4..<5_000 { Self.store(cache, "t\(n)", Self.active("c\(n)")) }
        #expect(cache.count == 3)
        #expect(cache.cached(IntrospectionCache.Key(token: "t4999")) == Self.active("c4999"))
    }

    @Test func activeForTTLButNeverPastExpRefusalsFiveSecondsUnavailableNever() {
        let clock = Clock()
        let cache = IntrospectionCache(ttlSeconds: 60, clock: clock)
        Self.store(cache, "ttl", Self.active("a"))
        Self.store(cache, "exp", Self.active("b", exp: clock.now() + 10))
        Self.store(cache, "refused", .refused(AuthFailure("token is not active")))
        Self.store(cache, "down", .unavailable("introspection endpoint answered 503"))
        func cached(_ token: String) -> Bool { cache.cached(IntrospectionCache.Key(token: token)) != nil }
        #expect(cached("ttl") && cached("exp") && cached("refused") && !cached("down"))
        clock.advance(5)
        #expect(cached("ttl") && cached("exp") && !cached("refused"))
        clock.advance(5)
        #expect(cached("ttl") && !cached("exp"))
        clock.advance(50)
        #expect(!cached("ttl"))
    }

    @Test func oneLeaderPerTokenAndEveryWaiterToldOnce() {
        let cache = IntrospectionCache(ttlSeconds: 60, clock: Clock())
        let key = IntrospectionCache.Key(token: "t")
        let told = Mutex(0)
        guard case .lead = cache.join(key, { _ in told.withLock { $0 += 1 } }) else { Issue.record("no leader"); return }
        for _ in 0..<9 {
            guard case .waiting = cache.join(key, { _ in told.withLock { $0 += 1 } }) else { Issue.record("a second leader"); return }
        }
        for waiter in cache.settle(key, Self.active("a")) { waiter(Self.active("a")) }
        #expect(told.withLock { $0 } == 10)
        guard case .answered(Self.active("a")) = cache.join(key, { _ in }) else { Issue.record("not cached"); return }
    }

    @Test func keyIsTheTokensDigest() {
        #expect(IntrospectionCache.Key(token: "a") == IntrospectionCache.Key(token: "a"))
        #expect(IntrospectionCache.Key(token: "a") != IntrospectionCache.Key(token: "b"))
    }

    static let now = 1_700_000_000.0

    @Test(arguments: [
        (200, #"{"active":true,"uid":"alice","sub":"s"}"#, .active(Session(contactID: "alice", subject: "s"))),
        (200, #"{"active":true,"uid":12345,"exp":1700000100}"#, active("12345", exp: 1_700_000_100)),
        (200, #"{"active":false,"uid":"alice"}"#, .refused(AuthFailure("token is not active"))),
        (200, #"{"uid":"alice"}"#, .refused(AuthFailure("introspection answer has no boolean active"))),
        (200, #"{"active":"true","uid":"alice"}"#, .refused(AuthFailure("introspection answer has no boolean active"))),
        (200, #"{"active":true}"#, .refused(AuthFailure("answer has no uid"))),
        (200, #"{"active":true,"uid":""}"#, .refused(AuthFailure("contact field uid is empty"))),
        (200, #"{"active":true,"uid":1.5}"#, .refused(AuthFailure("contact field uid is a number that is not an integer within 64 bits (" + SessionVerifier.echo("1.5") + ")",
                                                     kind: "contact field uid is a number that is not an integer within 64 bits"))),
        (200, #"{"active":true,"uid":false}"#, .refused(AuthFailure("contact field uid is a boolean, not a string or an integer"))),
        (200, #"{"active":true,"uid":"alice","exp":1699999999}"#, .refused(AuthFailure("expired (exp)"))),
        (200, #"{"active":true,"uid":"alice","exp":"soon"}"#, .refused(AuthFailure("exp is not a number"))),
        (200, "<html>", .unavailable("introspection answer is not a JSON object")),
        (401, "", .refused(AuthFailure("introspection endpoint answered 401"))),
        (404, "", .refused(AuthFailure("introspection endpoint answered 404"))),
        (500, "", .unavailable("introspection endpoint answered 500")),
        (302, "", .unavailable("introspection endpoint answered 302, not 200")),
    ] as [(Int, String, IntrospectionAnswer)])
    func judgesTheReply(_ status: Int, _ body: String, _ expected: IntrospectionAnswer) {
        #expect(IntrospectionAnswer.judge(status: status, body: Array(body.utf8), contactField: "uid", now: Self.now) == expected)
    }
}
