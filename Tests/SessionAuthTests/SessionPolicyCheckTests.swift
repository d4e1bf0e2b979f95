import PWCore
import PWPolicy
@testable import SessionAuth
import Testing

/// `policy check`'s JWKS diagnostics, with the file read through the seam.
@Suite struct SessionPolicyCheckTests {
    static let yaml = """
    version: 1
    apps:
      shop:
        session:
          type: jwt
          algorithms: [RS256, ES256]
          jwks_file: /etc/pushwarden/shop-jwks.json
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run
      demo:
        session:
          type: jwt
          algorithms: [HS256]
          hmac_secret: {env: DEMO_SECRET}
        client:
          platforms: [ios]
        upstreams:
          - name: up
            provider: dry_run

    """

    func diagnostics(_ jwks: String) throws -> [String] {
        let policy = try PolicyLoader.load(text: Self.yaml, path: "p.yaml").get()
        #expect(policy.locations["apps.shop.session.jwks_file"] == PolicyLocation(line: 7, column: 18))
        return SessionPolicyCheck.diagnostics(for: policy) { path in
            #expect(path == "/etc/pushwarden/shop-jwks.json")
            return Array(jwks.utf8)
        }.map(\.description)
    }

    @Test func refusalsAndSkippedKeys() throws {
        let f = try Fixture.get()
        let ec = #""kty":"EC","crv":"P-256","x":"\#(b64url(f.ecX))","y":"\#(b64url(f.ecY))""#
        let at = "p.yaml:7:18: apps.shop.session.jwks_file: "
        #expect(try diagnostics(#"{"keys":[{\#(ec)}]}"#) == [])
        #expect(try diagnostics(f.jwks) == [at + #"warning: /etc/pushwarden/shop-jwks.json: keys[2] (kid "hmac-1") skipped: kty oct is not used"#])
        #expect(try diagnostics(#"{"keys":[{\#(ec),"kid":"a"},{\#(ec),"kid":"a"}]}"#)
            == [at + #"/etc/pushwarden/shop-jwks.json: keys[1] (kid "a"): duplicate kid"#])
        #expect(try diagnostics(#"{"keys":[{\#(ec),"d":"AAAA","kid":"priv"}]}"#) == [
            at + #"/etc/pushwarden/shop-jwks.json: no key usable with RS256, ES256"#,
        ])
        #expect(try diagnostics(#"{"keys":[{\#(ec)},{"kty":"EC","crv":"secp256k1","kid":"k1","x":"AA","y":"AA"}]}"#)
            == [at + #"warning: /etc/pushwarden/shop-jwks.json: keys[1] (kid "k1") skipped: EC curve secp256k1 is not P-256"#])
    }

    /// What `serve` reports for the same file: the same words after its own prefix.
    @Test func serveSaysTheSame() throws {
        let f = try Fixture.get()
        let jwks = #"{"keys":[{"kty":"RSA","kid":"e1","n":"\#(b64url(f.rsaModulus))","e":"AQ"}]}"#
        #expect(try diagnostics(jwks) == [
            #"p.yaml:7:18: apps.shop.session.jwks_file: /etc/pushwarden/shop-jwks.json: keys[0] (kid "e1"): RSA public exponent is not a small odd number above 1"#,
        ])
        let session = try #require(try PolicyLoader.load(text: Self.yaml, path: "p.yaml").get().apps[0].session.jwt)
        #expect(throws: SessionConfigError(#"session jwks_file /etc/pushwarden/shop-jwks.json: keys[0] (kid "e1"): RSA public exponent is not a small odd number above 1"#)) {
            try SessionVerifier(policy: session, secrets: StaticSecrets([:]), jwksLoader: { _ in Array(jwks.utf8) })
        }
    }
}
