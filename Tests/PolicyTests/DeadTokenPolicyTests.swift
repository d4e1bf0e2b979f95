import PWPolicy
import Testing

/// `apps.<id>.dead_tokens`: the mass-death guard's share and floor, read, judged and explained.
@Suite struct DeadTokenPolicyTests {
    static func policy(_ block: String = "") -> String {
        InventoryPolicyTests.policy(app: block.isEmpty ? "" : "    dead_tokens:\n" + block)
    }

    @Test func theGuardIsReadAndExplained() throws {
        let policy = try PolicyLoader.load(text: Self.policy("      min_count: 50\n      max_share: 2.5%"), path: "t.yaml").get()
        #expect(policy.apps[0].deadTokens == DeadTokenPolicy(minCount: 50, maxShareBasisPoints: 250))
        #expect(policy.apps[0].deadTokens.removalLimit(installations: 10_000) == 250)
        #expect(policy.apps[0].deadTokens.removalLimit(installations: 1_000) == 50)
        #expect(DeadTokenPolicy(minCount: 0, maxShareBasisPoints: 10_000).removalLimit(installations: .max) == 1 << 62)
        let explained = PolicyExplainer.explain(policy)
        #expect(explained.contains("within one minute they remove at most 2.5% of the app's installations (dead_tokens.max_share) or 50 (dead_tokens.min_count)"))
        #expect(PolicyExplainerHTML.render(policy).contains("dead-token reports remove at most 2.5% (dead_tokens.max_share) or 50"))
        #expect(explained.contains("POST /v1/apps/{app}/tokens/dead answer 404 on both listeners"))
    }

    @Test func withoutTheBlockTheDefaultsHold() throws {
        let policy = try PolicyLoader.load(text: Self.policy(), path: "t.yaml").get()
        #expect(policy.apps[0].deadTokens == DeadTokenPolicy(minCount: 100, maxShareBasisPoints: 500))
        #expect(PolicyExplainer.explain(policy).contains("at most 5% of the app's installations (dead_tokens.max_share) or 100"))
    }

    @Test(arguments: [
        ("      max_share: 0%", "apps.shop.dead_tokens.max_share: must be between 0.01% and 100%, found 0%"),
        ("      max_share: 101%", "apps.shop.dead_tokens.max_share: must be between 0.01% and 100%, found 101%"),
        ("      max_share: 0.05", "apps.shop.dead_tokens.max_share: expected a percentage like 5% or 0.5%, found a number without %"),
        ("      max_share: 1.234%", "apps.shop.dead_tokens.max_share: expected a percentage like 5% or 0.5%, found a string"),
        ("      min_count: -1", "apps.shop.dead_tokens.min_count: must be between 0 and 100000000, found -1"),
        ("      keep: all", "unknown key 'keep'"),
    ])
    func badValuesAreDiagnosed(block: String, expected: String) {
        let diagnostics = loadDiagnostics(Self.policy(block))
        #expect(diagnostics.count == 1, "\(diagnostics)")
        #expect(diagnostics.first?.contains(expected) == true, "\(diagnostics)")
    }

    @Test func percentagesAreWrittenAsRead() {
        #expect(DeadTokenPolicy.basisPoints("5%") == 500)
        #expect(DeadTokenPolicy.basisPoints("0.5%") == 50)
        #expect(DeadTokenPolicy.basisPoints("12.25%") == 1225)
        #expect(DeadTokenPolicy.basisPoints("5") == nil)
        #expect(DeadTokenPolicy.basisPoints("-5%") == nil)
        #expect(DeadTokenPolicy.basisPoints(".5%") == nil)
        for points in [500, 50, 1225, 1, 10_000, 205] {
            #expect(DeadTokenPolicy.basisPoints(DeadTokenPolicy.percentText(basisPoints: points)) == points)
        }
    }
}
