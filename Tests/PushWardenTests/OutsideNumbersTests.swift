import Foundation
import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// Numbers that come from outside (a provider's `Retry-After`, a body's `retry_after`) are
/// saturated before any arithmetic: the red-team pass took the whole process down with one header.
@Suite(.serialized) struct OutsideNumbersTests {
    @Test(arguments: ["9223372036854776", "9223372036854775807", "99999999999999999999999", "86401"])
    func aHugeRetryAfterGivesUpAtOnceAndTheProcessLives(_ header: String) async throws {
        let h = try await Harness(retry: "{attempts: 3, backoff: 10ms, max_backoff: 50ms}")
        h.mock.enqueue(MockVoyado.Scripted(status: 503, headers: ["Retry-After": header]))
        let started = Date()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 503)
        #expect(reply.errorCode == "upstream_unavailable")
        // A wait past the request's budget means "give up now": one call, no sleeping.
        #expect(h.mock.received(path: "/installations").count == 1)
        #expect(Date().timeIntervalSince(started) < 5)
        let retryAfter = try #require(reply.headers["Retry-After"].flatMap { Int($0) })
        #expect(retryAfter == RetryAfter.clientCeilingSeconds)
        // The process is still there and serves the next request.
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#).outcome == "forwarded")
        await h.stop()
    }

    @Test func aModestRetryAfterIsPassedOnToTheClient() async throws {
        let h = try await Harness(retry: "{attempts: 1, backoff: 10ms, max_backoff: 50ms}")
        h.mock.enqueue(MockVoyado.Scripted(status: 429, headers: ["Retry-After": "42"]))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 503)
        #expect(reply.headers["Retry-After"] == "42")
        await h.stop()
    }

    @Test func retryAfterHeaderParsing() {
        #expect(RetryAfter.seconds(fromHeader: "7") == 7)
        #expect(RetryAfter.seconds(fromHeader: " 7 ") == 7)
        #expect(RetryAfter.seconds(fromHeader: "0") == 0)
        #expect(RetryAfter.seconds(fromHeader: "+7") == nil)
        #expect(RetryAfter.seconds(fromHeader: "-1") == nil)
        #expect(RetryAfter.seconds(fromHeader: "7.5") == nil)
        #expect(RetryAfter.seconds(fromHeader: "") == nil)
        #expect(RetryAfter.seconds(fromHeader: "Wed, 21 Oct 2015 07:28:00 GMT") == nil)
        #expect(RetryAfter.seconds(fromHeader: String(repeating: "9", count: 400)) == RetryAfter.providerCeilingSeconds)
        #expect(RetryAfter.forClient(0) == 1)
        #expect(RetryAfter.forClient(Int.max) == RetryAfter.clientCeilingSeconds)
    }

    @Test func fluxersBodyRetryAfterIsSaturatedToo() {
        let adapter = FluxerAdapter(name: "fluxer", config: FluxerConfig(baseURL: "https://api.fluxer.app", sessionHeader: "X-Fluxer-Session"))
        for text in ["1e400", "9223372036854775808", "100000"] {
            let response = HTTPClientResponse(status: 429, headers: ["Content-Type": "application/json"],
                                              body: Array(#"{"code":"RATE_LIMITED","retry_after":\#(text)}"#.utf8))
            #expect(adapter.verdict(for: response, operation: .register) == .retry(afterSeconds: RetryAfter.providerCeilingSeconds))
        }
    }
}
