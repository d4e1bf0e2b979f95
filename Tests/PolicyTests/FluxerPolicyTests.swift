import Foundation
import Testing
@testable import PWPolicy

/// The `fluxer` upstream block: its keys, defaults, exact diagnostics, and the committed example.
@Suite struct FluxerPolicyTests {
    /// `minimalPolicy` with its upstream turned into a Fluxer one; `keys` are the lines after
    /// `provider: fluxer` (line 12), so the first of them is on line 13, values at column 9.
    static func policy(_ keys: String) -> String {
        policyWithUpstream("fluxer", block: keys.split(separator: "\n", omittingEmptySubsequences: false)
            .map { "        " + $0 }.joined(separator: "\n"))
    }

    static func diagnostics(_ yaml: String) -> [String] { loadDiagnostics(yaml) }

    static func config(_ yaml: String) throws -> FluxerConfig {
        let policy = try PolicyLoader.load(text: yaml, path: "t.yaml").get()
        guard case .fluxer(let config) = try #require(policy.apps.first?.upstreams.first).provider else {
            Issue.record("not a fluxer upstream")
            throw CancellationError()
        }
        return config
    }

    @Test func defaults() throws {
        let config = try Self.config(Self.policy("base_url: https://api.fluxer.app/\nsession_header: X-Fluxer-Session"))
        #expect(config == FluxerConfig(baseURL: "https://api.fluxer.app", sessionHeader: "X-Fluxer-Session",
                                       forwardHeader: "Authorization", appID: "stable", providerEnvironment: nil))
        #expect(config.secrets.isEmpty)
    }

    @Test func everyKey() throws {
        let config = try Self.config(Self.policy("""
            base_url: http://127.0.0.1:8080/fluxer
            session_header: X-Chat-Session
            forward_header: X-Fluxer-Auth
            app_id: canary
            provider_environment: development
            """))
        #expect(config == FluxerConfig(baseURL: "http://127.0.0.1:8080/fluxer", sessionHeader: "X-Chat-Session",
                                       forwardHeader: "X-Fluxer-Auth", appID: "canary", providerEnvironment: "development"))
    }

    @Test(arguments: [
        ("missing keys", "", [
            "t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'base_url'",
            "t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'session_header'",
        ]),
        ("http to a public host", "base_url: http://api.fluxer.app\nsession_header: X-Fluxer-Session", [
            "t.yaml:13:19: apps.shop.upstreams[0].base_url: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https",
        ]),
        ("the app's own session header", "base_url: https://api.fluxer.app\nsession_header: authorization", [
            "t.yaml:14:25: apps.shop.upstreams[0].session_header: the Fluxer session cannot be read from Authorization: it carries the app's own session or request framing; name a header of its own, such as X-Fluxer-Session",
        ]),
        ("cookie as session header", "base_url: https://api.fluxer.app\nsession_header: Cookie", [
            "t.yaml:14:25: apps.shop.upstreams[0].session_header: the Fluxer session cannot be read from Cookie: it carries the app's own session or request framing; name a header of its own, such as X-Fluxer-Session",
        ]),
        ("not a header name", "base_url: https://api.fluxer.app\nsession_header: X Fluxer", [
            "t.yaml:14:25: apps.shop.upstreams[0].session_header: expected an HTTP header name (letters, digits and -)",
        ]),
        ("forwarded as a framing header", "base_url: https://api.fluxer.app\nsession_header: X-Fluxer-Session\nforward_header: Content-Type", [
            "t.yaml:15:25: apps.shop.upstreams[0].forward_header: the Fluxer session cannot be forwarded as Content-Type: PushWarden sets that header itself",
        ]),
        ("bad app id", "base_url: https://api.fluxer.app\nsession_header: X-Fluxer-Session\napp_id: Stable Build", [
            "t.yaml:15:17: apps.shop.upstreams[0].app_id: app_id must be 1 to 64 characters of a-z, 0-9, _ and - (such as stable, beta or canary)",
        ]),
        ("APNs name for the environment", "base_url: https://api.fluxer.app\nsession_header: X-Fluxer-Session\nprovider_environment: sandbox", [
            "t.yaml:15:31: apps.shop.upstreams[0].provider_environment: invalid value 'sandbox'; expected one of: production, development",
        ]),
        ("a bot token is not a Fluxer key", "base_url: https://api.fluxer.app\nsession_header: X-Fluxer-Session\nbot_token: Bot MTIzNDU2Nzg5.secret", [
            "t.yaml:15:9: apps.shop.upstreams[0]: unknown key 'bot_token'; allowed keys: name, provider, role, delivery, timeout, retry, queue, circuit, base_url, session_header, forward_header, app_id, provider_environment",
        ]),
        ("a secret reference is not a Fluxer key", "base_url: https://api.fluxer.app\nsession_header: X-Fluxer-Session\napi_key: {env: FLUXER_KEY}", [
            "t.yaml:15:9: apps.shop.upstreams[0]: unknown key 'api_key'; allowed keys: name, provider, role, delivery, timeout, retry, queue, circuit, base_url, session_header, forward_header, app_id, provider_environment",
        ]),
    ])
    func badValuesReportExactDiagnostics(_ name: String, _ keys: String, _ expected: [String]) {
        let found = Self.diagnostics(Self.policy(keys))
        #expect(found == expected, "\(name)")
        #expect(!found.joined().contains("MTIzNDU2Nzg5"), "a credential is never echoed")
    }

    @Test func committedPolicyLoadsAndExplainsTheForwardedSession() throws {
        let path = packageRoot().appendingPathComponent("policies/fluxer.yaml").path
        let result = PolicyLoader.load(path: path)
        if case .failure(let failure) = result { Issue.record("\(failure)") }
        let policy = try result.get()
        let app = try #require(policy.app("chat"))
        #expect(app.upstreams == [UpstreamPolicy(
            name: "fluxer",
            provider: .fluxer(FluxerConfig(baseURL: "https://api.fluxer.app", sessionHeader: "X-Fluxer-Session",
                                           forwardHeader: "Authorization", appID: "stable", providerEnvironment: nil)),
            role: .primary, delivery: .sync, timeoutMillis: 2000,
            retry: RetryPolicy(attempts: 3, backoffMillis: 200, maxBackoffMillis: 2000))])
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("upstream 'fluxer': Authorization: the user's own Fluxer session, forwarded verbatim from the client's X-Fluxer-Session header"))
        #expect(explained.contains("upstream 'fluxer': app_id: stable\n"))
        #expect(explained.contains("provider_environment on ios_apns / ios_apns_voip: from the client's environment (sandbox → development, production → production)"))
        #expect(explained.contains("'fluxer': Fluxer mobile devices at https://api.fluxer.app (host api.fluxer.app)"))
        #expect(explained.contains("Hosts receiving data: api.fluxer.app\n"))
        #expect(explained.contains("Secrets referenced (names only): none\n"))
    }
}
