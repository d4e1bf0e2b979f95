import Foundation
import PWCore
@testable import Providers
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// End to end: real sidecar, real Redis, a mock Voyado that is a real HTTP server following the
/// seed document. Each test uses its own app id and tokens, so tests can run in parallel.
@Suite struct RegistrationTests {
    @Test func registrationIsForwardedWithInjectedContactAndKey() async throws {
        let h = try await Harness()
        let token = Harness.apnsToken()
        let reply = try await h.post("/installations", """
            {"platform":"ios","push_token":"\(token)","app_version":"3.4.1","os_version":"26.4","device_model":"iPhone15,2","locale":"sv-SE","timezone":"Europe/Stockholm"}
            """, headers: ["X-Request-Id": "req-123"])
        #expect(reply.status == 202)
        #expect(reply.outcome == "forwarded")
        #expect(reply.json?["request_id"]?.stringValue == "req-123")
        #expect(reply.headers["X-Request-Id"] == "req-123")

        let received = h.mock.received(path: "/installations")
        try #require(received.count == 1)
        let call = received[0]
        #expect(call.method == "POST")
        #expect(call.path == "/api/v1/acme/abc123/default/installations")
        #expect(call.headers["Authorization"] == "Bearer \(h.voyadoKey)")
        #expect(call.headers["Content-Type"] == "application/json")
        let body = try #require(call.json?.objectValue)
        #expect(body.keys == ["platform", "push_token", "contact_id", "app_version", "os_version", "device_model", "locale", "timezone"])
        #expect(body["platform"] == "ios")
        #expect(body["push_token"]?.stringValue == token.lowercased())
        #expect(body["contact_id"] == "alice")
        #expect(body["locale"] == "sv-SE")
        await h.stop()
    }

    @Test func duplicateRegistrationIsUnchangedWithoutUpstreamCall() async throws {
        let h = try await Harness()
        let body = #"{"platform":"android","push_token":"fcm-token-\#(UUID().uuidString)"}"#
        #expect(try await h.post("/installations", body).outcome == "forwarded")
        let second = try await h.post("/installations", body)
        #expect(second.status == 202)
        #expect(second.outcome == "unchanged")
        #expect(h.mock.received(path: "/installations").count == 1)
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains("pushwarden_dedupe_hits_total{app=\"\(h.app)\",upstream=\"voyado\"} 1"))
        await h.stop()
    }

    @Test func contactChangeIsForwardedAgain() async throws {
        let h = try await Harness()
        let body = #"{"platform":"android","push_token":"fcm-token-\#(UUID().uuidString)"}"#
        #expect(try await h.post("/installations", body, contact: "alice").outcome == "forwarded")
        #expect(try await h.post("/installations", body, contact: "bob").outcome == "forwarded")
        #expect(try await h.post("/installations", body, contact: "bob").outcome == "unchanged")
        let contacts = h.mock.received(path: "/installations").compactMap { $0.json?.objectValue?["contact_id"]?.stringValue }
        #expect(contacts == ["alice", "bob"])
        await h.stop()
    }

    @Test func metadataChangeIsForwardedAgain() async throws {
        let h = try await Harness()
        let token = "fcm-token-\(UUID().uuidString)"
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)","app_version":"1.0"}"#).outcome == "forwarded")
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)","app_version":"1.1"}"#).outcome == "forwarded")
        #expect(h.mock.received(path: "/installations").count == 2)
        await h.stop()
    }

    @Test func unregisterIsForwardedAndForgetsTheToken() async throws {
        let h = try await Harness()
        let token = "fcm-token-\(UUID().uuidString)"
        let register = #"{"platform":"android","push_token":"\#(token)"}"#
        #expect(try await h.post("/installations", register).outcome == "forwarded")
        let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome == "forwarded")
        let unregisters = h.mock.received(path: "/installations/unregister")
        try #require(unregisters.count == 1)
        #expect(unregisters[0].bodyText == #"{"push_token":"\#(token)"}"#)
        #expect(unregisters[0].headers["Authorization"] == "Bearer \(h.voyadoKey)")
        // Registering again after a logout is a fresh registration.
        #expect(try await h.post("/installations", register).outcome == "forwarded")
        // A token never seen, and a second unregister, are both success.
        #expect(try await h.post("/installations/unregister", #"{"push_token":"never-seen-\#(UUID().uuidString)"}"#).status == 202)
        #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).status == 202)
        await h.stop()
    }

    @Test func rotationRegistersTheNewTokenAndRemovesTheOld() async throws {
        let h = try await Harness()
        let old = "fcm-old-\(UUID().uuidString)", new = "fcm-new-\(UUID().uuidString)"
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome == "forwarded")
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
        #expect(reply.outcome == "forwarded")
        #expect(h.mock.received(path: "/installations").last?.json?.objectValue?["push_token"]?.stringValue == new)
        #expect(h.mock.received(path: "/installations/unregister").map(\.bodyText) == [#"{"push_token":"\#(old)"}"#])
        await h.stop()
    }

    @Test func eventsAreForwardedWithContactInjected() async throws {
        let h = try await Harness()
        let reply = try await h.post("/events", """
            {"events":[{"type":"delivered","message_id":"m1","recipient_id":"r1","occurred_at":"2026-07-02T10:20:15.123Z","app_state":"background"},
                       {"type":"opened","message_id":"m1","recipient_id":"r1","occurred_at":"2026-07-02T10:20:42Z","deeplink":"myapp://p/1","contact_id":"alice"}]}
            """)
        #expect(reply.status == 202)
        #expect(reply.json?["accepted"] == 2)
        let events = try #require(h.mock.received(path: "/events").first?.json?.objectValue?["events"]?.arrayValue)
        #expect(events.count == 2)
        #expect(events.allSatisfy { $0.objectValue?["contact_id"] == "alice" })
        #expect(events[0].objectValue?["app_state"] == "background")
        #expect(events[1].objectValue?["deeplink"] == "myapp://p/1")
        await h.stop()
    }

    @Test func upstream503ThenAcceptedIsRetried() async throws {
        let h = try await Harness()
        h.mock.enqueue(MockVoyado.Scripted(status: 503))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome == "forwarded")
        #expect(h.mock.received(path: "/installations").count == 2)
        await h.stop()
    }

    @Test func upstream429HonoursRetryAfter() async throws {
        let h = try await Harness()
        h.mock.enqueue(MockVoyado.Scripted(status: 429, headers: ["Retry-After": "1"]))
        let started = Date()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 202)
        #expect(Date().timeIntervalSince(started) >= 0.95)
        #expect(h.mock.received(path: "/installations").count == 2)
        await h.stop()
    }

    @Test func upstreamDownIs503WithRetryAfterAndNothingCached() async throws {
        let h = try await Harness()
        for _ in 0..<3 { h.mock.enqueue(MockVoyado.Scripted(status: 503)) }
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        let reply = try await h.post("/installations", body)
        #expect(reply.status == 503)
        #expect(reply.errorCode == "upstream_unavailable")
        #expect(reply.headers["Retry-After"] != nil)
        #expect(h.mock.received(path: "/installations").count == 3)
        // The failure was not remembered: the next attempt reaches the upstream.
        #expect(try await h.post("/installations", body).outcome == "forwarded")
        await h.stop()
    }

    @Test func unreachableUpstreamIs503() async throws {
        let h = try await Harness()
        await h.mock.stop()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 503)
        #expect(reply.errorCode == "upstream_unavailable")
        await h.stop()
    }

    @Test func upstream401IsUpstreamAuthFailed() async throws {
        let h = try await Harness(mock: MockVoyado(apiKey: "the-key-voyado-expects"), voyadoKey: "a-stale-key")
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 502)
        #expect(reply.errorCode == "upstream_auth_failed")
        #expect(h.mock.received.count == 1)  // never retried
        await h.stop()
    }

    @Test func upstream400IsUpstreamRejectedWithItsCode() async throws {
        let h = try await Harness()
        h.mock.enqueue(MockVoyado.Scripted(status: 400, body: #"{"error":{"code":"invalid_platform","message":"x","request_id":"r"}}"#))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 422)
        #expect(reply.errorCode == "upstream_rejected")
        #expect(reply.json?["error"]?.objectValue?["upstream_code"] == "invalid_platform")
        #expect(h.mock.received.count == 1)
        await h.stop()
    }

    @Test func fiftyConcurrentIdenticalRegistrationsMakeOneUpstreamCall() async throws {
        let mock = try MockVoyado(latencyMillis: 100)
        let g = try await Harness(mock: mock)
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        let outcomes = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<50 { group.addTask { try await g.post("/installations", body).outcome } }
            return try await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(outcomes.count == 50)
        #expect(outcomes.filter { $0 == "forwarded" }.count == 1)
        #expect(outcomes.filter { $0 == "unchanged" }.count == 49)
        #expect(mock.received(path: "/installations").count == 1)
        await g.stop()
    }
}
