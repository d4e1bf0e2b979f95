import PWCrypto
import Synchronization

/// The sessions a verifier accepted, so that a token sent again (a client that registers,
/// reports events and unregisters with one session) is not verified again.
///
/// What makes it safe:
/// - The key is the SHA-256 of the whole token: only the very bytes that were verified find the
///   entry; a token that differs anywhere (another signature, claim or header) is verified whole.
/// - Only accepted sessions go in, so a refused token is refused again, however often it comes.
/// - An entry is used only while the clock is before the token's `exp` (without the leeway the
///   full check allows: after `exp` the token is verified again, and not kept).
/// - It is emptied whenever the verifier's keys change (a `jwks_url` refresh), so a key taken
///   out of the JWKS stops accepting its tokens at once.
/// - At most `capacity` sessions: two generations of `capacity / 2`; when the newer fills, the
///   older is dropped whole, and a session found in the older moves to the newer. So a session
///   used again within about `capacity / 2` new ones stays (close to least-recently-used, with no
///   per-entry bookkeeping on the hot path). Capacity 0 keeps none.
///
/// Thread-safety: one lock around both generations; the work under it is one or two lookups.
final class VerifiedSessions: Sendable {
    private struct Generations {
        var current: [SHA256.Words: Session] = [:]
        var previous: [SHA256.Words: Session] = [:]
    }

    let capacity: Int
    private let generations = Mutex(Generations())

    init(capacity: Int) {
        self.capacity = capacity == 0 ? 0 : max(2, capacity)
    }

    /// The session verified for `key`, while it has not expired at `now`.
    func session(for key: SHA256.Words, now: Double) -> Session? {
        guard capacity > 0 else { return nil }
        let half = capacity / 2
        let found = generations.withLock { g -> Session? in
            if let session = g.current[key] { return session }
            guard let session = g.previous.removeValue(forKey: key) else { return nil }
            Self.insert(session, for: key, into: &g, half: half)
            return session
        }
        guard let found, let expiresAt = found.expiresAt, now < expiresAt else { return nil }
        return found
    }

    /// Keeps `session` (verified just now) for `key`, unless it is already expired.
    func keep(_ session: Session, for key: SHA256.Words, now: Double) {
        guard capacity > 0, let expiresAt = session.expiresAt, now < expiresAt else { return }
        let half = capacity / 2
        generations.withLock { Self.insert(session, for: key, into: &$0, half: half) }
    }

    private static func insert(_ session: Session, for key: SHA256.Words, into g: inout Generations, half: Int) {
        if g.current.count >= half {
            // The new generation grows as it fills: reserved whole, its table (~5 MiB at the
            // default) would be in RSS after a few thousand sessions, spread over every page.
            g.previous = g.current
            g.current = [:]
        }
        g.current[key] = session
    }

    func removeAll() {
        generations.withLock { $0 = Generations() }
    }

    /// How many sessions are kept (both generations). For tests.
    var count: Int { generations.withLock { $0.current.count + $0.previous.count } }
}
