import Foundation
import PWCore
import PWCrypto
import PWPolicy
@testable import SessionAuth
import Testing

/// The contact claim obeys the rule client fields obey (no control, bidirectional, zero-width or
/// other invisible formatting character, not blank), whichever algorithm signed the session; and
/// every string the session path compares (issuer, audience, kid, claim names) is compared by its
/// bytes, never by Unicode canonical equivalence.
@Suite("Contact claims and exact comparisons")
struct ContactClaimTests {
    /// One signer per algorithm a session may use, all over the same claims.
    struct Signers {
        let rsa: PrivateKey
        let ec: PrivateKey

        init(_ f: Fixture) throws {
            rsa = try PrivateKey(pem: String(decoding: try f.tool.read("rsa.pem"), as: UTF8.self))
            ec = try PrivateKey(pem: String(decoding: try f.tool.read("ec.pem"), as: UTF8.self))
        }

        func tokens(_ claims: JSONObject) throws -> [(JWTAlgorithm, String)] {
            [
                (.hs256, JWTMinter.mintHS256(claims: claims, secret: hmacSecret)),
                (.rs256, try JWTMinter.mintRS256(claims: claims, key: rsa, kid: "rsa-1")),
                (.es256, try JWTMinter.mintES256(claims: claims, key: ec, kid: "ec-1")),
            ]
        }
    }

    func claims(contact: String) throws -> JSONObject {
        var claims = try #require(JSONValue.parse(payload()).objectValue)
        claims["contact_id"] = .string(contact)
        return claims
    }

    static let refusedContacts: [(String, String)] = [
        ("LRE", "a\u{202A}b"), ("RLE", "a\u{202B}b"), ("PDF", "a\u{202C}b"), ("LRO", "a\u{202D}b"), ("RLO", "\u{202E}gpj.exe"),
        ("LRI", "a\u{2066}b"), ("RLI", "a\u{2067}b"), ("FSI", "a\u{2068}b"), ("PDI", "a\u{2069}b"),
        ("LRM", "a\u{200E}"), ("RLM", "\u{200F}a"), ("ALM", "a\u{061C}b"),
        ("ZWSP", "alice\u{200B}"), ("ZWNJ", "a\u{200C}b"), ("ZWJ", "a\u{200D}b"), ("WJ", "a\u{2060}b"),
        ("BOM", "\u{FEFF}alice"), ("NUL", "a\u{0}b"), ("BEL", "a\u{7}"), ("ESC", "\u{1B}[31m"), ("DEL", "a\u{7F}"),
        ("NEL", "a\u{85}"), ("CSI", "a\u{9B}"), ("LS", "a\u{2028}"), ("PS", "a\u{2029}"), ("tab", "\t"),
        ("empty", ""), ("space", " "), ("spaces", "    "), ("NBSP", "\u{A0}"), ("ideographic space", "\u{3000}\u{3000}"),
        ("em space and space", "\u{2003} "), ("ZWSP only", "\u{200B}"),
    ]

    @Test func refusedWhicheverAlgorithmSignedTheSession() throws {
        let f = try Fixture.get()
        let signers = try Signers(f)
        let hs = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        let jwks = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        for (name, contact) in Self.refusedContacts {
            for (alg, token) in try signers.tokens(claims(contact: contact)) {
                let result = (alg == .hs256 ? hs : jwks).authenticate(bearer(token))
                let reason = failureReason(result)
                #expect(reason?.hasPrefix("contact claim contact_id ") == true, "\(name) with \(alg.rawValue): \(reason ?? "accepted")")
                if case .failure(let failure) = result { #expect(failure.contractError.code == .unauthorized) }
            }
        }
        // Ordinary ids, including non-Latin and emoji ones, still pass under every algorithm.
        for contact in ["alice", "contact-42", "é", "Zoë Ångström", "李小龙", "👍", "a b", " alice"] {
            for (alg, token) in try signers.tokens(claims(contact: contact)) {
                let result = (alg == .hs256 ? hs : jwks).verify(token: token)
                #expect(try result.get().contactID == contact, "\(contact) with \(alg.rawValue)")
            }
        }
    }

    /// The same characters written as JSON escapes in a token made by `openssl`, and through the cookie.
    @Test func refusedWhenEscapedInTheJSON() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef), header: nil, cookie: "sid"))
        for escaped in [#""\u202Eabc""#, #""a\u200Db""#, #""\uFEFF""#, #""\u061C1""#, #""\u2060""#, #""\u0020\u00A0""#] {
            let token = try f.hs256Token(payload: payload(["contact_id": escaped]), secret: hmacSecret)
            let reason = failureReason(v.authenticate(["Cookie": "sid=\(token)"]))
            #expect(reason?.hasPrefix("contact claim contact_id ") == true, "\(escaped): \(reason ?? "accepted")")
        }
    }

    @Test func reasonsNameTheProblem() throws {
        let v = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        func reason(_ contact: String) throws -> String? {
            failureReason(v.verify(token: JWTMinter.mintHS256(claims: try claims(contact: contact), secret: hmacSecret)))
        }
        #expect(try reason("") == "contact claim contact_id is empty")
        #expect(try reason(" \u{3000}") == "contact claim contact_id is only white space")
        #expect(try reason("a\u{202E}b") == "contact claim contact_id contains a control or invisible formatting character (U+202E)")
        #expect(try reason("a\nb") == "contact claim contact_id contains a control or invisible formatting character (U+000A)")
    }

    // MARK: Exact comparisons

    /// A policy whose issuer, audience and contact claim name hold characters that have a
    /// canonically equivalent spelling: a precomposed é and a K.
    func exactPolicy(_ algorithms: [JWTAlgorithm], keys: SessionPolicy.Keys) -> SessionPolicy {
        SessionPolicy(header: "Authorization", cookie: nil, algorithms: algorithms, keys: keys, issuer: "https://idp.caf\u{E9}.example",
                      audience: "shop-K", contactClaim: "contactKey", leewaySeconds: 30)
    }

    func exactClaims(_ changes: [(String, JSONValue?)] = []) throws -> JSONObject {
        var claims = JSONObject([
            JSONMember("iss", .string("https://idp.caf\u{E9}.example")), JSONMember("aud", .string("shop-K")),
            JSONMember("contactKey", .string("alice")), JSONMember("exp", .number("\(Int(testNow) + 600)")),
        ])
        for (key, value) in changes { claims[key] = value }
        return claims
    }

    @Test func issuerAudienceAndClaimNamesCompareBytes() throws {
        // The premise: Swift's String == calls these pairs equal.
        #expect("https://idp.cafe\u{301}.example" == "https://idp.caf\u{E9}.example")
        #expect("shop-\u{212A}" == "shop-K")

        let v = try verifier(exactPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        func reason(_ claims: JSONObject) -> String? { failureReason(v.verify(token: JWTMinter.mintHS256(claims: claims, secret: hmacSecret))) }
        #expect(try reason(exactClaims()) == nil)
        #expect(try reason(exactClaims([("iss", .string("https://idp.cafe\u{301}.example"))])) == "issuer mismatch")
        #expect(try reason(exactClaims([("aud", .string("shop-\u{212A}"))])) == "audience mismatch")
        #expect(try reason(exactClaims([("aud", .array([.string("other"), .string("shop-\u{212A}")]))])) == "audience mismatch")
        #expect(try reason(exactClaims([("aud", .array([.string("other"), .string("shop-K")]))])) == nil)
        // A claim whose name only looks like the policy's contact claim is not it.
        var renamed = try exactClaims([("contactKey", nil)])
        renamed["contact\u{212A}ey"] = .string("alice")
        #expect(reason(renamed) == "missing contact claim contactKey")
    }

    @Test func kidSelectsByBytes() throws {
        let f = try Fixture.get()
        let ec = try PrivateKey(pem: String(decoding: try f.tool.read("ec.pem"), as: UTF8.self))
        let jwks = JSONValue.object(JSONObject([JSONMember("keys", .array([.object(ec.publicKeyJWK(kid: "K1"))]))])).encodedString()
        let v = try verifier(exactPolicy([.es256], keys: .jwksFile("/etc/pushwarden/jwks.json")), jwks: jwks)
        #expect(try v.verify(token: JWTMinter.mintES256(claims: exactClaims(), key: ec, kid: "K1")).get().contactID == "alice")
        let kelvin = try JWTMinter.mintES256(claims: exactClaims(), key: ec, kid: "\u{212A}1")
        #expect(failureReason(v.verify(token: kelvin)) == "unknown kid " + SessionVerifier.echo("\u{212A}1"))
    }
}

/// Identity providers that key users by a database id send the contact as a JSON integer
/// (`"sub": 12345`): it is the integer's decimal text, exactly as written; every other non-string
/// claim is refused. Tokens signed by the `openssl` command line (ES256) and HS256.
@Suite("Integer contact claims")
struct IntegerContactClaimTests {
    static let accepted: [String] = ["12345", "0", "-7", "9223372036854775807", "-9223372036854775808", "1000000000000000000"]
    static let refused: [(json: String, reason: String)] = [
        ("12.5", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("12.5") + ")"),
        ("12.0", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("12.0") + ")"),
        ("1e3", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("1e3") + ")"),
        ("1E3", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("1E3") + ")"),
        ("-0", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("-0") + ")"),
        ("9223372036854775808", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("9223372036854775808") + ")"),
        ("-9223372036854775809", "is a number that is not an integer within 64 bits (" + SessionVerifier.echo("-9223372036854775809") + ")"),
        ("true", "is a boolean, not a string or an integer"),
        ("false", "is a boolean, not a string or an integer"),
        ("null", "is null, not a string or an integer"),
        (#"{"id":1}"#, "is an object, not a string or an integer"),
        ("[1]", "is an array, not a string or an integer"),
    ]

    @Test func integersAreTheirDecimalText() throws {
        let f = try Fixture.get()
        let es = try verifier(jwtPolicy([.es256]), jwks: f.jwks)
        let hs = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        for integer in Self.accepted {
            let signed = try f.token(header: #"{"alg":"ES256","kid":"ec-1"}"#, payload: payload(["contact_id": integer]), keyFile: "ec.pem")
            #expect(try es.verify(token: signed).get().contactID == integer)
            let mac = try f.hs256Token(payload: payload(["contact_id": integer]), secret: hmacSecret)
            #expect(try hs.authenticate(bearer(mac)).get().contactID == integer)
        }
    }

    @Test func otherTypesAreRefused() throws {
        let f = try Fixture.get()
        let es = try verifier(jwtPolicy([.es256]), jwks: f.jwks)
        for c in Self.refused {
            let signed = try f.token(header: #"{"alg":"ES256","kid":"ec-1"}"#, payload: payload(["contact_id": c.json]), keyFile: "ec.pem")
            let result = es.verify(token: signed)
            #expect(failureReason(result) == "contact claim contact_id \(c.reason)", "\(c.json)")
            if case .failure(let failure) = result { #expect(failure.contractError.code == .unauthorized) }
        }
    }

    /// The default claim `sub` as an integer.
    @Test func integerSubject() throws {
        let v = try verifier(SessionPolicy(header: "Authorization", cookie: nil, algorithms: [.hs256], keys: .hmacSecret(hmacRef),
                                           issuer: nil, audience: nil, contactClaim: "sub", leewaySeconds: 30))
        let token = JWTMinter.mintHS256(claims: JSONObject([JSONMember("sub", .number("12345")),
                                                            JSONMember("exp", .number(String(Int(testNow) + 60)))]), secret: hmacSecret)
        #expect(try v.verify(token: token).get().contactID == "12345")
    }
}
