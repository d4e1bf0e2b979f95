import Testing
@testable import PWPolicy

/// `session.verified_cache`: how many accepted sessions are kept so a token sent again is not
/// verified again; what the explainer tells a reviewer about it.
@Suite struct VerifiedCachePolicyTests {
    static func policy(_ line: String?) -> String {
        guard let line else { return minimalPolicy }
        return minimalPolicy.replacingFirst("      hmac_secret: {env: SHOP_SESSION_SECRET}\n",
                                            with: "      hmac_secret: {env: SHOP_SESSION_SECRET}\n      \(line)\n")
    }

    @Test func byDefaultSessionsAreKeptAndTheExplainerSaysHowMany() throws {
        let policy = try PolicyLoader.load(text: Self.policy(nil), path: "t.yaml").get()
        #expect(policy.apps.first?.session.jwt?.verifiedCache == 98_304)
        #expect(PolicyExplainer.explain(policy).contains("up to 98304 accepted sessions are kept by a hash of the token"))
    }

    @Test func zeroVerifiesEveryTokenOnEveryRequest() throws {
        let policy = try PolicyLoader.load(text: Self.policy("verified_cache: 0"), path: "t.yaml").get()
        #expect(policy.apps.first?.session.jwt?.verifiedCache == 0)
        #expect(PolicyExplainer.explain(policy).contains("every token is verified on every request (verified_cache: 0)"))
    }

    @Test(arguments: ["verified_cache: -1", "verified_cache: 2000000", "verified_cache: lots"])
    func outOfRangeIsRefusedWithItsPlace(_ line: String) throws {
        guard case .failure(let errors) = PolicyLoader.load(text: Self.policy(line), path: "t.yaml") else {
            Issue.record("accepted \(line)")
            return
        }
        #expect(errors.diagnostics.count == 1)
        #expect(errors.diagnostics.first?.description.hasPrefix("t.yaml:8:23: apps.shop.session.verified_cache: ") == true)
    }
}
