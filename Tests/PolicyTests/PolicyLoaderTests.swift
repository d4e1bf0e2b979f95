import Testing
@testable import PWPolicy

@Suite struct PolicyLoaderTests {
    @Test(arguments: badFixtures)
    func badPolicyReportsExactDiagnostics(_ fixture: Fixture) {
        switch PolicyLoader.load(text: fixture.yaml, path: "t.yaml") {
        case .success:
            Issue.record("\(fixture.name): loaded, expected diagnostics")
        case .failure(let failure):
            #expect(failure.diagnostics.map(\.description) == fixture.expected, "\(fixture.name)")
        }
    }
}
