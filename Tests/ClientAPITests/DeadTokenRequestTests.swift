import ClientAPI
import PWCore
import Testing

/// The body of a dead-token report: the envelope judged whole, each report on its own, and
/// `observed_at` in either of its two forms.
@Suite struct DeadTokenRequestTests {
    static func observed(_ json: String) throws -> Int64? {
        let body = #"{"reports":[{"push_token":"t","reason":"expired","observed_at":"# + json + "}]}"
        return try DeadTokenRequest.parse(Array(body.utf8))[0].get().observedMillis
    }

    @Test(arguments: [
        (#""1970-01-01T00:00:00Z""#, Int64(0)),
        (#""2026-07-01T10:00:00Z""#, Int64(1_782_900_000_000)),
        (#""2026-07-01T10:00:00.123456Z""#, Int64(1_782_900_000_123)),
        (#""2026-07-01T12:00:00.5+02:00""#, Int64(1_782_900_000_500)),
        (#""2024-02-29T23:59:59-00:30""#, Int64(1_709_252_999_000)),
        ("1782900000000", Int64(1_782_900_000_000)),
    ])
    func observedAtIsRead(json: String, millis: Int64) throws {
        #expect(try Self.observed(json) == millis)
        #expect(try Self.observed("null") == nil)
    }

    @Test(arguments: [#""2026-02-30T00:00:00Z""#, #""2026-07-01 10:00:00Z""#, #""2026-07-01T10:00:00""#, "1.5", "-99999999999999999", "true",
                      "99999999999999999999"])
    func badObservedAtIsRefusedForItsReportOnly(json: String) throws {
        let body = #"{"reports":[{"push_token":"t","reason":"expired","observed_at":"# + json + #"},{"push_token":"u","reason":"invalid"}]}"#
        let parsed = try DeadTokenRequest.parse(Array(body.utf8))
        #expect(throws: ContractError.self) { try parsed[0].get() }
        #expect((try? parsed[1].get())?.pushToken == "u")
    }

    @Test func eachReportIsJudgedOnItsOwn() throws {
        let body = #"{"reports":[1,{"push_token":"a","reason":"unregistered","extra":1},{"push_token":"","reason":"expired"},"#
            + #"{"push_token":"b\u0000","reason":"expired"},{"push_token":"c","reason":"topic_mismatch"},{"push_token":"d"}]}"#
        let codes = try DeadTokenRequest.parse(Array(body.utf8)).map { result -> String in
            switch result {
            case .success: return "ok"
            case .failure(let error): return error.code.rawValue + ":" + (error.field ?? "-")
            }
        }
        #expect(codes == ["invalid_request:reports[0]", "unknown_field:reports[1]", "invalid_token_format:reports[2].push_token",
                          "invalid_token_format:reports[3].push_token", "invalid_reason:reports[4].reason", "invalid_reason:reports[5].reason"])
    }
}
