import Foundation
import Testing
@testable import PWPolicy

/// The `voidhash` upstream block: defaults, every key's refusals with exact diagnostics, and the
/// committed example policy.
@Suite struct VoidhashPolicyTests {
    /// A policy whose only upstream is Voidhash with `lines` as its keys (from line 13 on).
    static func policy(_ lines: [String]) -> String {
        policyWithUpstream("voidhash", platforms: "[ios, android]", block: lines.map { "        " + $0 }.joined(separator: "\n"))
    }

    static func diagnostics(_ lines: [String]) -> [String] { loadDiagnostics(policy(lines)) }

    @Test func minimalBlockTakesTheDocumentedDefaults() throws {
        let loaded = try PolicyLoader.load(text: Self.policy([
            "publishable_key: {env: VH_KEY}", "ios_bundle_id: com.example.app", "sdk_version: 1.2.3",
        ]), path: "t.yaml").get()
        let upstream = try #require(loaded.apps.first?.upstreams.first)
        #expect(upstream.provider == .voidhash(VoidhashConfig(
            baseURL: "https://api.voidhash.com", publishableKey: .env("VH_KEY"), iosBundleID: "com.example.app",
            androidPackageName: nil, sdk: .native, sdkVersion: "1.2.3", debugBuild: false, observerMode: false)))
        #expect(upstream.provider.settings.secrets == [SecretUse(.env("VH_KEY"), "publishable key")])
        #expect(upstream.provider.settings.endpoint == "https://api.voidhash.com")
    }

    @Test func everyKeyIsRead() throws {
        let loaded = try PolicyLoader.load(text: Self.policy([
            "base_url: http://127.0.0.1:9000/", "publishable_key: {file: /run/secrets/vh}", "ios_bundle_id: com.example.app",
            "android_package_name: com.example.app_android", "sdk: react-native", "sdk_version: 0.0.1-alpha.1",
            "debug_build: true", "observer_mode: true",
        ]), path: "t.yaml").get()
        #expect(loaded.apps[0].upstreams[0].provider == .voidhash(VoidhashConfig(
            baseURL: "http://127.0.0.1:9000", publishableKey: .file("/run/secrets/vh"), iosBundleID: "com.example.app",
            androidPackageName: "com.example.app_android", sdk: .reactNative, sdkVersion: "0.0.1-alpha.1",
            debugBuild: true, observerMode: true)))
    }

    @Test(arguments: [
        (["ios_bundle_id: com.example.app", "sdk_version: 1"],
         ["t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'publishable_key'"]),
        (["publishable_key: vh_pk_live_123", "ios_bundle_id: com.example.app", "sdk_version: 1"],
         ["t.yaml:13:26: apps.shop.upstreams[0].publishable_key: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}"]),
        (["publishable_key: {env: K}", "sdk_version: 1"],
         ["t.yaml:11:9: apps.shop.upstreams[0]: give ios_bundle_id, android_package_name or both: Voidhash serves only the platforms named"]),
        (["publishable_key: {env: K}", "ios_bundle_id: com.example app", "android_package_name: \"com/x\"", "sdk_version: 1"],
         ["t.yaml:14:24: apps.shop.upstreams[0].ios_bundle_id: expected a bundle id or package name like com.example.app (letters, digits, '.', '-' and '_', at most 255)",
          "t.yaml:15:31: apps.shop.upstreams[0].android_package_name: expected a bundle id or package name like com.example.app (letters, digits, '.', '-' and '_', at most 255)"]),
        (["publishable_key: {env: K}", "ios_bundle_id: a.b"],
         ["t.yaml:11:9: apps.shop.upstreams[0]: missing required key 'sdk_version'"]),
        (["publishable_key: {env: K}", "ios_bundle_id: a.b", "sdk_version: 1.0 beta"],
         ["t.yaml:15:22: apps.shop.upstreams[0].sdk_version: expected a version like 0.0.1-alpha.1 (visible ASCII without spaces, at most 64)"]),
        (["publishable_key: {env: K}", "ios_bundle_id: a.b", "sdk_version: 1", "sdk: flutter"],
         ["t.yaml:16:14: apps.shop.upstreams[0].sdk: invalid value 'flutter'; expected one of: native, react-native"]),
        (["publishable_key: {env: K}", "ios_bundle_id: a.b", "sdk_version: 1", "debug_build: yes", "observer_mode: \"false\""],
         ["t.yaml:16:22: apps.shop.upstreams[0].debug_build: expected true or false, found a string",
          "t.yaml:17:24: apps.shop.upstreams[0].observer_mode: expected true or false, found a string"]),
        (["base_url: http://api.voidhash.com", "publishable_key: {env: K}", "ios_bundle_id: a.b", "sdk_version: 1"],
         ["t.yaml:13:19: apps.shop.upstreams[0].base_url: plain http is allowed only to a loopback host (127.0.0.0/8, ::1, localhost); use https"]),
        (["publishable_key: {env: K}", "ios_bundle_id: a.b", "sdk_version: 1", "api_key: {env: K}"],
         ["t.yaml:16:9: apps.shop.upstreams[0]: unknown key 'api_key'; allowed keys: name, provider, role, delivery, timeout, retry, queue, circuit, base_url, publishable_key, ios_bundle_id, android_package_name, sdk, sdk_version, debug_build, observer_mode"]),
    ])
    func badValuesAreReportedExactly(_ lines: [String], _ expected: [String]) {
        #expect(Self.diagnostics(lines) == expected)
    }

    @Test func examplePolicyLoads() throws {
        let path = packageRoot().appendingPathComponent("policies/voidhash.yaml").path
        let result = PolicyLoader.load(path: path)
        if case .failure(let failure) = result { Issue.record("\(failure)") }
        let app = try #require(try result.get().app("notes"))
        #expect(app.upstreams.map(\.provider) == [.voidhash(VoidhashConfig(
            baseURL: "https://api.voidhash.com", publishableKey: .env("VOIDHASH_PUBLISHABLE_KEY"), iosBundleID: "com.example.notes",
            androidPackageName: "com.example.notes.android", sdk: .native, sdkVersion: "0.0.1-alpha.1"))])
        let explained = PolicyExplainer.explain(try result.get())
        #expect(explained.contains("env:VOIDHASH_PUBLISHABLE_KEY"))
        #expect(explained.contains("api.voidhash.com"))
    }
}
