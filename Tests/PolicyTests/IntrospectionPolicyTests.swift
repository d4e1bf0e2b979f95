import Foundation
import Testing
@testable import PWPolicy

/// `session.type: introspect` (docs/configuration.md, sessions): its keys, defaults and exact diagnostics.
@Suite struct IntrospectionPolicyTests {
    /// `minimalPolicy` with its session block replaced by `session` (keys indented six spaces);
    /// the session's keys start on line 6.
    static func policy(_ session: String) -> String {
        minimalPolicy.replacingFirst("""
              type: jwt
              algorithms: [HS256]
              hmac_secret: {env: SHOP_SESSION_SECRET}

        """, with: "      type: introspect\n" + session)
    }

    static let url = "      url: https://api.example.com/internal/introspect\n"
    static let bearer = "      client_auth: {bearer: {env: INTROSPECT_TOKEN}}\n"
    static let contact = "      contact_field: contact_id\n"

    @Test func loadsWithDocumentedDefaults() throws {
        let policy = try PolicyLoader.load(text: Self.policy(Self.url + Self.bearer + Self.contact), path: "t.yaml").get()
        #expect(policy.apps[0].session == .introspect(IntrospectionPolicy(
            url: "https://api.example.com/internal/introspect", clientAuth: .bearer(.env("INTROSPECT_TOKEN")),
            source: .header("Authorization"), contactField: "contact_id", cacheTTLSeconds: 60, timeoutMillis: 500)))
    }

    @Test func loadsEveryKey() throws {
        let text = Self.policy("""
              url: http://127.0.0.1:9000/introspect?realm=shop
              client_auth:
                basic: {user: pushwarden, password: {file: /run/secrets/introspect}}
              cookie: sid
              contact_field: uid
              cache_ttl: 5m
              timeout: 2s

        """)
        let policy = try PolicyLoader.load(text: text, path: "t.yaml").get()
        #expect(policy.apps[0].session == .introspect(IntrospectionPolicy(
            url: "http://127.0.0.1:9000/introspect?realm=shop", clientAuth: .basic(user: "pushwarden", password: .file("/run/secrets/introspect")),
            source: .cookie("sid"), contactField: "uid", cacheTTLSeconds: 300, timeoutMillis: 2000)))
    }

    @Test func exampleIntrospectPolicyLoads() throws {
        let path = packageRoot().appendingPathComponent("policies/introspect.yaml").path
        let app = try #require(try PolicyLoader.load(path: path).get().app("shop"))
        #expect(app.session == .introspect(IntrospectionPolicy(
            url: "https://api.example.com/internal/introspect", clientAuth: .bearer(.env("INTROSPECT_TOKEN")),
            source: .header("Authorization"), contactField: "contact_id", cacheTTLSeconds: 60, timeoutMillis: 500)))
    }

    static let bad: [Fixture] = [
        Fixture(name: "plain http to a public host", yaml: policy("      url: http://api.example.com/introspect\n" + bearer + contact), expected: [
            "t.yaml:6:12: apps.shop.session.url: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https",
        ]),
        Fixture(name: "no contact_field", yaml: policy(url + bearer), expected: [
            "t.yaml:5:7: apps.shop.session: missing required key 'contact_field'",
        ]),
        Fixture(name: "header and cookie", yaml: policy(url + bearer + contact + "      header: Authorization\n      cookie: sid\n"), expected: [
            "t.yaml:10:15: apps.shop.session.cookie: give header or cookie, not both: an introspected token is read from one place",
        ]),
        Fixture(name: "a JWT key", yaml: policy(url + bearer + contact + "      algorithms: [HS256]\n"), expected: [
            "t.yaml:9:7: apps.shop.session: unknown key 'algorithms'; allowed keys: type, url, client_auth, header, cookie, contact_field, cache_ttl, timeout",
        ]),
        Fixture(name: "an introspect key on a JWT session",
                yaml: minimalPolicy.replacingFirst("      algorithms: [HS256]\n", with: "      algorithms: [HS256]\n      contact_field: uid\n"), expected: [
            "t.yaml:7:7: apps.shop.session: unknown key 'contact_field'; allowed keys: type, header, cookie, algorithms, jwks_file, jwks_url, jwks_refresh, hmac_secret, issuer, audience, contact_claim, leeway, verified_cache, backchannel_logout",
        ]),
        Fixture(name: "no url and no client_auth", yaml: policy(contact), expected: [
            "t.yaml:5:7: apps.shop.session: missing required key 'url'",
            "t.yaml:5:7: apps.shop.session: missing required key 'client_auth'",
        ]),
        Fixture(name: "a literal credential", yaml: policy(url + "      client_auth: {bearer: s3cr3t-value}\n" + contact), expected: [
            "t.yaml:7:29: apps.shop.session.client_auth.bearer: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}",
        ]),
        Fixture(name: "bearer and basic",
                yaml: policy(url + "      client_auth: {bearer: {env: A}, basic: {user: u, password: {env: B}}}\n" + contact), expected: [
            "t.yaml:7:39: apps.shop.session.client_auth: give exactly one of bearer or basic",
        ]),
        Fixture(name: "an unknown client_auth", yaml: policy(url + "      client_auth: {mtls: {env: A}}\n" + contact), expected: [
            "t.yaml:7:21: apps.shop.session.client_auth: unknown key 'mtls'; allowed keys: bearer, basic",
        ]),
        Fixture(name: "a basic user with a colon",
                yaml: policy(url + "      client_auth: {basic: {user: 'a:b', password: {env: B}}}\n" + contact), expected: [
            "t.yaml:7:35: apps.shop.session.client_auth.basic.user: expected 1 to 128 visible ASCII characters without ':'",
        ]),
        Fixture(name: "cache_ttl in fractions of a second",
                yaml: policy(url + bearer + contact + "      cache_ttl: 1500ms\n"), expected: [
            "t.yaml:9:18: apps.shop.session.cache_ttl: must be a whole number of seconds",
        ]),
        Fixture(name: "cache_ttl over an hour", yaml: policy(url + bearer + contact + "      cache_ttl: 2h\n"), expected: [
            "t.yaml:9:18: apps.shop.session.cache_ttl: must be between 0s and 1h, found 2h",
        ]),
        Fixture(name: "timeout too short", yaml: policy(url + bearer + contact + "      timeout: 10ms\n"), expected: [
            "t.yaml:9:16: apps.shop.session.timeout: must be between 50ms and 10s, found 10ms",
        ]),
    ]

    @Test(arguments: bad)
    func badIntrospectionReportsExactDiagnostics(_ fixture: Fixture) {
        #expect(loadDiagnostics(fixture.yaml) == fixture.expected, "\(fixture.name)")
    }

    @Test func explainNamesHostAuthKindSecretNameAndTTL() throws {
        let text = Self.policy(Self.url + "      client_auth: {basic: {user: pushwarden, password: {env: INTROSPECT_PASSWORD}}}\n"
                               + Self.contact + "      cookie: sid\n      cache_ttl: 2m\n")
        let policy = try PolicyLoader.load(text: text, path: "t.yaml").get()
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("    - an opaque session token, read from cookie sid\n"))
        #expect(explained.contains("at https://api.example.com/internal/introspect (host api.example.com)"))
        #expect(explained.contains("HTTP Basic as user pushwarden, password from env:INTROSPECT_PASSWORD"))
        #expect(explained.contains("answers cached for 2m (never past their exp), refusals for 5s"))
        #expect(explained.contains("    - contact_id: from the introspection answer's 'contact_id'\n"))
        #expect(explained.contains("Hosts receiving data: api.example.com\n"))
        #expect(explained.contains("Secrets referenced (names only): env:INTROSPECT_PASSWORD (session introspection basic credential)\n"))
        let html = PolicyExplainerHTML.render(policy)
        #expect(html.contains("asks host api.example.com"))
        #expect(html.contains("session token: cookie sid"))
        #expect(html.contains("env:INTROSPECT_PASSWORD"))
        #expect(html.contains("keyed by a hash of the session token, up to 2m"))
    }
}
