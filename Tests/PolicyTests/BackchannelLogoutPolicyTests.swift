import Foundation
import Testing
@testable import PWPolicy

/// `session.backchannel_logout` (OpenID Connect Back-Channel Logout): its keys, defaults, exact
/// diagnostics, and what `policy explain` says of it.
@Suite struct BackchannelLogoutPolicyTests {
    /// `minimalPolicy` with issuer and audience, and `logout` (indented six spaces) after them;
    /// `logout` starts on line 10.
    static func policy(_ logout: String, issuer: Bool = true, audience: Bool = true) -> String {
        var keys = "      algorithms: [HS256]\n      hmac_secret: {env: SHOP_SESSION_SECRET}\n"
        keys += issuer ? "      issuer: https://idp.example.com\n" : "      leeway: 30s\n"
        keys += audience ? "      audience: shop-app\n" : "      contact_claim: sub\n"
        return minimalPolicy.replacingFirst("      algorithms: [HS256]\n      hmac_secret: {env: SHOP_SESSION_SECRET}\n", with: keys + logout)
    }

    @Test func loadsWithDefaultsAndEveryKey() throws {
        let defaults = try PolicyLoader.load(text: Self.policy("      backchannel_logout: {}\n"), path: "t.yaml").get()
        #expect(defaults.apps[0].session.jwt?.backchannelLogout == BackchannelLogoutPolicy(sidClaim: "sid", scope: .session))
        let every = try PolicyLoader.load(text: Self.policy("      backchannel_logout: {sid_claim: session_state, scope: contact}\n"),
                                          path: "t.yaml").get()
        #expect(every.apps[0].session.jwt?.backchannelLogout == BackchannelLogoutPolicy(sidClaim: "session_state", scope: .contact))
        let none = try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get()
        #expect(none.apps[0].session.jwt?.backchannelLogout == nil)
    }

    static let bad: [Fixture] = [
        Fixture(name: "an unknown scope", yaml: policy("      backchannel_logout: {scope: everything}\n"), expected: [
            "t.yaml:10:35: apps.shop.session.backchannel_logout.scope: invalid value 'everything'; expected one of: session, contact",
        ]),
        Fixture(name: "an unknown key", yaml: policy("      backchannel_logout: {sid: sid}\n"), expected: [
            "t.yaml:10:28: apps.shop.session.backchannel_logout: unknown key 'sid'; allowed keys: sid_claim, scope",
        ]),
        Fixture(name: "no issuer, no audience", yaml: policy("      backchannel_logout: {}\n", issuer: false, audience: false), expected: [
            "t.yaml:10:27: apps.shop.session.backchannel_logout: backchannel_logout needs session.issuer: a logout token is accepted only from the session's issuer, for its audience",
            "t.yaml:10:27: apps.shop.session.backchannel_logout: backchannel_logout needs session.audience: a logout token is accepted only from the session's issuer, for its audience",
        ]),
        Fixture(name: "an introspected session", yaml: IntrospectionPolicyTests.policy(
            IntrospectionPolicyTests.url + IntrospectionPolicyTests.bearer + IntrospectionPolicyTests.contact + "      backchannel_logout: {}\n"), expected: [
            "t.yaml:9:7: apps.shop.session: unknown key 'backchannel_logout'; allowed keys: type, url, client_auth, header, cookie, contact_field, cache_ttl, timeout",
            "t.yaml:9:27: apps.shop.session.backchannel_logout: backchannel_logout needs a jwt session: logout tokens are verified with the session's own keys, which an introspected session has none of",
        ]),
    ]

    @Test(arguments: bad)
    func badBackchannelLogoutReportsExactDiagnostics(_ fixture: Fixture) {
        #expect(loadDiagnostics(fixture.yaml) == fixture.expected, "\(fixture.name)")
    }

    @Test func explainSaysWhatALogoutTokenMayDo() throws {
        let policy = try PolicyLoader.load(text: Self.policy("      backchannel_logout: {sid_claim: sid, scope: session}\n"), path: "t.yaml").get()
        let text = PolicyExplainer.explain(policy)
        #expect(text.contains("back-channel logout (OpenID Connect)"), "\(text)")
        #expect(text.contains("each registration keeps the session claim 'sid'"))
        #expect(text.contains("every installation registered under that session"))
        let html = PolicyExplainerHTML.render(policy)
        #expect(html.contains("back-channel logout:"))
        #expect(html.contains("removes the session&#39;s installations") || html.contains("removes the session's installations"), "\(html)")
        #expect(!PolicyExplainer.explain(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get()).contains("back-channel"))
    }
}
