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
        #expect(text.contains("  - who may call: the bearer of the admin token from env:PUSHWARDEN_ADMIN_TOKEN (Authorization: Bearer <token>; "
                              + "compared in constant time; at least 32 bytes)\n"))
        #expect(text.contains("  - GET and DELETE /v1/apps/{app}/contacts/{contact}/installations, for every app below"))
        #expect(text.contains("  - secret referenced (name only): env:PUSHWARDEN_ADMIN_TOKEN (admin token)\n"))

        let without = PolicyExplainer.explain(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get())
        #expect(without.contains("\nServer-to-server API: disabled (no admin block); GET and DELETE "
                                 + "/v1/apps/{app}/contacts/{contact}/installations answer 404 on both listeners\n"))
        #expect(!without.contains("admin token"))
    }

    @Test func theHTMLPageSaysItToo() throws {
        let html = PolicyExplainerHTML.render(try PolicyLoader.load(text: Self.withAdmin, path: "t.yaml").get())
        #expect(html.contains("<p class=\"s2s\">Server-to-server API: <strong>enabled</strong> on the admin listener only, for the bearer of the "
                              + "admin token from <code class=\"k secret\">env:PUSHWARDEN_ADMIN_TOKEN</code>"))
        let without = PolicyExplainerHTML.render(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get())
        #expect(without.contains("Server-to-server API: <strong>disabled</strong>"))
    }
}
