import Foundation
import Testing
@testable import PWPolicy

@Suite struct PolicyLoaderTests {
    @Test(arguments: badFixtures + moreBadFixtures)
    func badPolicyReportsExactDiagnostics(_ fixture: Fixture) {
        switch PolicyLoader.load(text: fixture.yaml, path: "t.yaml") {
        case .success:
            Issue.record("\(fixture.name): loaded, expected diagnostics")
        case .failure(let failure):
            #expect(failure.diagnostics.map(\.description) == fixture.expected, "\(fixture.name)")
        }
    }

    @Test func minimalPolicyLoadsWithDocumentedDefaults() throws {
        let policy = try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get()
        let app = try #require(policy.app("shop"))
        #expect(policy.version == 1)
        #expect(policy.sourcePath == "t.yaml")
        #expect(app.session == .jwt(SessionPolicy(header: "Authorization", cookie: nil, algorithms: [.hs256],
                                                  keys: .hmacSecret(.env("SHOP_SESSION_SECRET")), issuer: nil, audience: nil,
                                                  contactClaim: "sub", leewaySeconds: 30)))
        #expect(app.client == ClientPolicy(platforms: [.ios], contactID: .verify, unknownFields: .reject,
                                           maxBody: 16 * 1024, maxEvents: 100, rateLimits: [:]))
        #expect(app.dedupe == DedupePolicy(refreshAfterSeconds: 7 * 86_400))
        #expect(app.upstreams == [UpstreamPolicy(name: "up", provider: .dryRun(DryRunConfig(emulates: .voyado)),
                                                 role: .primary, delivery: .sync, timeoutMillis: 2000,
                                                 retry: RetryPolicy(attempts: 3, backoffMillis: 200, maxBackoffMillis: 2000))])
    }

    /// A dry run emulating each provider takes that provider's policy-only settings, with defaults.
    @Test(arguments: [
        ("voyado", "", DryRunConfig(emulates: .voyado), true),
        ("voidhash", "", DryRunConfig(emulates: .voidhash, iosBundleID: "dev.pushwarden.dryrun", androidPackageName: "dev.pushwarden.dryrun"), false),
        ("voidhash", "        ios_bundle_id: com.example.app\n", DryRunConfig(emulates: .voidhash, iosBundleID: "com.example.app"), false),
        ("fluxer", "", DryRunConfig(emulates: .fluxer, sessionHeader: "X-Fluxer-Session"), false),
        ("fluxer", "        session_header: X-Session\n", DryRunConfig(emulates: .fluxer, sessionHeader: "X-Session"), false),
        ("nativenotify", "", DryRunConfig(emulates: .nativeNotify), false),
        ("pushnotice", "", DryRunConfig(emulates: .pushNotice, slug: "dry-run"), false),
        ("pushnotice", "        slug: shop\n", DryRunConfig(emulates: .pushNotice, slug: "shop"), false),
    ])
    func dryRunEmulatesEachProvider(_ emulates: String, _ keys: String, _ expected: DryRunConfig, _ takesEvents: Bool) throws {
        let text = minimalPolicy + "        emulates: \(emulates)\n" + keys
        let provider = try PolicyLoader.load(text: text, path: "t.yaml").get().apps[0].upstreams[0].provider
        #expect(provider == .dryRun(expected))
        #expect(provider.traits.takesEvents == takesEvents)
        #expect(provider.settings.endpoint == nil)
        #expect(provider.settings.secrets.isEmpty)
    }

    @Test func cookieOnlySessionHasNoHeader() throws {
        let text = minimalPolicy.replacingFirst("      type: jwt", with: "      type: jwt\n      cookie: sid")
        let session = try #require(try PolicyLoader.load(text: text, path: "t.yaml").get().apps[0].session.jwt)
        #expect(session.header == nil)
        #expect(session.cookie == "sid")
    }

    @Test(arguments: [
        ("http://127.0.0.1:8080/api/", "http://127.0.0.1:8080/api"),
        ("http://127.3.4.5/x", "http://127.3.4.5/x"),
        ("http://localhost:9000", "http://localhost:9000"),
        ("http://[::1]:9000/v1//", "http://[::1]:9000/v1"),
        ("HTTPS://Push.Example.com/api/v1/acme/", "HTTPS://Push.Example.com/api/v1/acme"),
    ])
    func acceptedUpstreamURLs(_ url: String, _ stored: String) throws {
        let text = minimalPolicy.replacingFirst("provider: dry_run", with: """
        provider: voyado
                base_path: \(url)
                api_key: {file: /run/secrets/voyado}
        """)
        let upstream = try PolicyLoader.load(text: text, path: "t.yaml").get().apps[0].upstreams[0]
        #expect(upstream.provider == .voyado(VoyadoConfig(basePath: stored, apiKey: .file("/run/secrets/voyado"))))
    }

    @Test(arguments: ["http://128.0.0.1/api", "http://localhost.example.com/", "http://[::2]/", "ftp://127.0.0.1/", "http://10.0.0.1/"])
    func refusedUpstreamURLs(_ url: String) {
        let text = minimalPolicy.replacingFirst("provider: dry_run", with: """
        provider: voyado
                base_path: \(url)
                api_key: {env: K}
        """)
        guard case .failure(let failure) = PolicyLoader.load(text: text, path: "t.yaml") else {
            Issue.record("\(url) accepted")
            return
        }
        #expect(failure.diagnostics.count == 1)
        #expect(failure.diagnostics.first?.path == "apps.shop.upstreams[0].base_path")
    }

    @Test func missingFileIsOneDiagnostic() {
        guard case .failure(let failure) = PolicyLoader.load(path: "/nonexistent/policy.yaml") else {
            Issue.record("loaded a missing file")
            return
        }
        #expect(failure.description == "/nonexistent/policy.yaml:1:1: cannot read the policy file: No such file or directory")
    }

    @Test func diagnosticDescriptionOmitsEmptyPath() {
        #expect(Diagnostic(file: "p.yaml", line: 3, column: 7, path: "", message: "m").description == "p.yaml:3:7: m")
        #expect(Diagnostic(file: "p.yaml", line: 3, column: 7, path: "apps.a", message: "m").description == "p.yaml:3:7: apps.a: m")
    }
}
