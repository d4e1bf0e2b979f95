import Foundation
import Testing
@testable import PWPolicy

/// The `nativenotify` provider's policy keys: defaults, exact diagnostics, and the committed example.
@Suite struct NativeNotifyPolicyTests {
    /// `minimalPolicy` with its upstream replaced by a Native Notify block; `extra` lines follow
    /// `provider:` at the upstream's indentation (line 13 onwards).
    static func policy(_ extra: String) -> String {
        policyWithUpstream("nativenotify", block: extra)
    }

    static let required = """
                app_id: 4242
                app_token: {env: NN_APP_TOKEN}
        """

    static func load(_ text: String) -> [String] { loadDiagnostics(text) }

    @Test func defaults() throws {
        let upstream = try PolicyLoader.load(text: Self.policy(Self.required), path: "t.yaml").get().apps[0].upstreams[0]
        #expect(upstream.provider == .nativeNotify(NativeNotifyConfig(baseURL: "https://app.nativenotify.com", appID: 4242,
                                                                      appToken: .env("NN_APP_TOKEN"), environment: "production",
                                                                      framework: nil)))
        #expect(upstream.provider.kind == "nativenotify")
    }

    @Test func everyKey() throws {
        let text = Self.policy(Self.required + """

                base_url: http://127.0.0.1:9999/
                environment: staging
                framework: Unity (C#)
        """)
        let upstream = try PolicyLoader.load(text: text, path: "t.yaml").get().apps[0].upstreams[0]
        #expect(upstream.provider == .nativeNotify(NativeNotifyConfig(baseURL: "http://127.0.0.1:9999", appID: 4242,
                                                                      appToken: .env("NN_APP_TOKEN"), environment: "staging",
                                                                      framework: "Unity (C#)")))
    }

    @Test func missingRequiredKeys() {
        #expect(Self.load(Self.policy("        environment: production")) == [
            "t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'app_id'",
            "t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'app_token'",
        ])
    }

    @Test(arguments: [
        ("app_id: 0", "t.yaml:13:17: apps.shop.upstreams[0].app_id: must be between 1 and 999999999, found 0"),
        ("app_id: -5", "t.yaml:13:17: apps.shop.upstreams[0].app_id: must be between 1 and 999999999, found -5"),
        ("app_id: \"123\"", "t.yaml:13:17: apps.shop.upstreams[0].app_id: expected an integer, found a quoted string; write numbers without quotes"),
        ("app_id: abc", "t.yaml:13:17: apps.shop.upstreams[0].app_id: expected an integer, found a string"),
    ])
    func badAppID(_ line: String, _ expected: String) {
        #expect(Self.load(Self.policy("        \(line)\n        app_token: {env: NN_APP_TOKEN}")) == [expected])
    }

    @Test func literalTokenIsRefusedAndNotEchoed() {
        let diagnostics = Self.load(Self.policy("        app_id: 1\n        app_token: nn-live-0123456789abcdef"))
        #expect(diagnostics == [
            "t.yaml:14:20: apps.shop.upstreams[0].app_token: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}",
        ])
        #expect(!diagnostics.joined().contains("nn-live"))
    }

    @Test func badEnvironmentFrameworkAndKeys() {
        let text = Self.policy(Self.required + """

                environment: sandbox
                framework: \(String(repeating: "x", count: 61))
                api_key: {env: X}
        """)
        #expect(Self.load(text) == [
            "t.yaml:15:22: apps.shop.upstreams[0].environment: invalid value 'sandbox'; expected one of: production, staging, development",
            "t.yaml:16:20: apps.shop.upstreams[0].framework: must be at most 60 characters",
            "t.yaml:17:9: apps.shop.upstreams[0]: unknown key 'api_key'; allowed keys: name, provider, role, delivery, timeout, retry, queue, circuit, base_url, app_id, app_token, environment, framework",
        ])
    }

    @Test(arguments: ["http://10.1.2.3/", "http://app.nativenotify.com"])
    func plainHTTPOffLoopbackIsRefused(_ url: String) {
        #expect(Self.load(Self.policy(Self.required + "\n        base_url: \(url)")) == [
            "t.yaml:15:19: apps.shop.upstreams[0].base_url: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https",
        ])
    }

    @Test func committedPolicyLoadsAndExplainsItself() throws {
        let path = packageRoot().appendingPathComponent("policies/nativenotify.yaml").path
        let result = PolicyLoader.load(path: path)
        if case .failure(let failure) = result { Issue.record("\(failure)") }
        let policy = try result.get()
        let app = try #require(policy.app("notes"))
        #expect(app.client.platforms == [.ios, .android, .web])
        #expect(app.upstreams.map(\.provider) == [.nativeNotify(NativeNotifyConfig(
            baseURL: "https://app.nativenotify.com", appID: 123, appToken: .env("NATIVE_NOTIFY_APP_TOKEN"),
            environment: "production", framework: "PushWarden"))])
        let text = PolicyExplainer.explain(policy)
        #expect(text.contains("Hosts receiving data: app.nativenotify.com"))
        #expect(text.contains("env:NATIVE_NOTIFY_APP_TOKEN (upstream 'nativenotify' Native Notify appToken)"))
        #expect(text.contains("subscriberId: the session's contact"))
    }
}
