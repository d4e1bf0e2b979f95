import PWCrypto
import Synchronization

/// The sessions a verifier accepted, so that a token sent again (a client that registers,
/// reports events and unregisters with one session) is not verified again.
///
/// What makes it safe:
/// - The key is the SHA-256 of the whole token (its first 128 bits): only the very bytes that were
///   verified find the entry; a token that differs anywhere (another signature, claim or header)
///   is verified whole.
/// - Only accepted sessions go in, so a refused token is refused again, however often it comes.
/// - An entry is used only while the clock is before the token's `exp` (without the leeway the
///   full check allows: after `exp` the token is verified again, and not kept). A token whose
///   `exp` is not a whole number of seconds (or is past 2106) is verified every time.
/// - It is emptied whenever the verifier's keys change (a `jwks_url` refresh), so a key taken
///   out of the JWKS stops accepting its tokens at once.
/// - At most `capacity` sessions: two generations of `capacity / 2`; when the newer fills, the
///   older is dropped whole, and a session found in the older moves to the newer. So a session
///   used again within about `capacity / 2` new ones stays (close to least-recently-used, with no
///   per-entry bookkeeping on the hot path). Capacity 0 keeps none.
/// - Each entry is 56 bytes in its table: the first 128 bits of the token's digest (finding a
///   second token with the same 128 bits takes about 2^128 tries), the contact id, the subject
///   only where it is not the contact id, and `exp` in whole seconds. A generation's table grows
///   as it fills, so an app with few sessions holds little.
///
/// Thread-safety: one lock around both generations; the work under it is one or two lookups.
final class VerifiedSessions: Sendable {
    /// The first half of the token's SHA-256.
    struct Key: Hashable {
        let w0, w1: UInt64

        init(_ words: SHA256.Words) {
            w0 = words.w0
            w1 = words.w1
        }

        func hash(into hasher: inout Hasher) {
            // Already a uniform digest: one word spreads the buckets as well as both.
            hasher.combine(w0)
        }
    }

    /// A session as kept, in 40 bytes: the subject not repeated, `exp` in whole seconds.
    private struct Kept {
        enum Subject {
            case contactID
            case none
            case other(String)
            /// With a session id (`backchannel_logout`): boxed, so an entry without one stays small.
            case withSession(WithSession)
        }

        final class WithSession: Sendable {
            let subject: String?
            let sessionID: String

            init(subject: String?, sessionID: String) {
                self.subject = subject
                self.sessionID = sessionID
            }
        }

        let contactID: String
        let subject: Subject
        /// Whole seconds: a session whose `exp` is not one (a fraction, or past 2106) is not
        /// kept, so what is found is always the very session the verifier returned.
        let expiresAt: UInt32

        init?(_ session: Session) {
            guard let exp = session.expiresAt, exp >= 1, exp <= Double(UInt32.max), exp == exp.rounded(.down) else { return nil }
            contactID = session.contactID
            switch (session.subject, session.sessionID) {
            case (let value, let sessionID?): subject = .withSession(WithSession(subject: value, sessionID: sessionID))
            case (nil, nil): subject = .none
            case (let value?, nil) where value == session.contactID: subject = .contactID
            case (let value?, nil): subject = .other(value)
            }
            expiresAt = UInt32(exp)
        }

        var session: Session {
            let expiresAt = Double(self.expiresAt)
            switch subject {
            case .contactID: return Session(contactID: contactID, subject: contactID, expiresAt: expiresAt)
            case .none: return Session(contactID: contactID, subject: nil, expiresAt: expiresAt)
            case .other(let value): return Session(contactID: contactID, subject: value, expiresAt: expiresAt)
            case .withSession(let box): return Session(contactID: contactID, subject: box.subject, expiresAt: expiresAt, sessionID: box.sessionID)
            }
        }
    }

    private struct Generations {
        var current: [Key: Kept] = [:]
        var previous: [Key: Kept] = [:]
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
        let key = Key(key)
        let found = generations.withLock { g -> Kept? in
            if let kept = g.current[key] { return kept }
            guard let kept = g.previous.removeValue(forKey: key) else { return nil }
            Self.insert(kept, for: key, into: &g, half: half)
            return kept
        }
        guard let found, now < Double(found.expiresAt) else { return nil }
        return found.session
    }

    /// Keeps `session` (verified just now) for `key`, unless it is already expired.
    func keep(_ session: Session, for key: SHA256.Words, now: Double) {
        guard capacity > 0, let kept = Kept(session), now < Double(kept.expiresAt) else { return }
        let half = capacity / 2
        generations.withLock { Self.insert(kept, for: Key(key), into: &$0, half: half) }
    }

    private static func insert(_ kept: Kept, for key: Key, into g: inout Generations, half: Int) {
        if g.current.count >= half {
            // The new generation grows as it fills: reserved whole, its table would be in RSS
            // after a few thousand sessions, spread over every page.
            g.previous = g.current
            g.current = [:]
        }
        g.current[key] = kept
    }

    func removeAll() {
        generations.withLock { $0 = Generations() }
    }

    /// How many sessions are kept (both generations). For tests.
    var count: Int { generations.withLock { $0.current.count + $0.previous.count } }
}
