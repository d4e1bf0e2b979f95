import Foundation
import PWPolicy
import PushWarden
@testable import RedisStores
@testable import Registration
import Testing

/// `pushwarden policy explain --format html` as an operator runs it.
@Suite struct ExplainHTMLCommandLineTests {
    @Test func htmlNamesReferencesAndNeverAValue() throws {
        let value = "pw-test-secret-value-3b8e1f"
        let run = try CommandLineTests.run(["policy", "explain", "--format", "html", "policies/voyado.yaml"],
                                           environment: ["VOYADO_API_KEY": value])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.hasPrefix("<!DOCTYPE html>"))
        #expect(run.stdout.contains("host app-push-prod.voyado.com"))
        #expect(run.stdout.contains("env:VOYADO_API_KEY"))
        #expect(!run.stdout.contains(value))
        #expect(!run.stdout.lowercased().contains("<script"))
        let equals = try CommandLineTests.run(["policy", "explain", "--format=html", "policies/voyado.yaml"])
        #expect(equals.stdout == run.stdout)
    }

    @Test func textStaysTheDefault() throws {
        let plain = try CommandLineTests.run(["policy", "explain", "policies/voyado.yaml"])
        let text = try CommandLineTests.run(["policy", "explain", "--format", "text", "policies/voyado.yaml"])
        #expect(plain.status == 0 && text.status == 0)
        #expect(plain.stdout == text.stdout)
        #expect(plain.stdout.hasPrefix("Policy policies/voyado.yaml"))
    }

    @Test func badFormatIsAUsageError() throws {
        for arguments in [["--format", "pdf", "policies/voyado.yaml"], ["--format"], ["policies/voyado.yaml", "--format", "html"]] {
            let run = try CommandLineTests.run(["policy", "explain"] + arguments)
            #expect(run.status == 2, "\(arguments)")
            #expect(run.stdout.isEmpty, "\(arguments)")
        }
    }

    /// The page states how long identities are kept; PWPolicy cannot see the store's constant.
    @Test func identityLifetimeMatchesTheStore() {
        #expect(PolicyExplainerHTML.identityTTLSeconds == IdentityStore.ttlSeconds)
    }
}
