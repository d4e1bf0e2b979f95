import Foundation
import PWCore
import PWCrypto
import PWPolicy
@testable import SessionAuth
import Testing

private let rsaHeader = #"{"alg":"RS256","typ":"JWT","kid":"rsa-1"}"#
private let ecHeader = #"{"alg":"ES256","typ":"JWT","kid":"ec-1"}"#

/// Tokens made by the `openssl` command line, which the verifier must accept.
@Suite("Session tokens from an independent implementation")
struct AcceptedTokenTests {
    @Test func rs256FromOpenSSL() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let token = try f.token(header: rsaHeader, payload: payload(), keyFile: "rsa.pem")
        #expect(try v.authenticate(bearer(token)).get() == Session(contactID: "contact-42", subject: "user-1", expiresAt: testNow + 600))
        // The oct key in the JWKS is skipped, never used.
        #expect(v.skippedKeys == ["session jwks_file /etc/pushwarden/jwks.json: keys[2] (kid \"hmac-1\"): kty oct is not used"])
    }

    @Test func es256FromOpenSSL() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.es256]), jwks: f.jwks)
        let token = try f.token(header: ecHeader, payload: payload(), keyFile: "ec.pem")
        #expect(try v.authenticate(bearer(token)).get().contactID == "contact-42")
    }

    @Test func hs256FromOpenSSL() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        let token = try f.hs256Token(payload: payload(), secret: hmacSecret)
        #expect(try v.authenticate(bearer(token)).get().contactID == "contact-42")
        // And what our own minter makes.
        let minted = JWTMinter.mintHS256(claims: try #require(JSONValue.parse(payload()).objectValue), secret: hmacSecret)
        #expect(try v.verify(token: minted).get().contactID == "contact-42")
    }

    @Test func withoutKidTheOnlyKeyOfTheFamilyIsUsed() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let rs = try f.token(header: #"{"alg":"RS256"}"#, payload: payload(), keyFile: "rsa.pem")
        let es = try f.token(header: #"{"alg":"ES256"}"#, payload: payload(), keyFile: "ec.pem")
        #expect(try v.verify(token: rs).get().contactID == "contact-42")
        #expect(try v.verify(token: es).get().contactID == "contact-42")
    }

    @Test func kidSelectsAmongSeveralKeys() throws {
        let f = try Fixture.get()
        let second = try PrivateKey(pem: String(decoding: try f.tool.read("rsa2.pem"), as: UTF8.self))
        let jwks = JSONValue.object(JSONObject([JSONMember("keys", .array([
            .object(second.publicKeyJWK(kid: "rsa-2")),
            .object(try #require(JSONValue.parse(f.jwks).objectValue?["keys"]?.arrayValue?.first?.objectValue)),
        ]))])).encodedString()
        let v = try verifier(jwtPolicy([.rs256]), jwks: jwks)
        let one = try f.token(header: rsaHeader, payload: payload(), keyFile: "rsa.pem")
        let two = try f.token(header: #"{"alg":"RS256","kid":"rsa-2"}"#, payload: payload(), keyFile: "rsa2.pem")
        #expect(try v.verify(token: one).get().contactID == "contact-42")
        #expect(try v.verify(token: two).get().contactID == "contact-42")
        let swapped = try f.token(header: #"{"alg":"RS256","kid":"rsa-2"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: swapped)) == "signature mismatch")
        let noKid = try f.token(header: #"{"alg":"RS256"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: noKid)) == "no kid, and several keys for RS256")
    }

    @Test func cookieAndHeaderForms() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.es256], cookie: "session"), jwks: f.jwks)
        let token = try f.token(header: ecHeader, payload: payload(), keyFile: "ec.pem")
        let cases: [HTTPHeaders] = [
            ["Cookie": "theme=dark; session=\(token); other=1"],
            ["Cookie": "session=\"\(token)\""],
            ["cookie": "a=b", "Cookie": "  session = \(token) "],
            ["Authorization": "bearer \(token)"],
            ["authorization": "BEARER   \(token)  "],
            // A header in another scheme does not hide the cookie.
            ["Authorization": "Basic dXNlcjpwYXNz", "Cookie": "session=\(token)"],
        ]
        for headers in cases {
            #expect(try v.authenticate(headers).get().contactID == "contact-42", "\(headers)")
        }
        #expect(failureReason(v.authenticate(["Cookie": "sessionx=\(token); Session=\(token)"])) == "no session token")

        let cookieOnly = try verifier(jwtPolicy([.es256], header: nil, cookie: "sid"), jwks: f.jwks)
        #expect(try cookieOnly.authenticate(["Cookie": "sid=\(token)"]).get().contactID == "contact-42")
        #expect(failureReason(cookieOnly.authenticate(bearer(token))) == "no session token")
    }

    @Test func jwksFromAFileAndMintedTokens() throws {
        let f = try Fixture.get()
        let ec = try PrivateKey.generateP256()
        let rsa = try PrivateKey.generateRSA(bits: 2048)
        let jwks = JSONValue.object(JSONObject([JSONMember("keys", .array([
            .object(ec.publicKeyJWK(kid: "e")), .object(rsa.publicKeyJWK(kid: "r")),
        ]))])).encodedString()
        let file = f.tool.path("jwks-\(UUID().uuidString).json")
        try Data(jwks.utf8).write(to: URL(fileURLWithPath: file))
        let v = try SessionVerifier(policy: jwtPolicy([.es256, .rs256], keys: .jwksFile(file)), secrets: StaticSecrets([:]),
                                    clock: FixedClock(time: testNow))
        let claims = try #require(JSONValue.parse(payload()).objectValue)
        #expect(try v.verify(token: JWTMinter.mintES256(claims: claims, key: ec, kid: "e")).get().contactID == "contact-42")
        #expect(try v.verify(token: JWTMinter.mintRS256(claims: claims, key: rsa, kid: "r")).get().contactID == "contact-42")
        #expect(failureReason(v.verify(token: try JWTMinter.mintES256(claims: claims, key: ec, kid: "r"))) == "kid r is not a key for ES256")
    }
}

/// One verifier shared by many threads: keys and the HMAC secret are immutable, each check owns
/// its OpenSSL contexts.
@Suite("Concurrent verification")
struct ConcurrencyTests {
    @Test func sharedVerifierAcrossTasks() async throws {
        let f = try Fixture.get()
        let keyed = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let hs = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        let rs = try f.token(header: rsaHeader, payload: payload(), keyFile: "rsa.pem")
        let es = try f.token(header: ecHeader, payload: payload(), keyFile: "ec.pem")
        let mac = try f.hs256Token(payload: payload(), secret: hmacSecret)
        let bad = String(es.dropLast(2)) + (es.hasSuffix("AA") ? "BA" : "AA")
        let results = await withTaskGroup(of: Int.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var ok = 0
                    for i in 0..<100 {
                        switch (worker + i) % 4 {
                        case 0: if (try? keyed.verify(token: rs).get()) != nil { ok += 1 }
                        case 1: if (try? keyed.verify(token: es).get()) != nil { ok += 1 }
                        case 2: if (try? hs.verify(token: mac).get()) != nil { ok += 1 }
                        default: if failureReason(keyed.verify(token: bad)) == "signature mismatch" { ok += 1 }
                        }
                    }
                    return ok
                }
            }
            return await group.reduce(0, +)
        }
        #expect(results == 800)
    }
}

/// Tokens that must be refused, each with the reason the log would show.
@Suite("Session tokens that must fail")
struct RefusedTokenTests {
    @Test func algNone() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let input = b64url(#"{"alg":"none","typ":"JWT"}"#) + "." + b64url(payload())
        #expect(failureReason(v.verify(token: input + ".")) == "alg none not allowed")
        #expect(failureReason(v.verify(token: input + "." + b64url("sig"))) == "alg none not allowed")
        let upper = b64url(#"{"alg":"NONE"}"#) + "." + b64url(payload()) + "."
        #expect(failureReason(v.verify(token: upper)) == "alg none not allowed")
        let hs = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        #expect(failureReason(hs.verify(token: input + ".")) == "alg none not allowed")
    }

    /// The classic key confusion: re-sign as HS256 with the public key's bytes as the HMAC secret.
    @Test(arguments: ["rsa", "ec"])
    func publicKeyAsHMACSecret(family: String) throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy(family == "rsa" ? [.rs256] : [.es256]), jwks: f.jwks)
        let both = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let secrets = family == "rsa" ? [f.rsaPublicPEM, f.rsaPublicDER] : [f.ecPublicPEM, f.ecPublicDER]
        for secret in secrets {
            for header in [#"{"alg":"HS256","typ":"JWT"}"#, #"{"alg":"HS256","kid":"\#(family)-1"}"#] {
                let token = try f.hs256Token(header: header, payload: payload(), secret: secret)
                #expect(failureReason(v.verify(token: token)) == "alg HS256 not allowed")
                #expect(failureReason(both.verify(token: token)) == "alg HS256 not allowed")
            }
        }
        // And a JWKS-keyed policy cannot allow HS256 at all.
        #expect(throws: SessionConfigError.self) { try verifier(jwtPolicy([.rs256, .hs256]), jwks: f.jwks) }
    }

    @Test func tamperedTokens() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        for (header, keyFile) in [(rsaHeader, "rsa.pem"), (ecHeader, "ec.pem")] {
            let parts = try f.token(header: header, payload: payload(), keyFile: keyFile).split(separator: ".").map(String.init)
            let otherPayload = b64url(payload(["contact_id": "\"contact-43\""]))
            #expect(failureReason(v.verify(token: "\(parts[0]).\(otherPayload).\(parts[2])")) == "signature mismatch")
            let otherHeader = b64url(String(header.dropLast()) + #","x":1}"#)
            #expect(failureReason(v.verify(token: "\(otherHeader).\(parts[1]).\(parts[2])")) == "signature mismatch")
            var signature = try #require(Base64URL.decode(parts[2]))
            signature[signature.count / 2] ^= 1
            #expect(failureReason(v.verify(token: "\(parts[0]).\(parts[1]).\(b64url(signature))")) == "signature mismatch")
        }
        let hs = try verifier(jwtPolicy([.hs256], keys: .hmacSecret(hmacRef)))
        let parts = try f.hs256Token(payload: payload(), secret: hmacSecret).split(separator: ".").map(String.init)
        #expect(failureReason(hs.verify(token: "\(parts[0]).\(b64url(payload(["sub": "\"x\""]))).\(parts[2])")) == "signature mismatch")
        let wrongSecret = try f.hs256Token(payload: payload(), secret: Array(hmacSecret.reversed()))
        #expect(failureReason(hs.verify(token: wrongSecret)) == "signature mismatch")
    }

    @Test func keySelection() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let unknown = try f.token(header: #"{"alg":"RS256","kid":"nope"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: unknown)) == "unknown kid " + SessionVerifier.echo("nope"))
        let wrongFamily = try f.token(header: #"{"alg":"ES256","kid":"rsa-1"}"#, payload: payload(), keyFile: "ec.pem")
        #expect(failureReason(v.verify(token: wrongFamily)) == "kid rsa-1 is not a key for ES256")
        let oct = try f.hs256Token(header: #"{"alg":"RS256","kid":"hmac-1"}"#, payload: payload(), secret: Array("secret".utf8))
        #expect(failureReason(v.verify(token: oct)) == "unknown kid " + SessionVerifier.echo("hmac-1"))
        let numericKid = try f.token(header: #"{"alg":"RS256","kid":1}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: numericKid)) == "kid is a number, not a string")
    }

    /// A red-team token carried a provider key as its `kid`, and the refusal's reason (logged)
    /// held the key. Values the client chose appear only as a short hash, whatever they hold; the
    /// reason's kind (what log bounds key on) is the same for every value.
    @Test func clientChosenValuesAreNeverEchoedInReasons() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: f.jwks)
        let key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
        let planted = [key, "k\u{202E}1\u{1B}[2J", String(repeating: "A", count: 300)]
        var kinds: Set<String> = []
        for value in planted {
            let header = JSONValue.object(JSONObject([JSONMember("alg", "RS256"), JSONMember("kid", .string(value))])).encodedString()
            let token = try f.token(header: header, payload: payload(), keyFile: "rsa.pem")
            guard case .failure(let failure) = v.verify(token: token) else { Issue.record("accepted"); continue }
            #expect(failure.reason == "unknown kid " + SessionVerifier.echo(value))
            #expect(!failure.reason.contains(String(value.prefix(8))) && !TextRules.hasForbiddenCharacter(failure.reason))
            kinds.insert(failure.kind)

            let alg = JSONValue.object(JSONObject([JSONMember("alg", .string(value))])).encodedString()
            let algToken = try f.token(header: alg, payload: payload(), keyFile: "rsa.pem")
            #expect(failureReason(v.verify(token: algToken)) == "alg " + SessionVerifier.echo(value) + " not allowed")
        }
        #expect(kinds == ["unknown kid"])
        #expect(SessionVerifier.echo(key) == "sha256:" + String(SHA256.hexHash(Array(key.utf8)).prefix(8)))
        // A registered algorithm name says more than its hash and cannot carry anything else.
        let hs512 = try f.token(header: #"{"alg":"HS512"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: hs512)) == "alg HS512 not allowed")
        // A contact claim that is a number too large: the number is hashed too.
        let digits = String(repeating: "7", count: 60)
        let big = try f.token(header: #"{"alg":"RS256"}"#, payload: payload(["contact_id": digits]), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: big)) == "contact claim contact_id is a number that is not an integer within 64 bits ("
            + SessionVerifier.echo(digits) + ")")
    }

    @Test func headerRules() throws {
        let f = try Fixture.get()
        let rsOnly = try verifier(jwtPolicy([.rs256]), jwks: f.jwks)
        let es = try f.token(header: ecHeader, payload: payload(), keyFile: "ec.pem")
        #expect(failureReason(rsOnly.verify(token: es)) == "alg ES256 not allowed")
        let rs512 = try f.token(header: #"{"alg":"RS512"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(rsOnly.verify(token: rs512)) == "alg RS512 not allowed")
        let typ = try f.token(header: #"{"alg":"RS256","typ":"JWE"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(rsOnly.verify(token: typ)) == "typ is not JWT")
        let crit = try f.token(header: #"{"alg":"RS256","crit":["exp"],"exp":1}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(rsOnly.verify(token: crit)) == "crit header not supported")
        let dup = try f.token(header: #"{"alg":"RS256","alg":"HS256"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(rsOnly.verify(token: dup)) == "header is not a JSON object")
        let noAlg = try f.token(header: #"{"typ":"JWT"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(rsOnly.verify(token: noAlg)) == "header has no alg string")
    }

    @Test func structure() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256]), jwks: f.jwks)
        let token = try f.token(header: rsaHeader, payload: payload(), keyFile: "rsa.pem")
        let parts = token.split(separator: ".").map(String.init)
        #expect(failureReason(v.verify(token: "\(parts[0]).\(parts[1])")) == "token has 2 parts, not 3")
        #expect(failureReason(v.verify(token: "\(token).\(parts[2])")) == "token has 4 parts, not 3")
        #expect(failureReason(v.verify(token: "")) == "token has 1 parts, not 3")
        #expect(failureReason(v.verify(token: parts[0])) == "token has 1 parts, not 3")
        #expect(failureReason(v.verify(token: "\(token)..")) == "token has 5 parts, not 3")
        #expect(failureReason(v.verify(token: "..")) != nil)
        #expect(failureReason(v.verify(token: "=\(token).")) == "token has 4 parts, not 3")
        // Padding is refused even where the plain decoder would tolerate it.
        #expect(failureReason(v.verify(token: "\(parts[0])==.\(parts[1]).\(parts[2])")) == "base64url padding in token")
        #expect(failureReason(v.verify(token: "\(parts[0]).\(parts[1]).\(parts[2])=")) == "base64url padding in token")
        // A '+' (base64, not base64url) in the signature, wherever the random signature has no '-'.
        #expect(failureReason(v.verify(token: "\(parts[0]).\(parts[1]).+\(parts[2].dropFirst())")) == "signature is not base64url")
        #expect(failureReason(v.verify(token: "\(parts[0]).\(parts[1]).")) == "missing signature")
        let huge = b64url(payload(["pad": "\"\(String(repeating: "x", count: 7000))\""]))
        let oversized = "\(parts[0]).\(huge).\(parts[2])"
        #expect(oversized.utf8.count > SessionVerifier.maxTokenBytes)
        #expect(failureReason(v.verify(token: oversized)) == "token longer than 8192 bytes")
        #expect(failureReason(v.verify(token: "\(b64url("not json")).\(parts[1]).\(parts[2])")) == "header is not a JSON object")
        #expect(failureReason(v.verify(token: "e30.\(parts[1]).\(parts[2])")) == "header has no alg string")
    }

    @Test func headersWithoutAToken() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.rs256], cookie: "session"), jwks: f.jwks)
        let token = try f.token(header: rsaHeader, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.authenticate([:])) == "no session token")
        #expect(failureReason(v.authenticate(["X-Other": "Bearer \(token)"])) == "no session token")
        #expect(failureReason(v.authenticate(["Authorization": "Basic \(token)"])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Token \(token)"])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Bearer"])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Bearer a b"])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Bearer a\tb"])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Bearer\t \t"])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Bearers \(token)"])) == "Authorization header is not a Bearer token")
        #expect(try v.authenticate(["Authorization": " \tBEARER\t\(token) \t"]).get().contactID == "contact-42")
        #expect(failureReason(v.authenticate(["Authorization": token])) == "Authorization header is not a Bearer token")
        #expect(failureReason(v.authenticate(["Authorization": "Bearer \(token)", "authorization": "Bearer \(token)"]))
            == "several Authorization headers")
        #expect(failureReason(v.authenticate(["Cookie": "session="])) == "no session token")
        // Whatever the reason, the client sees one thing.
        let failure = AuthFailure("anything")
        #expect(failure.contractError.status == 401)
        #expect(failure.contractError.code == .unauthorized)
        #expect(!failure.contractError.message.contains("anything"))
    }

    @Test func claims() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.es256]), jwks: f.jwks)
        func reason(_ overrides: [String: String?]) throws -> String? {
            failureReason(v.verify(token: try f.token(header: ecHeader, payload: payload(overrides), keyFile: "ec.pem")))
        }
        #expect(try reason(["exp": "\(Int(testNow) - 31)"]) == "expired")
        #expect(try reason(["exp": nil]) == "missing exp")
        #expect(try reason(["exp": "\"\(Int(testNow) + 600)\""]) == "exp is not a number")
        #expect(try reason(["nbf": "\(Int(testNow) + 120)"]) == "not yet valid (nbf)")
        #expect(try reason(["iat": "\(Int(testNow) + 3600)"]) == "issued in the future (iat)")
        #expect(try reason(["iss": "\"https://evil.example.com\""]) == "issuer mismatch")
        #expect(try reason(["iss": nil]) == "missing iss")
        #expect(try reason(["aud": "\"other-app\""]) == "audience mismatch")
        #expect(try reason(["aud": #"["a","b"]"#]) == "audience mismatch")
        #expect(try reason(["aud": nil]) == "missing aud")
        #expect(try reason(["aud": #"["a","\#(audience)"]"#]) == nil)
        #expect(try reason(["contact_id": nil]) == "missing contact claim contact_id")
        #expect(try reason(["contact_id": "true"]) == "contact claim contact_id is a boolean, not a string or an integer")
        #expect(try reason(["contact_id": "\"\""]) == "contact claim contact_id is empty")
        #expect(try reason(["contact_id": #""a\nb""#]) == "contact claim contact_id contains a control or invisible formatting character (U+000A)")
        #expect(try reason(["contact_id": "\"\(String(repeating: "x", count: 257))\""])
            == "contact claim contact_id is longer than 256 characters")
        #expect(try reason(["contact_id": "\"\(String(repeating: "é", count: 256))\""]) == nil)
    }

    /// Every JSON number form a NumericDate can take, integers (read without strtod) and the rest.
    @Test func numericDateForms() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.es256]), jwks: f.jwks)
        func reason(_ overrides: [String: String?]) throws -> String? {
            failureReason(v.verify(token: try f.token(header: ecHeader, payload: payload(overrides), keyFile: "ec.pem")))
        }
        let now = Int(testNow)
        #expect(try reason(["exp": "\(now - 31).5"]) == "expired")
        #expect(try reason(["exp": "\(now - 30).5"]) == nil)
        #expect(try reason(["exp": "\(now + 600).0e0"]) == nil)
        #expect(try reason(["exp": "-1"]) == "expired")
        #expect(try reason(["exp": "-0"]) == "expired")
        #expect(try reason(["exp": "1000000000000000000000"]) == nil)
        #expect(try reason(["exp": "1e400"]) == "exp is not a number")
        #expect(try reason(["nbf": "\(now + 31)"]) == "not yet valid (nbf)")
        #expect(try reason(["nbf": "\(now + 30)"]) == nil)
        #expect(try reason(["iat": "\(now + 30)"]) == nil)
        #expect(try reason(["iat": "\(now + 30).001"]) == "issued in the future (iat)")
        #expect(try reason(["iat": "-\(now)"]) == nil)
    }

    @Test func contactControlCharacters() throws {
        let f = try Fixture.get()
        let v = try verifier(jwtPolicy([.es256]), jwks: f.jwks)
        func reason(_ contact: String) throws -> String? {
            failureReason(v.verify(token: try f.token(header: ecHeader, payload: payload(["contact_id": contact]), keyFile: "ec.pem")))
        }
        for control in [#""a\u007fb""#, #""a\u0085b""#, #""é\u0001""#, #""a\u2028""#, #""\t""#] {
            #expect(try reason(control)?.hasPrefix("contact claim contact_id contains a control or invisible formatting character (U+") == true,
                    "\(control)")
        }
        #expect(try reason("\"\(String(repeating: "x", count: 256))\"") == nil)
        #expect(try reason("\"\(String(repeating: "é", count: 257))\"") == "contact claim contact_id is longer than 256 characters")
    }

    /// Leeway boundaries with a fixed clock: exp = nbf = iat = T, leeway 30 s.
    @Test func leewayBoundaries() throws {
        let f = try Fixture.get()
        let t = Int(testNow)
        let exp = try f.token(header: ecHeader, payload: payload(["exp": "\(t)", "iat": nil]), keyFile: "ec.pem")
        let nbf = try f.token(header: ecHeader, payload: payload(["nbf": "\(t)", "iat": nil]), keyFile: "ec.pem")
        let iat = try f.token(header: ecHeader, payload: payload(["iat": "\(t)"]), keyFile: "ec.pem")
        func reason(_ token: String, at now: Double) throws -> String? {
            failureReason(try verifier(jwtPolicy([.es256]), jwks: f.jwks, now: now).verify(token: token))
        }
        #expect(try reason(exp, at: testNow + 29.999) == nil)
        #expect(try reason(exp, at: testNow + 30) == "expired")
        #expect(try reason(nbf, at: testNow - 30) == nil)
        #expect(try reason(nbf, at: testNow - 30.001) == "not yet valid (nbf)")
        #expect(try reason(iat, at: testNow - 30) == nil)
        #expect(try reason(iat, at: testNow - 30.001) == "issued in the future (iat)")
        let strict = try verifier(jwtPolicy([.es256], leeway: 0), jwks: f.jwks, now: testNow)
        #expect(failureReason(strict.verify(token: exp)) == "expired")
        #expect(failureReason(strict.verify(token: nbf)) == nil)
    }
}

@Suite("Session configuration")
struct SessionConfigTests {
    private func configError(_ policy: SessionPolicy, jwks: String? = nil, secret: [UInt8] = hmacSecret) -> String? {
        do {
            _ = try SessionVerifier(policy: policy, secrets: StaticSecrets([hmacRef: secret]), clock: FixedClock(time: testNow),
                                    jwksLoader: { _ in Array((jwks ?? "").utf8) })
            return nil
        } catch {
            return error.message
        }
    }

    @Test func jwksRules() throws {
        let f = try Fixture.get()
        let rsa = #""kty":"RSA","n":"\#(b64url(f.rsaModulus))","e":"\#(b64url(f.rsaExponent))""#
        let ec = #""kty":"EC","crv":"P-256","x":"\#(b64url(f.ecX))","y":"\#(b64url(f.ecY))""#
        let path = "/etc/pushwarden/jwks.json"
        #expect(configError(jwtPolicy([.rs256]), jwks: #"{"keys":[{\#(rsa),"kid":"a"},{\#(rsa),"kid":"a"}]}"#)
            == "session jwks_file \(path): keys[1] (kid \"a\"): duplicate kid")
        #expect(configError(jwtPolicy([.rs256]), jwks: "{") != nil)
        #expect(configError(jwtPolicy([.rs256]), jwks: #"{"nokeys":[]}"#)
            == "session jwks_file \(path): expected an object with a \"keys\" array")
        // Keys for encryption or with a conflicting alg are skipped; then nothing is left.
        #expect(configError(jwtPolicy([.rs256]), jwks: #"{"keys":[{\#(rsa),"use":"enc"},{\#(rsa),"alg":"ES256"},{\#(ec),"alg":"RS256"}]}"#)
            == "session jwks_file \(path): no key usable with RS256")
        // Only EC keys, but only RS256 allowed.
        #expect(configError(jwtPolicy([.rs256]), jwks: #"{"keys":[{\#(ec)}]}"#) == "session jwks_file \(path): no key usable with RS256")
        let v = try verifier(jwtPolicy([.rs256, .es256]), jwks: #"{"keys":[{\#(rsa),"use":"enc","kid":"x"},{\#(ec),"kid":"x"}]}"#)
        #expect(v.skippedKeys == ["session jwks_file \(path): keys[0] (kid \"x\"): use is not sig"])
        // The skipped key never verifies anything, even with its kid.
        let token = try f.token(header: #"{"alg":"RS256","kid":"x"}"#, payload: payload(), keyFile: "rsa.pem")
        #expect(failureReason(v.verify(token: token)) == "kid x is not a key for RS256")
        // A usable-looking key that is broken stops the start.
        var y = f.ecY
        y[0] ^= 0x40
        let offCurve = configError(jwtPolicy([.es256]), jwks: #"{"keys":[{"kty":"EC","crv":"P-256","x":"\#(b64url(f.ecX))","y":"\#(b64url(y))"}]}"#)
        #expect(offCurve?.hasPrefix("session jwks_file \(path): keys[0]: EC point is not a valid P-256 public key") == true, "\(offCurve ?? "")")
        #expect(configError(jwtPolicy([.rs256]), jwks: #"{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}"#)
            == "session jwks_file \(path): keys[0]: RSA modulus of 17 bits is too small (minimum 2048)")
        do {
            _ = try SessionVerifier(policy: jwtPolicy([.es256], keys: .jwksFile("/nonexistent/jwks.json")), secrets: StaticSecrets([:]))
            Issue.record("a missing JWKS file must be a config error")
        } catch {
            #expect(error.message.hasPrefix("session jwks_file /nonexistent/jwks.json: cannot be read"))
        }
    }

    @Test func hmacRules() {
        let hs = jwtPolicy([.hs256], keys: .hmacSecret(hmacRef))
        #expect(configError(hs) == nil)
        #expect(configError(hs, secret: Array(repeating: 0x61, count: 31))
            == "session hmac_secret env:SESSION_SECRET is 31 bytes; HS256 needs at least 32")
        #expect(configError(jwtPolicy([.hs256], keys: .hmacSecret(.env("UNSET"))))
            == "session hmac_secret: secret env:UNSET: not provided")
        #expect(configError(jwtPolicy([.hs256, .rs256], keys: .hmacSecret(hmacRef))) == "session: RS256 needs jwks_file, not hmac_secret")
        #expect(configError(jwtPolicy([], keys: .hmacSecret(hmacRef))) == "session: no algorithms allowed")
    }
}
