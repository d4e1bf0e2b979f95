import PWCore
import PWCrypto
import PWPolicy
@testable import SessionAuth
import Testing

/// Logout tokens (OpenID Connect Back-Channel Logout 1.0, section 2.6) under an HS256 app
/// session: each check, by its reason, and that a logout token and a session token never pass
/// for each other.
@Suite struct LogoutTokenTests {
    static let event = #"{"http://schemas.openid.net/event/backchannel-logout":{}}"#

    static func policy(contactClaim: String = "sub") -> SessionPolicy {
        var policy = jwtPolicy([.hs256], keys: .hmacSecret(hmacRef))
        policy.contactClaim = contactClaim
        policy.backchannelLogout = BackchannelLogoutPolicy()
        return policy
    }

    /// Claims valid at `testNow`, `overrides` replacing or (nil) removing members.
    static func claims(_ overrides: [String: String?] = [:]) -> String {
        var members: [(String, String)] = [
            ("iss", "\"\(issuer)\""), ("aud", "\"\(audience)\""), ("iat", "\(Int(testNow) - 2)"), ("jti", "\"bWJq\""),
            ("sid", "\"08a5019c\""), ("sub", "\"248289761001\""), ("events", event),
        ]
        for (key, value) in overrides {
            members.removeAll { $0.0 == key }
            if let value { members.append((key, value)) }
        }
        return "{" + members.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    static func token(_ claims: String, typ: String? = "logout+jwt", secret: [UInt8] = hmacSecret) -> String {
        let header = typ.map { #"{"alg":"HS256","typ":"\#($0)"}"# } ?? #"{"alg":"HS256"}"#
        let input = b64url(header) + "." + b64url(claims)
        return input + "." + b64url(HMACSHA256.mac(key: secret, message: Array(input.utf8)))
    }

    static func reason(_ result: Result<LogoutToken, AuthFailure>) -> String? {
        if case .failure(let failure) = result { return failure.reason }
        return nil
    }

    @Test func aValidTokenGivesItsSessionSubjectAndReplayWindow() throws {
        let v = try verifier(Self.policy())
        for typ in ["logout+jwt", "JWT", "application/logout+jwt", nil] as [String?] {
            let token = try v.verifyLogout(token: Self.token(Self.claims(), typ: typ)).get()
            #expect(token.sessionID == "08a5019c")
            #expect(token.subject == "248289761001")
            #expect(token.contactID == "248289761001", "contact_claim sub: the subject is the contact")
            #expect(token.jti == "bWJq")
            #expect(token.rememberUntil == testNow - 2 + SessionVerifier.jtiMemorySeconds)
        }
        // Another contact claim that the token does not carry: no contact, the sid finds it.
        let other = try verifier(Self.policy(contactClaim: "contact_id"))
        #expect(try other.verifyLogout(token: Self.token(Self.claims())).get().contactID == nil)
    }

    static let refused: [(String, [String: String?], String)] = [
        ("nonce", ["nonce": "\"n-0S6\""], "a logout token must not carry nonce"),
        ("no events", ["events": nil], "missing events object"),
        ("events an array", ["events": "[]"], "missing events object"),
        ("no logout member", ["events": #"{"other":{}}"#], "events has no back-channel logout member holding an object"),
        ("member a string", ["events": #"{"http://schemas.openid.net/event/backchannel-logout":"x"}"#],
         "events has no back-channel logout member holding an object"),
        ("no jti", ["jti": nil], "missing or malformed jti"),
        ("empty jti", ["jti": "\"\""], "missing or malformed jti"),
        ("no sid, no sub", ["sid": nil, "sub": nil], "neither sid nor sub"),
        ("sid a number", ["sid": "7"], "malformed sid"),
        ("no iss", ["iss": nil], "missing iss"),
        ("other iss", ["iss": "\"https://evil.example.com\""], "issuer mismatch"),
        ("no aud", ["aud": nil], "missing aud"),
        ("other aud", ["aud": "\"other\""], "audience mismatch"),
        ("no iat", ["iat": nil], "missing iat"),
        ("iat old", ["iat": "\(Int(testNow) - 31)"], "issued too long ago (iat beyond the leeway)"),
        ("iat ahead", ["iat": "\(Int(testNow) + 31)"], "issued in the future (iat)"),
        ("expired", ["exp": "\(Int(testNow) - 31)"], "expired"),
    ]

    @Test func eachCheckRefusesByItsReason() throws {
        let v = try verifier(Self.policy())
        for (name, overrides, reason) in Self.refused {
            #expect(Self.reason(v.verifyLogout(token: Self.token(Self.claims(overrides)))) == reason, "\(name)")
        }
        let foreign = Array("another-secret-0123456789abcdef-0123".utf8)
        #expect(Self.reason(v.verifyLogout(token: Self.token(Self.claims(), secret: foreign))) == "signature mismatch")
        #expect(Self.reason(v.verifyLogout(token: Self.token(Self.claims(), typ: "at+jwt"))) == "typ is not logout+jwt or JWT")
    }

    /// A session token is no logout token (no event), and a logout token typed `logout+jwt` is no
    /// session (its type; untyped, it has no `exp`).
    @Test func neitherPassesForTheOther() throws {
        let v = try verifier(Self.policy(contactClaim: "contact_id"))
        let session = Self.token(payload(["iat": "\(Int(testNow))"]), typ: "JWT")
        #expect(try v.verify(token: session).get().contactID == "contact-42")
        #expect(Self.reason(v.verifyLogout(token: session)) == "missing events object")
        #expect(failureReason(v.verify(token: Self.token(Self.claims()))) == "typ is not JWT")
        #expect(failureReason(v.verify(token: Self.token(Self.claims(), typ: nil))) == "missing exp")
    }

    /// The session id a session carries, when the policy names its claim.
    @Test func aSessionKeepsItsSessionID() throws {
        let v = try verifier(Self.policy(contactClaim: "contact_id"))
        let session = try v.verify(token: Self.token(payload(["sid": "\"s-1\""]), typ: "JWT")).get()
        #expect(session.sessionID == "s-1")
        // From the verified cache too.
        #expect(try v.verify(token: Self.token(payload(["sid": "\"s-1\""]), typ: "JWT")).get().sessionID == "s-1")
        #expect(try v.verify(token: Self.token(payload(["sid": "42"]), typ: "JWT")).get().sessionID == nil)
        let without = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        #expect(try without.verify(token: Self.token(payload(["sid": "\"s-1\""]), typ: "JWT")).get().sessionID == nil)
    }

    /// `policy check` warns when the contact claim is not `sub`: logout tokens name people by `sub`.
    @Test func policyCheckWarnsWhenTheContactIsNotSub() throws {
        func warnings(_ claim: String) throws -> [String] {
            let yaml = """
            version: 1
            apps:
              demo:
                session:
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: DEMO_SECRET}
                  issuer: https://idp.example.com
                  audience: demo
                  contact_claim: \(claim)
                  backchannel_logout: {scope: session}
                client:
                  platforms: [ios]
                upstreams:
                  - name: up
                    provider: dry_run

            """
            return SessionPolicyCheck.diagnostics(for: try PolicyLoader.load(text: yaml, path: "p.yaml").get()).map(\.description)
        }
        #expect(try warnings("sub").isEmpty)
        #expect(try warnings("contact_id") == [
            "p.yaml:11:27: apps.demo.session.backchannel_logout: warning: contact_claim is 'contact_id', not sub: a logout token names the contact only when it carries that claim; one with only sub removes nothing, one with sid finds its session",
        ])
    }
}
