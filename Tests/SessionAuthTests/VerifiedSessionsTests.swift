import PWCore
import PWCrypto
import PWPolicy
@testable import SessionAuth
import Synchronization
import Testing

/// A token sent again is not verified again, and nothing about that lets a token through that
/// the full check would refuse.
@Suite struct VerifiedSessionsTests {
    final class Clock: WallClock, Sendable {
        let time = Mutex<Double>(testNow)
        func now() -> Double { time.withLock { $0 } }
        func set(_ seconds: Double) { time.withLock { $0 = seconds } }
    }

    static func hs256(_ overrides: [String: String?] = [:]) throws -> String {
        JWTMinter.mintHS256(claims: try #require(JSONValue.parse(Array(payload(overrides).utf8)).objectValue), secret: hmacSecret)
    }

    static func hs256Verifier(clock: Clock, capacity: Int = 64) throws -> SessionVerifier {
        var policy = jwtPolicy([.hs256], keys: .hmacSecret(hmacRef))
        policy.verifiedCache = capacity
        return try SessionVerifier(policy: policy, secrets: StaticSecrets([hmacRef: hmacSecret]), clock: clock)
    }

    @Test func aTokenSentAgainGetsTheSameSessionFromOneEntry() throws {
        let v = try Self.hs256Verifier(clock: Clock())
        let token = try Self.hs256()
        let first = try v.verify(token: token).get()
        #expect(try v.verify(token: token).get() == first)
        #expect(try v.authenticate(bearer(token)).get() == first)
        #expect(first.contactID == "contact-42")
        #expect(v.verified.count == 1)
    }

    @Test func aTokenAlteredAnywhereIsVerifiedWholeAndRefused() throws {
        let v = try Self.hs256Verifier(clock: Clock())
        let token = try Self.hs256()
        _ = try v.verify(token: token).get()
        let parts = token.split(separator: ".").map(String.init)
        // Another contact under the cached token's signature; a signature one character off.
        let otherPayload = b64url(payload(["contact_id": "\"contact-43\""]))
        let forged = [parts[0], otherPayload, parts[2]].joined(separator: ".")
        #expect(failureReason(v.verify(token: forged)) == "signature mismatch")
        var signature = Array(parts[2].utf8)
        signature[signature.count - 2] = signature[signature.count - 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let resigned = [parts[0], parts[1], String(decoding: signature, as: UTF8.self)].joined(separator: ".")
        #expect(failureReason(v.verify(token: resigned)) == "signature mismatch")
        #expect(v.verified.count == 1)
    }

    @Test func aRefusedTokenIsNeverKeptAndStaysRefused() throws {
        let v = try Self.hs256Verifier(clock: Clock())
        let wrongSecret = JWTMinter.mintHS256(claims: try #require(JSONValue.parse(Array(payload().utf8)).objectValue),
                                              secret: Array("another-secret-of-at-least-32-bytes!!".utf8))
        for _ in 0..<3 { #expect(failureReason(v.verify(token: wrongSecret)) == "signature mismatch") }
        let notYet = try Self.hs256(["nbf": "\(Int(testNow) + 3600)"])
        for _ in 0..<3 { #expect(failureReason(v.verify(token: notYet)) == "not yet valid (nbf)") }
        #expect(v.verified.count == 0)
    }

    @Test func aKeptSessionNeverOutlivesExp() throws {
        let clock = Clock()
        let v = try Self.hs256Verifier(clock: clock)
        let token = try Self.hs256(["exp": "\(Int(testNow) + 60)"])
        _ = try v.verify(token: token).get()
        // Past exp, inside the 30 s leeway: verified whole again (and accepted), not from the entry.
        clock.set(testNow + 70)
        #expect(try v.verify(token: token).get().contactID == "contact-42")
        // Past exp and the leeway: refused, although it was accepted twice.
        clock.set(testNow + 91)
        #expect(failureReason(v.verify(token: token)) == "expired")
    }

    /// An entry keeps `exp` in whole seconds: a token whose `exp` has a fraction is not kept, so
    /// a token sent again never gets a session that differs from the one verified.
    @Test func aSessionFoundIsTheSessionVerifiedEvenWithAFractionalExp() throws {
        let v = try Self.hs256Verifier(clock: Clock())
        let whole = try Self.hs256(["exp": "\(Int(testNow) + 600)"])
        let first = try v.verify(token: whole).get()
        #expect(try v.verify(token: whole).get() == first)
        #expect(v.verified.count == 1)
        let fractional = try Self.hs256(["exp": "\(Int(testNow) + 600).5"])
        let verified = try v.verify(token: fractional).get()
        #expect(verified.expiresAt == Double(Int(testNow) + 600) + 0.5)
        #expect(try v.verify(token: fractional).get() == verified)
        #expect(v.verified.count == 1)
    }

    @Test func newKeysEmptyItSoARemovedKeyStopsAcceptingAtOnce() throws {
        let key = try PrivateKey.generateP256()
        let jwks = #"{"keys":["# + JSONValue.object(key.publicKeyJWK(kid: "ec-1")).encodedString() + "]}"
        let v = try SessionVerifier(policy: jwtPolicy([.es256]), secrets: StaticSecrets([:]), clock: Clock(),
                                    jwksLoader: { _ in Array(jwks.utf8) })
        let token = try JWTMinter.mintES256(claims: try #require(JSONValue.parse(Array(payload().utf8)).objectValue), key: key, kid: "ec-1")
        _ = try v.verify(token: token).get()
        #expect(v.verified.count == 1)
        let other = try PrivateKey.generateP256()
        let rotated = #"{"keys":["# + JSONValue.object(other.publicKeyJWK(kid: "ec-2")).encodedString() + "]}"
        v.replaceKeys(try JWKSet(json: Array(rotated.utf8), algorithms: [.es256]))
        #expect(v.verified.count == 0)
        #expect(failureReason(v.verify(token: token)) == "unknown kid " + SessionVerifier.echo("ec-1"))
    }

    @Test func withNoneKeptEveryTokenIsVerifiedEachTime() throws {
        let clock = Clock()
        let v = try Self.hs256Verifier(clock: clock, capacity: 0)
        let token = try Self.hs256(["exp": "\(Int(testNow) + 60)"])
        #expect(try v.verify(token: token).get().contactID == "contact-42")
        #expect(try v.verify(token: token).get().contactID == "contact-42")
        #expect(v.verified.count == 0)
    }

    @Test func aSessionUsedAgainStaysWhileNewOnesComeAndGo() throws {
        let v = try Self.hs256Verifier(clock: Clock(), capacity: 8)
        let kept = try Self.hs256(["contact_id": "\"kept\""])
        var bytes = kept
        let key = bytes.withUTF8 { SHA256.words($0) }
        _ = try v.verify(token: kept).get()
        for n in 0..<40 {
            _ = try v.verify(token: try Self.hs256(["contact_id": "\"contact-\(n)\""])).get()
            // Looked up every third new session (more than the 4 a generation holds go by
            // between two drops): found each time, never verified again.
            if n % 3 == 2 {
                #expect(v.verified.session(for: key, now: testNow)?.contactID == "kept", "dropped after \(n + 1) new sessions")
                #expect(v.verified.count <= 8)
            }
        }
    }

    @Test func itHoldsAtMostItsCapacity() throws {
        let v = try Self.hs256Verifier(clock: Clock(), capacity: 8)
        for n in 0..<50 {
            let token = try Self.hs256(["contact_id": "\"contact-\(n)\""])
            #expect(try v.verify(token: token).get().contactID == "contact-\(n)")
            #expect(v.verified.count <= 8)
        }
        // The newest are kept, and still give their own session.
        let last = try Self.hs256(["contact_id": "\"contact-49\""])
        #expect(try v.verify(token: last).get().contactID == "contact-49")
    }
}
