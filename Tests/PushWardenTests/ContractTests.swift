import Foundation
import PWCore
@testable import Providers
import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// The client-facing contract over real HTTP: routing, media type, sizes, sessions, envelopes.
@Suite struct ContractTests {
    @Test func everyRefusalUsesTheEnvelope() async throws {
        let h = try await Harness()
        let cases: [(String, String, HTTPHeaders, String?, String, Int, String)] = [
            // route, body, headers, app override, method, status, code
            ("/installations", "{", [:], nil, "POST", 400, "invalid_json"),
            ("/installations", #"{"platform":"windows","push_token":"x"}"#, [:], nil, "POST", 400, "invalid_platform"),
            ("/installations", #"{"platform":"ios","push_token":"zz"}"#, [:], nil, "POST", 400, "invalid_token_format"),
            ("/installations", #"{"platform":"ios","push_token":"ExponentPushToken[abc]"}"#, [:], nil, "POST", 400, "unsupported_token_type"),
            ("/installations", #"{"platform":"ios","push_token":42}"#, [:], nil, "POST", 400, "invalid_request"),
            ("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","colour":"red"}"#, [:], nil, "POST", 400, "unknown_field"),
            ("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())","contact_id":"mallory"}"#, [:], nil, "POST", 403, "contact_mismatch"),
            ("/events", #"{"events":[{"type":"clicked","message_id":"m","recipient_id":"r","occurred_at":"2026-01-01T00:00:00Z"}]}"#, [:], nil, "POST", 400, "invalid_event_type"),
            ("/installations", "{}", [:], "no-such-app", "POST", 404, "not_found"),
            ("/nowhere", "{}", [:], nil, "POST", 404, "not_found"),
            ("/installations", "{}", [:], nil, "GET", 405, "method_not_allowed"),
            ("/installations", "{}", ["Content-Type": "text/plain"], nil, "POST", 415, "unsupported_media_type"),
            ("/installations", "{}", ["Authorization": "Bearer not.a.jwt"], nil, "POST", 401, "unauthorized"),
        ]
        for (route, body, headers, app, method, status, code) in cases {
            let reply = try await h.post(route, body, headers: headers, app: app, method: method)
            #expect(reply.status == status, "\(route) \(body)")
            #expect(reply.errorCode == code, "\(route) \(body): \(reply.text)")
            let error = reply.json?["error"]?.objectValue
            #expect(error?["message"]?.stringValue?.isEmpty == false)
            #expect(error?["request_id"]?.stringValue == reply.headers["X-Request-Id"])
            #expect(reply.headers["Content-Type"] == "application/json")
        }
        #expect(h.mock.received.isEmpty)
        await h.stop()
    }

    @Test func sessionFailuresAreUnauthorizedWithoutDetail() async throws {
        let h = try await Harness()
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        let expired = h.token(expiresIn: -60)
        let wrongAudience = h.token(audience: "another-app")
        let unsigned = Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8)) + "." +
            Base64URL.encode(Array(#"{"contact_id":"alice","exp":9999999999}"#.utf8)) + "."
        for token in [expired, wrongAudience, unsigned] {
            let reply = try await h.post("/installations", body, token: token)
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
            #expect(reply.json?["error"]?.objectValue?["message"] == "a valid session is required")
            #expect(reply.headers["WWW-Authenticate"] == "Bearer")
        }
        // No session at all.
        let response = try await h.client.execute(.init(method: "POST", url: "http://127.0.0.1:\(h.sidecar.port)/v1/apps/\(h.app)/installations",
                                                        headers: ["Content-Type": "application/json"], body: Array(body.utf8)))
        #expect(response.status == 401)
        // The log says why, the response does not.
        #expect(h.logs.text.contains("session refused"))
        #expect(h.mock.received.isEmpty)
        await h.stop()
    }

    @Test func bodyOverTheCapIs413BeforeAnyWork() async throws {
        let h = try await Harness()
        let big = #"{"platform":"android","push_token":"\#(String(repeating: "a", count: 5000))"}"#
        let reply = try await h.post("/installations", big)
        #expect(reply.status == 413)
        #expect(reply.errorCode == "payload_too_large")
        #expect(h.mock.received.isEmpty)
        await h.stop()
    }

    @Test func eventsBatchIsValidatedWholeAndNamesTheIndex() async throws {
        let h = try await Harness()
        let reply = try await h.post("/events", """
            {"events":[{"type":"opened","message_id":"m","recipient_id":"r","occurred_at":"2026-01-01T00:00:00Z"},
                       {"type":"opened","message_id":"m","recipient_id":"r","occurred_at":"yesterday"}]}
            """)
        #expect(reply.status == 400)
        #expect(reply.errorCode == "invalid_event")
        #expect(reply.errorField == "events[1].occurred_at")
        #expect(h.mock.received.isEmpty)
        let tooMany = "{\"events\":[" + Array(repeating: #"{"type":"opened","message_id":"m","recipient_id":"r","occurred_at":"2026-01-01T00:00:00Z"}"#, count: 6).joined(separator: ",") + "]}"
        #expect(try await h.post("/events", tooMany).errorCode == "invalid_request")
        await h.stop()
    }

    @Test func rateLimitIsPerContactWithRetryAfter() async throws {
        let h = try await Harness(clientYAML: "      platforms: [android]\n      rate_limits: {unregister: 2/min}")
        let body = #"{"push_token":"fcm-\#(UUID().uuidString)"}"#
        #expect(try await h.post("/installations/unregister", body, contact: "carol").status == 202)
        #expect(try await h.post("/installations/unregister", body, contact: "carol").status == 202)
        let limited = try await h.post("/installations/unregister", body, contact: "carol")
        #expect(limited.status == 429)
        #expect(limited.errorCode == "rate_limited")
        #expect(Int(limited.headers["Retry-After"] ?? "") ?? 0 >= 1)
        #expect(try await h.post("/installations/unregister", body, contact: "dave").status == 202)
        await h.stop()
    }

    @Test func noTokenOrKeyInLogsOrResponses() async throws {
        let h = try await Harness()
        let pushToken = "fcm-secret-token-\(UUID().uuidString)"
        let session = h.token()
        var replies: [Harness.Reply] = []
        replies.append(try await h.post("/installations", #"{"platform":"android","push_token":"\#(pushToken)"}"#, token: session))
        h.mock.enqueue(MockVoyado.Scripted(status: 400, body: #"{"error":{"code":"invalid_request"}}"#))
        replies.append(try await h.post("/installations", #"{"platform":"android","push_token":"\#(pushToken)","app_version":"2"}"#, token: session))
        replies.append(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(pushToken)"}"#, token: session))
        replies.append(try await h.post("/installations/unregister", #"{"push_token":"\#(pushToken)"}"#, token: session))
        replies.append(try await h.post("/installations", #"{"platform":"android","push_token":"\#(pushToken)"}"#, token: session + "x"))
        let everything = h.logs.text + replies.map(\.text).joined() + replies.map { $0.headers.fields.map(\.value).joined() }.joined()
        #expect(!h.logs.text.isEmpty)
        for secret in [pushToken, session, h.voyadoKey, String(decoding: h.sessionSecret, as: UTF8.self)] {
            #expect(!everything.contains(secret))
        }
        await h.stop()
    }

    @Test func adminEndpoints() async throws {
        let h = try await Harness()
        _ = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        let health = try await h.admin("/healthz")
        #expect(health.status == 200)
        let ready = try await h.admin("/readyz")
        #expect(ready.status == 200)
        #expect(ready.json?["store"] == "reachable")
        let metrics = try await h.admin("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.text.contains("pushwarden_requests_total{app=\"\(h.app)\",route=\"register\",status=\"202\"} 1"))
        #expect(metrics.text.contains("pushwarden_upstream_calls_total{upstream=\"voyado\",operation=\"register\",outcome=\"accepted\"}"))
        #expect(metrics.text.contains("pushwarden_upstream_latency_seconds_bucket{upstream=\"voyado\",le=\"+Inf\"}"))
        #expect(try await h.admin("/nope").status == 404)
        await h.stop()
    }
}

/// The store: Redis shared between processes, and what happens when it is gone.
@Suite struct StoreTests {
    @Test func twoSidecarsSharingRedisMakeOneUpstreamCall() async throws {
        let mock = try MockVoyado(latencyMillis: 100)
        let a = try await Harness(mock: mock)
        // A second sidecar with the same policy (same app id) and its own Redis connection.
        let b = try await Harness(mock: mock, sameAppAs: a)
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        let outcomes = try await withThrowingTaskGroup(of: String?.self) { group in
            for i in 0..<20 { group.addTask { try await (i % 2 == 0 ? a : b).post("/installations", body).outcome } }
            return try await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 == "forwarded" }.count == 1)
        #expect(outcomes.filter { $0 == "unchanged" }.count == 19)
        #expect(mock.received(path: "/installations").count == 1)
        await a.stop()
        await b.stop()
    }

    @Test func redisDownStillForwardsAndReadyzSaysSo() async throws {
        let h = try await Harness(store: .unreachableRedis)
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        #expect(try await h.post("/installations", body).outcome == "forwarded")
        #expect(try await h.post("/installations", body).outcome == "forwarded")
        #expect(h.mock.received(path: "/installations").count == 2)
        let ready = try await h.admin("/readyz")
        #expect(ready.status == 503)
        #expect(ready.json?["store"] == "unreachable")
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains("pushwarden_dedupe_degraded_total{app=\"\(h.app)\"}"))
        #expect(h.logs.text.contains("dedupe store unavailable"))
        await h.stop()
    }

    @Test func memoryStoreDedupesToo() async throws {
        let h = try await Harness(store: .memory)
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        #expect(try await h.post("/installations", body).outcome == "forwarded")
        #expect(try await h.post("/installations", body).outcome == "unchanged")
        await h.stop()
    }

    @Test func redisHoldsHashesNotTokens() async throws {
        let h = try await Harness()
        let token = "fcm-plain-\(UUID().uuidString)"
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome == "forwarded")
        let redis = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        let keys = try await redis.send(["KEYS", "*"])
        guard case .array(let entries) = keys else { Issue.record("KEYS reply \(keys)"); return }
        let names = entries.compactMap(\.string)
        #expect(names.contains(RegistrationKeys(app: h.app, upstream: "voyado", pushToken: token).entry))
        #expect(!names.contains { $0.contains(token) })
        for name in names {
            let value = try await redis.send(["GET", name]).string ?? ""
            #expect(!value.contains(token))
        }
        redis.close()
        await h.stop()
    }
}
