import Foundation
import Testing
@testable import PWPolicy

/// The package root, found from this file's own path (Tests/PolicyTests/<file>).
func packageRoot(_ file: String = #filePath) -> URL {
    URL(fileURLWithPath: file).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

@Suite struct ExamplePolicyTests {
    @Test func examplePolicyLoadsAndMapsToTheModel() throws {
        let path = packageRoot().appendingPathComponent("policies/example.yaml").path
        let result = PolicyLoader.load(path: path)
        if case .failure(let failure) = result { Issue.record("\(failure)") }
        let policy = try result.get()
        #expect(policy.apps.map(\.id) == ["demo"])
        let app = try #require(policy.app("demo"))
        #expect(app.session == .jwt(SessionPolicy(header: "Authorization", cookie: nil, algorithms: [.hs256],
                                                  keys: .hmacSecret(.env("PUSHWARDEN_DEMO_SESSION_SECRET")),
                                                  issuer: "pushwarden-demo", audience: "demo-app", contactClaim: "sub",
                                                  leewaySeconds: 30)))
        #expect(app.client == ClientPolicy(platforms: [.ios, .android, .web], contactID: .verify, unknownFields: .reject,
                                           maxBody: 16 * 1024, maxEvents: 100, rateLimits: [
                                               "register": .init(requests: 20, perSeconds: 60),
                                               "unregister": .init(requests: 40, perSeconds: 60),
                                               "events": .init(requests: 120, perSeconds: 60),
                                           ], maxInstallations: 20))
        #expect(app.dedupe.refreshAfterSeconds == 7 * 86_400)
        #expect(app.inventory.expireAfterMillis == 270 * 86_400_000)
        #expect(app.upstreams == [UpstreamPolicy(name: "voyado", provider: .dryRun(DryRunConfig(emulates: .voyado)),
                                                 role: .primary, delivery: .sync, timeoutMillis: 2000,
                                                 retry: RetryPolicy(attempts: 3, backoffMillis: 200, maxBackoffMillis: 2000))])
        #expect(app.primary?.name == "voyado")
    }

    @Test func voyadoPolicyLoadsAndMapsToTheModel() throws {
        let path = packageRoot().appendingPathComponent("policies/voyado.yaml").path
        let result = PolicyLoader.load(path: path)
        if case .failure(let failure) = result { Issue.record("\(failure)") }
        let app = try #require(try result.get().app("shop"))
        #expect(app.session == .jwt(SessionPolicy(header: "Authorization", cookie: "session", algorithms: [.es256],
                                                  keys: .jwksFile("/etc/pushwarden/shop-jwks.json"),
                                                  issuer: "https://auth.example.com", audience: "shop-app",
                                                  contactClaim: "contact_id", leewaySeconds: 30)))
        #expect(app.client.platforms == [.ios, .android])
        #expect(app.client.contactID == .reject)
        #expect(app.upstreams == [UpstreamPolicy(
            name: "voyado",
            provider: .voyado(VoyadoConfig(basePath: "https://app-push-prod.voyado.com/api/v1/acme/abc123/default",
                                           apiKey: .env("VOYADO_API_KEY"))),
            role: .primary, delivery: .sync, timeoutMillis: 2000,
            retry: RetryPolicy(attempts: 3, backoffMillis: 200, maxBackoffMillis: 2000))])
    }

    @Test func everyCommittedPolicyIsValid() throws {
        let dir = packageRoot().appendingPathComponent("policies")
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".yaml") }
        #expect(files.count >= 2)
        for file in files {
            let result = PolicyLoader.load(path: dir.appendingPathComponent(file).path)
            if case .failure(let failure) = result { Issue.record("\(file):\n\(failure)") }
        }
    }
}

@Suite struct PolicyExplainerTests {
    @Test func namesSecretSourcesAndHostsButNoValues() throws {
        // The explainer is given the policy only, never a secret resolver, so it cannot print a
        // value. The environment is not set here: `setenv` while another test's `Process.run()`
        // copies the environment crashed the test process (environ reallocated under it).
        let secretValue = "s3cr3t-session-value-that-must-not-leak"
        for name in ["voyado.yaml", "example.yaml"] {
            let policy = try PolicyLoader.load(path: packageRoot().appendingPathComponent("policies/\(name)").path).get()
            let text = PolicyExplainer.explain(policy)
            #expect(!text.contains(secretValue))
            if name == "voyado.yaml" {
                #expect(text.contains("env:VOYADO_API_KEY"))
                #expect(text.contains("Hosts receiving data: app-push-prod.voyado.com"))
                #expect(text.contains("claim 'contact_id'"))
                #expect(text.contains("cookie session when the header is absent"))
                #expect(text.contains("ES256"))
                #expect(text.contains("/etc/pushwarden/shop-jwks.json"))
                #expect(text.contains("contact_id: refused outright"))
            } else {
                #expect(text.contains("env:PUSHWARDEN_DEMO_SESSION_SECRET"))
                #expect(text.contains("Hosts receiving data: none (dry run only)"))
                #expect(text.contains("issuer (iss): must be pushwarden-demo"))
                #expect(text.contains("rate limits per contact: events 120/min, register 20/min, unregister 40/min"))
            }
        }
    }

    @Test func listsEveryUpstreamHostOnce() throws {
        let text = minimalPolicy.replacingFirst("""
              - name: up
                provider: dry_run
        """, with: """
              - name: a
                provider: voyado
                role: primary
                base_path: https://one.example.com/api
                api_key: {file: /run/secrets/a}
              - name: b
                provider: voyado
                role: shadow
                base_path: http://127.0.0.1:8080
                api_key: {env: B_KEY}
              - name: c
                provider: voyado
                role: shadow
                base_path: https://one.example.com/other
                api_key: {env: C_KEY}
        """)
        let policy = try PolicyLoader.load(text: text, path: "t.yaml").get()
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("Hosts receiving data: one.example.com, 127.0.0.1:8080\n"))
        #expect(explained.contains("file:/run/secrets/a (upstream 'a' API key)"))
        #expect(explained.contains("env:B_KEY (upstream 'b' API key)"))
        #expect(explained.contains("env:SHOP_SESSION_SECRET (session HMAC secret)"))
    }
}
