import PWPolicy
import Testing

/// `client.max_installations` and `apps.<id>.inventory.expire_after` (contract section 8).
@Suite struct InventoryPolicyTests {
    static func policy(client: String = "", app: String = "") -> String {
        """
        version: 1
        apps:
          shop:
            session:
              type: jwt
              algorithms: [HS256]
              hmac_secret: {env: SHOP_SESSION_SECRET}
            client:
              platforms: [ios]
        \(client)
            upstreams:
              - name: up
                provider: dry_run
        \(app)
        """
    }

    @Test func capAndExpiryAreReadAndExplained() throws {
        let text = Self.policy(client: "      max_installations: 20", app: "    inventory:\n      expire_after: 270d")
        let policy = try PolicyLoader.load(text: text, path: "t.yaml").get()
        #expect(policy.apps[0].client.maxInstallations == 20)
        #expect(policy.apps[0].inventory.expireAfterMillis == 270 * 86_400_000)
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("at most 20 per contact"))
        #expect(explained.contains("not registered again for 270d is unregistered upstream and forgotten"))
    }

    @Test func withoutThemNothingIsCappedOrExpired() throws {
        let policy = try PolicyLoader.load(text: Self.policy(), path: "t.yaml").get()
        #expect(policy.apps[0].client.maxInstallations == nil)
        #expect(policy.apps[0].inventory.expireAfterMillis == nil)
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("no cap per contact"))
        #expect(explained.contains("installations never expire"))
    }

    @Test(arguments: [
        ("      max_installations: 0", "", "apps.shop.client.max_installations"),
        ("      max_installations: many", "", "apps.shop.client.max_installations"),
        ("", "    inventory:\n      expire_after: 500ms", "apps.shop.inventory.expire_after"),
        ("", "    inventory:\n      expire_after: soon", "apps.shop.inventory.expire_after"),
        ("", "    inventory:\n      keep: forever", "unknown key 'keep'"),
    ])
    func badValuesAreDiagnosed(client: String, app: String, path: String) {
        let diagnostics = loadDiagnostics(Self.policy(client: client, app: app))
        #expect(diagnostics.count == 1, "\(diagnostics)")
        #expect(diagnostics.first?.contains(path) == true, "\(diagnostics)")
    }
}
