import Testing
@testable import PWPolicy

/// The top-level `serial` of a (signed) policy: what orders signed files, so that an older one
/// cannot be put back (docs/operations.md, signed policies).
@Suite struct SerialPolicyTests {
    static func withSerial(_ value: String) -> String {
        minimalPolicy.replacingFirst("version: 1\n", with: "version: 1\nserial: \(value)\n")
    }

    @Test func theSerialIsReadAndItsPlaceKept() throws {
        let policy = try PolicyLoader.load(text: Self.withSerial("2026120501"), path: "t.yaml").get()
        #expect(policy.serial == 2_026_120_501)
        #expect(policy.diagnostic(at: "serial", "x").description == "t.yaml:2:9: serial: x")
        #expect(try PolicyLoader.load(text: minimalPolicy, path: "t.yaml").get().serial == nil)
        #expect(try PolicyLoader.load(text: Self.withSerial("0"), path: "t.yaml").get().serial == 0)
        #expect(try PolicyLoader.load(text: Self.withSerial("9007199254740991"), path: "t.yaml").get().serial == Policy.maximumSerial)
    }

    @Test func explainNamesTheSerial() throws {
        let policy = try PolicyLoader.load(text: Self.withSerial("7"), path: "t.yaml").get()
        #expect(PolicyExplainer.explain(policy).hasPrefix("Policy t.yaml (version 1, serial 7): 1 app(s)\n"))
        #expect(PolicyExplainerHTML.render(policy).contains("<p>Version 1, serial 7, 1 app(s)."))
    }

    @Test(arguments: [
        ("-1", "t.yaml:2:9: serial: must be between 0 and 9007199254740991, found -1"),
        ("9007199254740992", "t.yaml:2:9: serial: must be between 0 and 9007199254740991, found 9007199254740992"),
        ("\"3\"", "t.yaml:2:9: serial: expected an integer, found a quoted string; write numbers without quotes"),
        ("1.5", "t.yaml:2:9: serial: expected an integer, found a string"),
        ("[1]", "t.yaml:2:9: serial: expected an integer, found a list"),
        ("123456789012345678901234567890", "t.yaml:2:9: serial: must be between 0 and 9007199254740991, found 123456789012345678901234567890"),
    ])
    func badSerialsReportExactDiagnostics(_ value: String, _ expected: String) {
        #expect(loadDiagnostics(Self.withSerial(value)) == [expected], "\(value)")
    }
}
