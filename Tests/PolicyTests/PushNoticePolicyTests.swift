import Foundation
import Testing
@testable import PWPolicy

/// The `pushnotice` upstream block: defaults, every refusal with its exact diagnostic, and the
/// committed example policy.
@Suite struct PushNoticePolicyTests {
    /// A valid app whose single upstream is PushNotice; `keys` are its provider lines (8 spaces),
    /// starting at line 13.
    static func policy(_ keys: String) -> String {
        policyWithUpstream("pushnotice", name: "pn", platforms: "[android]", block: keys)
    }

    static func load(_ keys: String) -> Result<Policy, PolicyDiagnostics> {
        PolicyLoader.load(text: policy(keys), path: "t.yaml")
    }

    static func diagnostics(_ keys: String) -> [String] { loadDiagnostics(policy(keys)) }

    @Test func defaultsToThePublicHostWithoutGroups() throws {
        let policy = try Self.load("""
                    slug: ktso
                    api_key: {env: PUSHNOTICE_KEY}
            """).get()
        let upstream = try #require(policy.app("shop")?.upstreams.first)
        let config = PushNoticeConfig(baseURL: "https://app.rspush.com", slug: "ktso", apiKey: .env("PUSHNOTICE_KEY"), groups: [])
        #expect(upstream.provider == .pushNotice(config))
        #expect(config.subscribersURL == "https://app.rspush.com/api/v1/apps/ktso/subscribers")
        #expect(upstream.provider.settings.secrets == [SecretUse(.env("PUSHNOTICE_KEY"), "API key")])
    }

    @Test func readsEveryKey() throws {
        let policy = try Self.load("""
                    base_url: http://127.0.0.1:8099/
                    slug: my-app_2
                    api_key: {file: /run/secrets/pn}
                    groups: [Test, "Music Team"]
            """).get()
        let upstream = try #require(policy.app("shop")?.upstreams.first)
        #expect(upstream.provider == .pushNotice(PushNoticeConfig(baseURL: "http://127.0.0.1:8099", slug: "my-app_2",
                                                                  apiKey: .file("/run/secrets/pn"), groups: ["Test", "Music Team"])))
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("upstream 'pn': Authorization: Bearer <API key pnp_... from file:/run/secrets/pn>"))
        #expect(explained.contains("upstream 'pn': groups: Test, Music Team (from the policy)"))
        #expect(explained.contains("Hosts receiving data: 127.0.0.1:8099\n"))
    }

    @Test(arguments: [
        ("missing slug and key", """
                 groups: [Test]
         """, [
            "t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'slug'",
            "t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'api_key'",
         ]),
        ("slug with capitals", """
                 slug: KTSO
                 api_key: {env: K}
         """, ["t.yaml:13:15: apps.shop.upstreams[0].slug: slug must be 1 to 64 characters of a-z, 0-9, _ and - (it is part of the URL path)"]),
        ("slug with a slash", """
                 slug: ktso/../admin
                 api_key: {env: K}
         """, ["t.yaml:13:15: apps.shop.upstreams[0].slug: slug must be 1 to 64 characters of a-z, 0-9, _ and - (it is part of the URL path)"]),
        ("empty slug", """
                 slug: ""
                 api_key: {env: K}
         """, ["t.yaml:13:15: apps.shop.upstreams[0].slug: must not be empty"]),
        ("literal key", """
                 slug: ktso
                 api_key: pnp_live_abcdef0123456789
         """, ["t.yaml:14:18: apps.shop.upstreams[0].api_key: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}"]),
        ("key in the URL", """
                 base_url: https://app.rspush.com/?api_key=x
                 slug: ktso
                 api_key: {env: K}
         """, ["t.yaml:13:19: apps.shop.upstreams[0].base_url: a base path must not have a query (?) or fragment (#)"]),
        ("plain http off loopback", """
                 base_url: http://app.rspush.com
                 slug: ktso
                 api_key: {env: K}
         """, ["t.yaml:13:19: apps.shop.upstreams[0].base_url: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"]),
        ("groups not a list", """
                 slug: ktso
                 api_key: {env: K}
                 groups: Test
         """, ["t.yaml:15:17: apps.shop.upstreams[0].groups: expected a list, found a string"]),
        ("bad group names", """
                 slug: ktso
                 api_key: {env: K}
                 groups: [Test, "", {a: b}, Test, "tab\\there"]
         """, [
            "t.yaml:15:24: apps.shop.upstreams[0].groups[1]: must not be empty",
            "t.yaml:15:28: apps.shop.upstreams[0].groups[2]: expected a string, found a mapping",
            "t.yaml:15:36: apps.shop.upstreams[0].groups[3]: duplicate group 'Test'",
            "t.yaml:15:42: apps.shop.upstreams[0].groups[4]: a group name must not contain control characters",
         ]),
        ("long group name", """
                 slug: ktso
                 api_key: {env: K}
                 groups: [\(String(repeating: "g", count: 101))]
         """, ["t.yaml:15:18: apps.shop.upstreams[0].groups[0]: a group name must be at most 100 characters"]),
        ("unknown key", """
                 slug: ktso
                 api_key: {env: K}
                 x_api_key: {env: K}
         """, ["t.yaml:15:9: apps.shop.upstreams[0]: unknown key 'x_api_key'; allowed keys: name, provider, role, delivery, timeout, retry, queue, circuit, base_url, slug, api_key, groups"]),
    ])
    func refusesWithExactDiagnostics(_ name: String, _ keys: String, _ expected: [String]) {
        #expect(Self.diagnostics(keys) == expected, "\(name)")
    }

    @Test func committedPolicyLoads() throws {
        let path = packageRoot().appendingPathComponent("policies/pushnotice.yaml").path
        let result = PolicyLoader.load(path: path)
        if case .failure(let failure) = result { Issue.record("\(failure)") }
        let policy = try result.get()
        let app = try #require(policy.app("radio"))
        #expect(app.client.platforms == [.ios, .android])
        #expect(app.upstreams == [UpstreamPolicy(
            name: "pushnotice",
            provider: .pushNotice(PushNoticeConfig(baseURL: "https://app.rspush.com", slug: "ktso",
                                                   apiKey: .file("/run/secrets/pushnotice-api-key"), groups: ["Test"])),
            role: .primary, delivery: .sync, timeoutMillis: 2000,
            retry: RetryPolicy(attempts: 3, backoffMillis: 500, maxBackoffMillis: 2000))])
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("Hosts receiving data: app.rspush.com\n"))
        #expect(explained.contains("file:/run/secrets/pushnotice-api-key (upstream 'pushnotice' API key)"))
    }
}
