import Testing
@testable import PWPolicy

/// The policy's top-level `admin` block: who may call the server-to-server API (contract section 8).
@Suite struct AdminPolicyTests {
    static let withAdmin = minimalPolicy.replacingFirst("version: 1\n", with: "version: 1\nadmin:\n  token: {env: PUSHWARDEN_ADMIN_TOKEN}\n")

    @Test func theAdminBlockNamesTheTokenAndWhereItSits() throws {
        let policy = try PolicyLoader.load(text: Self.withAdmin, path: "t.yaml").get()
        #expect(policy.admin == AdminPolicy(token: .env("PUSHWARDEN_ADMIN_TOKEN")))
        // Where a token refused when it is read (too short) is reported.
        #expect(policy.diagnostic(at: "admin.token", "x").description == "t.yaml:3:10: admin.token: x")
        let file = try PolicyLoader.load(text: Self.withAdmin.replacingFirst("{env: PUSHWARDEN_ADMIN_TOKEN}", with: "{file: /run/secrets/admin}"),
                                         path: "t.yaml").get()
        #expect(file.admin == AdminPolicy(token: .file("/run/secrets/admin")))
    }

    @Test func withoutTheBlockThereIsNoAdminAPI() throws {
        #expect(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get().admin == nil)
    }

    @Test(arguments: [
        ("a literal token", "admin:\n  token: 0123456789abcdef0123456789abcdef\n",
         ["t.yaml:3:10: admin.token: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}"]),
        ("no token", "admin: {}\n", ["t.yaml:2:8: admin: missing required key 'token'"]),
        ("an unknown key", "admin:\n  token: {env: A}\n  tokens: {env: B}\n",
         ["t.yaml:4:3: admin: unknown key 'tokens'; allowed keys: token"]),
        ("not a mapping", "admin: yes\n", ["t.yaml:2:8: admin: expected a mapping, found a string"]),
        ("a relative file", "admin:\n  token: {file: admin.token}\n", ["t.yaml:3:17: admin.token.file: expected an absolute path (starting with /)"]),
        ("a bad variable name", "admin:\n  token: {env: 1ADMIN}\n",
         ["t.yaml:3:16: admin.token.env: expected an environment variable name (letters, digits and _, not starting with a digit)"]),
    ])
    func badAdminBlocksReportExactDiagnostics(_ name: String, _ block: String, _ expected: [String]) {
        let text = minimalPolicy.replacingFirst("version: 1\n", with: "version: 1\n" + block)
        #expect(loadDiagnostics(text) == expected, "\(name)")
    }

    @Test func aTokenMustBeLongEnoughAndVisibleASCII() {
        let admin = AdminPolicy(token: .env("ADMIN"))
        #expect(AdminPolicy.minimumTokenBytes == 32)
        #expect(admin.problem(with: Array(String(repeating: "a", count: 32).utf8)) == nil)
        #expect(admin.problem(with: Array("!~".utf8) + Array(String(repeating: "Z", count: 62).utf8)) == nil)
        #expect(admin.problem(with: Array(String(repeating: "a", count: 31).utf8))
            == "the admin token from env:ADMIN is 31 bytes; at least 32 are required (openssl rand -hex 32 makes one)")
        #expect(admin.problem(with: []) == "the admin token from env:ADMIN is 0 bytes; at least 32 are required (openssl rand -hex 32 makes one)")
        for bad in [" ", "\t", "\u{7F}", "é", "\n"] {
            let value = Array((String(repeating: "a", count: 32) + bad).utf8)
            #expect(admin.problem(with: value) == "the admin token from env:ADMIN must be visible ASCII without spaces (openssl rand -hex 32 makes one)",
                    "\(bad.unicodeScalars.map(\.value))")
        }
    }

    @Test func explainSaysWhoMayCallTheServerToServerAPI() throws {
        let text = PolicyExplainer.explain(try PolicyLoader.load(text: Self.withAdmin, path: "t.yaml").get())
        #expect(text.contains("\nServer-to-server API: enabled, on the admin listener only (the client listener answers 404 there)\n"))
        #expect(text.contains("  - who may call: the bearer of an admin token (Authorization: Bearer <token>; "
                              + "compared in constant time; at least 32 bytes; no two tokens alike)\n"))
        #expect(text.contains("  - the operator's admin token from env:PUSHWARDEN_ADMIN_TOKEN (admin.token) reaches every app\n"))
        #expect(text.contains("  - app 'shop': the operator's token only\n"))
        #expect(text.contains("  - GET and DELETE /v1/apps/{app}/contacts/{contact}/installations: list a contact's installations"))
        #expect(text.contains("  - GET /v1/apps/{app}/coverage and GET /v1/apps/{app}/installations: how many installations each upstream holds; "
                              + "every installation of the app in pages, each with its contact id in clear"))
        #expect(text.contains("  - secret referenced (name only): env:PUSHWARDEN_ADMIN_TOKEN (admin token)\n"))
        #expect(text.contains("\n  Server-to-server API: the operator's token only\n"))

        let without = PolicyExplainer.explain(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get())
        #expect(without.contains("\nServer-to-server API: disabled (no admin token in the policy); GET and DELETE "
                                 + "/v1/apps/{app}/contacts/{contact}/installations and POST /v1/apps/{app}/tokens/dead answer 404 on both listeners\n"))
        #expect(!without.contains("admin token from"))
        #expect(!without.contains("  Server-to-server API:"))
    }

    @Test func theHTMLPageSaysItToo() throws {
        let html = PolicyExplainerHTML.render(try PolicyLoader.load(text: Self.withAdmin, path: "t.yaml").get())
        #expect(html.contains("<p class=\"s2s\">Server-to-server API: <strong>enabled</strong> on the admin listener only, for the bearer of the "
                              + "operator's admin token from <code class=\"k secret\">env:PUSHWARDEN_ADMIN_TOKEN</code> (every app): "))
        #expect(!html.contains("<ul class=\"s2s\">"))
        let without = PolicyExplainerHTML.render(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get())
        #expect(without.contains("Server-to-server API: <strong>disabled</strong>"))
    }

    // MARK: An app's own token

    /// `minimalPolicy` with a second app, `blog`, and `apps.<id>.admin` blocks as given.
    static func tenants(operatorToken: Bool, shop: String?, blog: String?) -> String {
        var text = minimalPolicy
        if let shop { text += "    admin:\n      token: \(shop)\n" }
        text += "  blog:\n    session:\n      type: jwt\n      algorithms: [HS256]\n      hmac_secret: {env: BLOG_SESSION_SECRET}\n"
            + "    client:\n      platforms: [ios]\n    upstreams:\n      - name: up\n        provider: dry_run\n"
        if let blog { text += "    admin:\n      token: \(blog)\n" }
        return operatorToken ? text.replacingFirst("version: 1\n", with: "version: 1\nadmin:\n  token: {env: PUSHWARDEN_ADMIN_TOKEN}\n") : text
    }

    @Test func anAppNamesItsOwnTokenAndWhereItSits() throws {
        let policy = try PolicyLoader.load(text: Self.tenants(operatorToken: false, shop: "{env: SHOP_ADMIN_TOKEN}", blog: "{file: /run/secrets/blog}"),
                                           path: "t.yaml").get()
        #expect(policy.admin == nil)
        #expect(policy.app("shop")?.admin == AdminPolicy(token: .env("SHOP_ADMIN_TOKEN")))
        #expect(policy.app("blog")?.admin == AdminPolicy(token: .file("/run/secrets/blog")))
        #expect(policy.diagnostic(at: "apps.shop.admin.token", "x").description == "t.yaml:14:14: apps.shop.admin.token: x")
        #expect(policy.diagnostic(at: "apps.blog.admin.token", "x").description == "t.yaml:26:14: apps.blog.admin.token: x")
        #expect(try PolicyLoader.load(text: Self.tenants(operatorToken: true, shop: nil, blog: nil), path: "t.yaml").get().apps.allSatisfy { $0.admin == nil })
    }

    @Test(arguments: [
        ("a literal token", "0123456789abcdef0123456789abcdef",
         ["t.yaml:16:14: apps.shop.admin.token: a secret must never be written into the policy file; use {env: NAME} or {file: /absolute/path}"]),
        ("an unknown key", "{env: A}\n      tokens: {env: B}",
         ["t.yaml:17:7: apps.shop.admin: unknown key 'tokens'; allowed keys: token"]),
        ("a relative file", "{file: admin.token}", ["t.yaml:16:21: apps.shop.admin.token.file: expected an absolute path (starting with /)"]),
    ])
    func badAppTokensReportExactDiagnostics(_ name: String, _ token: String, _ expected: [String]) {
        #expect(loadDiagnostics(Self.tenants(operatorToken: true, shop: token, blog: nil)) == expected, "\(name)")
    }

    @Test func anAppAdminBlockMustBeAMappingWithAToken() {
        let base = Self.tenants(operatorToken: false, shop: nil, blog: nil)
        #expect(loadDiagnostics(base.replacingFirst("  blog:\n", with: "    admin: {}\n  blog:\n"))
            == ["t.yaml:13:12: apps.shop.admin: missing required key 'token'"])
        #expect(loadDiagnostics(base.replacingFirst("  blog:\n", with: "    admin: yes\n  blog:\n"))
            == ["t.yaml:13:12: apps.shop.admin: expected a mapping, found a string"])
    }

    @Test func explainSaysWhichTokenReachesWhichApp() throws {
        let both = PolicyExplainer.explain(try PolicyLoader.load(text: Self.tenants(operatorToken: true, shop: "{env: SHOP_ADMIN_TOKEN}", blog: nil),
                                                                 path: "t.yaml").get())
        #expect(both.contains("  - the operator's admin token from env:PUSHWARDEN_ADMIN_TOKEN (admin.token) reaches every app\n"))
        #expect(both.contains("  - app 'shop': the operator's token and its own from env:SHOP_ADMIN_TOKEN (apps.shop.admin.token), which reaches "
                              + "this app only (sent for any other app it gets the same 401 as a wrong token)\n"))
        #expect(both.contains("  - app 'blog': the operator's token only\n"))
        #expect(both.contains("env:SHOP_ADMIN_TOKEN (this app's admin token)"))

        let appsOnly = PolicyExplainer.explain(try PolicyLoader.load(text: Self.tenants(operatorToken: false, shop: "{env: SHOP_ADMIN_TOKEN}", blog: nil),
                                                                     path: "t.yaml").get())
        #expect(appsOnly.contains("\nServer-to-server API: enabled, on the admin listener only"))
        #expect(appsOnly.contains("  - no operator token (no top-level admin block): an app is reached with its own token only\n"))
        #expect(appsOnly.contains("  - app 'shop': its own token from env:SHOP_ADMIN_TOKEN (apps.shop.admin.token), which reaches this app only"))
        #expect(appsOnly.contains("  - app 'blog': no token (its routes answer 401 to every caller)\n"))

        let html = PolicyExplainerHTML.render(try PolicyLoader.load(text: Self.tenants(operatorToken: true, shop: "{env: SHOP_ADMIN_TOKEN}", blog: nil),
                                                                    path: "t.yaml").get())
        #expect(html.contains("(every app) and of each app's own token (that app only; for another app the same 401 as a wrong token)"))
        #expect(html.contains("<li>App <code>shop</code>: its own token from <code class=\"k secret\">env:SHOP_ADMIN_TOKEN</code> and the operator's</li>"))
        #expect(html.contains("<li>App <code>blog</code>: the operator's token only</li>"))
    }
}
