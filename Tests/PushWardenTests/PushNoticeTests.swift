import ClientAPI
import Foundation
import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// PushNotice end to end: a real sidecar, real Redis, and a mock PushNotice that is a real HTTP
/// server following seed document 004. Each test asserts exactly what reached the mock.
@Suite struct PushNoticeTests {
    static let key = "pnp_live_5f1c0a9e7d3b2a18"

    /// An FCM registration token of the usual `<instance>:APA91b<...>` shape, unique per call.
    static func fcmToken() -> String {
        let random = UUID().uuidString.replacingOccurrences(of: "-", with: "")
        return "f\(random.prefix(10)):APA91b\(random)_x-\(random.suffix(8))"
    }

    static let p256dh = Base64URL.encode([UInt8(0x04)] + (1...64).map { UInt8($0) })
    static let authSecret = Base64URL.encode((1...16).map { UInt8($0 * 3) })

    /// One `pushnotice` upstream block for `SidecarHarness`.
    static func upstream(_ mock: MockPushNotice, name: String = "pushnotice", role: String? = nil, slug: String? = nil,
                         baseURL: String? = nil, groups: String? = "[Test, Unknown]") -> String {
        var lines = [
            "      - name: \(name)",
            "        provider: pushnotice",
            "        base_url: \(baseURL ?? mock.baseURL)",
            "        slug: \(slug ?? mock.slug)",
            "        api_key: {env: PN_KEY}",
            "        retry: {attempts: 3, backoff: 10ms, max_backoff: 20ms}",
        ]
        if let role { lines.append("        role: \(role)") }
        if let groups { lines.append("        groups: \(groups)") }
        return lines.joined(separator: "\n")
    }

    static func voyado(_ mock: MockVoyado, role: String) -> String {
        """
              - name: voyado
                provider: voyado
                role: \(role)
                base_path: \(mock.basePath)
                api_key: {env: VOYADO_KEY}
                retry: {attempts: 2, backoff: 10ms, max_backoff: 20ms}
        """
    }

    static func harness(_ upstreams: String, key: String = key) async throws -> SidecarHarness {
        try await SidecarHarness(upstreams: upstreams, secrets: [.env("PN_KEY"): key, .env("VOYADO_KEY"): "voyado-test-key"])
    }

    /// Nothing secret reached the logs: neither the key nor any raw token.
    static func expectCleanLogs(_ h: SidecarHarness, _ tokens: [String]) {
        let logs = h.logs.text
        #expect(!logs.contains(key))
        #expect(!logs.contains("pnp_"))
        for token in tokens { #expect(!logs.contains(token)) }
    }

    // MARK: Register

    @Test func firstRegistrationSendsTheDocumentedRequest() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            let token = Self.fcmToken()
            let reply = try await h.post("/installations", """
                {"platform":"android","push_token":"\(token)","app_version":"3.4.1","os_version":"15","device_model":"Pixel 8",
                 "locale":"sv-SE","timezone":"Europe/Stockholm"}
                """)
            #expect(reply.status == 202)
            #expect(reply.outcome("pushnotice") == "forwarded")

            let received = mock.received
            try #require(received.count == 1)
            let call = received[0]
            #expect(call.method == "POST")
            #expect(call.path == "/api/v1/apps/ktso/subscribers")
            #expect(call.query == "")
            #expect(call.headers["Authorization"] == "Bearer \(Self.key)")
            #expect(call.headers["X-Api-Key"] == nil)
            #expect(call.headers["Content-Type"] == "application/json")
            #expect(call.bodyText == #"{"token":"\#(token)","platform":"android","app_version":"3.4.1","locale":"sv-SE","device_model":"Pixel 8","groups":["Test","Unknown"]}"#)
            #expect(!call.bodyText.contains("alice"))

            let row = try #require(mock.subscriber(token: token))
            #expect(row.status == "active")
            #expect(row.groups == ["Master", "Test"])
            Self.expectCleanLogs(h, [token])
        }
    }

    @Test func duplicateRegistrationMakesNoCall() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock, groups: nil)) }) { h, mock async throws in
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            try await expectDuplicateMakesNoCall(h, mock, body: body, upstream: "pushnotice")
            #expect(mock.subscribers.count == 1)
        }
    }

    @Test func rotationSendsPreviousTokenAndNoRemoval() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock, groups: nil)) }) { h, mock async throws in
            let old = Self.fcmToken(), new = Self.fcmToken()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome("pushnotice") == "forwarded")
            let firstID = try #require(mock.subscriber(token: old)).id

            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("pushnotice") == "forwarded")
            let received = mock.received
            try #require(received.count == 2)
            #expect(received[1].method == "POST")
            #expect(received[1].path == "/api/v1/apps/ktso/subscribers")
            #expect(received[1].bodyText == #"{"token":"\#(new)","platform":"android","previous_token":"\#(old)"}"#)
            #expect(mock.received(method: "DELETE").isEmpty)
            // PushNotice moved the row: same id, new token, the old token is gone.
            #expect(mock.subscriber(token: new)?.id == firstID)
            #expect(mock.subscriber(token: old) == nil)
            #expect(mock.subscribers.count == 1)

            // The old token was forgotten by dedupe: registering it again is forwarded.
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome("pushnotice") == "forwarded")
            Self.expectCleanLogs(h, [old, new])
        }
    }

    @Test func contactChangeIsForwardedAgainWithoutTheContact() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock, groups: nil)) }) { h, mock async throws in
            let token = Self.fcmToken()
            let body = #"{"platform":"android","push_token":"\#(token)"}"#
            #expect(try await h.post("/installations", body, contact: "alice").outcome("pushnotice") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob").outcome("pushnotice") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob").outcome("pushnotice") == "unchanged")
            let bodies = mock.received.map(\.bodyText)
            #expect(bodies == Array(repeating: #"{"token":"\#(token)","platform":"android"}"#, count: 2))
            #expect(mock.subscribers.count == 1)
        }
    }

    @Test func groupsChangeInThePolicyIsForwardedAgain() async throws {
        let mock = try MockPushNotice(apiKey: Self.key)
        let token = Self.fcmToken()
        let body = #"{"platform":"android","push_token":"\#(token)"}"#
        let first = try await Self.harness(Self.upstream(mock, groups: nil))
        #expect(try await first.post("/installations", body).outcome("pushnotice") == "forwarded")
        await first.stop()
        let second = try await SidecarHarness(upstreams: Self.upstream(mock, groups: "[Test]"), secrets: [.env("PN_KEY"): Self.key],
                                              sameApp: first.app)
        #expect(try await second.post("/installations", body).outcome("pushnotice") == "forwarded")
        #expect(mock.received.last?.bodyText == #"{"token":"\#(token)","platform":"android","groups":["Test"]}"#)
        #expect(mock.subscriber(token: token)?.groups == ["Master", "Test"])
        await second.stop()
        await mock.stop()
    }

    // MARK: Unregister

    @Test func unregisterSendsDeleteAndForgetsTheToken() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            let token = Self.fcmToken()
            let register = #"{"platform":"android","push_token":"\#(token)"}"#
            #expect(try await h.post("/installations", register).outcome("pushnotice") == "forwarded")
            let id = try #require(mock.subscriber(token: token)).id

            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("pushnotice") == "forwarded")
            let deletes = mock.received(method: "DELETE")
            try #require(deletes.count == 1)
            #expect(deletes[0].path == "/api/v1/apps/ktso/subscribers")
            #expect(deletes[0].query == "")
            #expect(deletes[0].headers["Authorization"] == "Bearer \(Self.key)")
            #expect(deletes[0].headers["Content-Type"] == "application/json")
            #expect(deletes[0].bodyText == #"{"token":"\#(token)"}"#)
            #expect(mock.subscriber(token: token)?.status == "inactive")

            // Registering again reaches PushNotice (nothing cached) and reactivates the same row.
            #expect(try await h.post("/installations", register).outcome("pushnotice") == "forwarded")
            #expect(mock.subscriber(token: token)?.status == "active")
            #expect(mock.subscriber(token: token)?.id == id)
            Self.expectCleanLogs(h, [token])
        }
    }

    @Test func unregisterOfAnUnknownTokenIsSuccess() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            let token = Self.fcmToken()
            for _ in 0..<2 {
                let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
                #expect(reply.status == 202)
                #expect(reply.outcome("pushnotice") == "forwarded")
            }
            #expect(mock.received(method: "DELETE").map(\.bodyText) == Array(repeating: #"{"token":"\#(token)"}"#, count: 2))
            #expect(mock.subscribers.isEmpty)
        }
    }

    // MARK: What PushNotice cannot take

    @Test func installationsPushNoticeCannotTakeAreSkippedWithoutACall() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            let apns = Harness.apnsToken()
            let keys = #""web_push_keys":{"p256dh":"\#(Self.p256dh)","auth":"\#(Self.authSecret)"}"#
            let bodies = [
                #"{"platform":"ios","push_token":"\#(apns)"}"#,
                #"{"platform":"ios","push_service":"apns_voip","push_token":"\#(Harness.apnsToken())"}"#,
                #"{"platform":"web","push_token":"https://updates.push.services.mozilla.com/wpush/v2/\#(UUID().uuidString)",\#(keys)}"#,
                #"{"platform":"android","push_service":"unified_push","push_token":"https://ntfy.sh/up\#(UUID().uuidString)",\#(keys)}"#,
                #"{"platform":"android","push_service":"fcm","push_token":"https://fcm.googleapis.com/fcm/send/\#(Self.fcmToken())",\#(keys)}"#,
            ]
            for body in bodies {
                let reply = try await h.post("/installations", body)
                #expect(reply.status == 202, "\(reply.text)")
                #expect(reply.outcome("pushnotice") == "skipped")
            }
            // Nor is a token PushNotice can never have held sent for removal.
            let unregister = try await h.post("/installations/unregister", #"{"push_token":"\#(apns)"}"#)
            #expect(unregister.status == 202)
            #expect(unregister.outcome("pushnotice") == "skipped")
            // Events: PushNotice takes none.
            let events = try await h.post("/events", #"{"events":[{"type":"opened","message_id":"m","recipient_id":"r","occurred_at":"2026-01-01T00:00:00Z"}]}"#)
            #expect(events.status == 202)
            #expect(events.outcome("pushnotice") == "skipped")
            #expect(mock.received.isEmpty)
        }
    }

    @Test func contractRefusalsNeverReachPushNotice() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            let short = try await h.post("/installations", #"{"platform":"android","push_token":"abc:APA91b"}"#)
            #expect(short.status == 400)
            #expect(short.errorCode == "invalid_token_format")
            let spaced = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken()) x"}"#)
            #expect(spaced.status == 400)
            #expect(spaced.errorCode == "invalid_token_format")
            #expect(mock.received.isEmpty)
        }
    }

    /// iOS apps register their FCM token with PushNotice; the adapter takes `(ios, fcm)` as soon
    /// as the contract lets a client send it (today `push_service fcm` on ios is refused before
    /// any adapter is asked).
    @Test func iosFCMTokenIsRegisteredAsIOS() throws {
        let config = PushNoticeConfig(baseURL: "https://app.rspush.com", slug: "ktso", apiKey: .env("K"), groups: [])
        let adapter = PushNoticeAdapter(name: "pushnotice", config: config, apiKey: Array(Self.key.utf8))
        let token = Self.fcmToken()
        let installation = Installation(platform: .ios, pushService: .fcm, pushToken: token,
                                        metadata: InstallationMetadata(appVersion: "1.4.0", deviceModel: "iPhone15,3", locale: "en-US"))
        #expect(adapter.accepts(installation))
        #expect(!adapter.accepts(Installation(platform: .ios, pushService: .apns, pushToken: String(repeating: "ab", count: 32))))
        let request = adapter.registerRequest(installation, context: CallContext(contactID: "c"), identity: nil, previous: nil)
        #expect(request.method == "POST")
        #expect(request.url == "https://app.rspush.com/api/v1/apps/ktso/subscribers")
        #expect(String(decoding: request.body, as: UTF8.self)
                    == #"{"token":"\#(token)","platform":"ios","app_version":"1.4.0","locale":"en-US","device_model":"iPhone15,3"}"#)
        #expect(!adapter.keepsIdentity)
        #expect(adapter.eventsRequest([], context: CallContext(contactID: "c")) == nil)
    }

    // MARK: Upstream errors

    /// Seed 004 documents no error code, so PushNotice's code is shown only as its hash.
    @Test func unprocessablePayloadIsRejectedWithItsCodeAndNotRetried() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            mock.enqueue(.init(status: 422, headers: ["Content-Type": "application/json"],
                               body: #"{"ok":false,"error":{"code":"validation_failed","message":"platform is invalid"}}"#))
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            let reply = try await h.post("/installations", body)
            #expect(reply.status == 422)
            #expect(reply.errorCode == "upstream_rejected")
            #expect(reply.json?["error"]?.objectValue?["upstream_code"]?.stringValue == UpstreamCodeTests.unknown("validation_failed"))
            #expect(mock.received.count == 1)
            // A refusal is not remembered: the next registration is forwarded.
            #expect(try await h.post("/installations", body).outcome("pushnotice") == "forwarded")
            #expect(mock.received.count == 2)

            mock.enqueue(.init(status: 400))
            let other = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
            #expect(other.status == 422)
            #expect(other.json?["error"]?.objectValue?["upstream_code"]?.stringValue == "http_400")
            #expect(mock.received.count == 3)
        }
    }

    @Test func wrongKeyIsAnOperatorProblemNeverRetried() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock), key: "pnp_revoked_0000000000") }) { h, mock async throws in
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
            #expect(reply.status == 502)
            #expect(reply.errorCode == "upstream_auth_failed")
            #expect(mock.received.count == 1)
            let unregister = try await h.post("/installations/unregister", #"{"push_token":"\#(Self.fcmToken())"}"#)
            #expect(unregister.status == 502)
            #expect(mock.received.count == 2)
            #expect(!h.logs.text.contains("pnp_revoked"))
        }
    }

    @Test func slugTheKeyDoesNotBelongToIsForbiddenNeverRetried() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock, slug: "other-app")) }) { h, mock async throws in
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
            #expect(reply.status == 502)
            #expect(reply.errorCode == "upstream_auth_failed")
            #expect(mock.received.count == 1)
            #expect(mock.received.first?.path == "/api/v1/apps/other-app/subscribers")
        }
    }

    @Test func serverErrorsAreRetriedThenUnavailable() async throws {
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock)) }) { h, mock async throws in
            mock.enqueue(.init(status: 500), .init(status: 502), .init(status: 503))
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            let reply = try await h.post("/installations", body)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            #expect(reply.headers["Retry-After"] != nil)
            #expect(mock.received.count == 3)
            #expect(Set(mock.received.map(\.bodyText)).count == 1)

            // A 5xx (or an undocumented 429) followed by success is one forwarded registration.
            mock.enqueue(.init(status: 500), .init(status: 429))
            let recovered = try await h.post("/installations", body)
            #expect(recovered.status == 202)
            #expect(recovered.outcome("pushnotice") == "forwarded")
            #expect(mock.received.count == 6)
        }
    }

    @Test func networkErrorsAreRetriedThenUnavailable() async throws {
        let gone = try MockPushNotice(apiKey: Self.key)
        let deadURL = gone.baseURL
        await gone.stop()
        try await withSidecar(MockPushNotice(apiKey: Self.key), { mock in try await Self.harness(Self.upstream(mock, baseURL: deadURL)) }) { h, mock async throws in
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            // Three attempts, counted in metrics; the log line is bounded to one per second.
            let metrics = try await h.admin("/metrics").text
            #expect(metrics.contains(#"pushwarden_upstream_calls_total{upstream="pushnotice",operation="register",outcome="network_error"} 3"#), "\(metrics)")
            #expect(h.logs.text.components(separatedBy: "upstream unreachable").count - 1 == 1)
        }
    }

    // MARK: Start-up

    @Test func keyOfTheWrongShapeStopsStartUpNamingOnlyTheReference() async throws {
        let mock = try MockPushNotice(apiKey: Self.key)
        #expect(!PushNoticeAdapter.isAPIKey(Array("pnp_".utf8)))
        #expect(PushNoticeAdapter.isAPIKey(Array(Self.key.utf8)))
        for bad in ["sk_live_0123456789abcdef", "pnp_abc def", "PNP_ABCDEF0123"] {
            do {
                let h = try await Self.harness(Self.upstream(mock), key: bad)
                await h.stop()
                Issue.record("the sidecar started with a key that is not pnp_...")
            } catch {
                let text = "\(error)"
                #expect(text.contains("upstream pushnotice: secret env:PN_KEY is not a PushNotice API key"), "\(text)")
                #expect(!text.contains(bad))
            }
        }
        #expect(mock.received.isEmpty)
        await mock.stop()
    }

    // MARK: Beside another provider

    @Test func failingPushNoticeShadowNeverFailsTheClient() async throws {
        let pushNotice = try MockPushNotice(apiKey: Self.key), voyado = try MockVoyado()
        let h = try await Self.harness(Self.voyado(voyado, role: "primary") + "\n" + Self.upstream(pushNotice, role: "shadow"))
        pushNotice.enqueue(.init(status: 503), .init(status: 503), .init(status: 503))
        let token = Self.fcmToken()
        let body = #"{"platform":"android","push_token":"\#(token)"}"#
        let reply = try await h.post("/installations", body)
        #expect(reply.status == 202)
        #expect(reply.outcome("voyado") == "forwarded")
        #expect(reply.outcome("pushnotice") == "failed")
        #expect(pushNotice.received.count == 3)
        #expect(voyado.received(path: "/installations").count == 1)
        // The shadow's failure was not cached: it is reached again, the primary is unchanged.
        let again = try await h.post("/installations", body)
        #expect(again.outcome("voyado") == "unchanged")
        #expect(again.outcome("pushnotice") == "forwarded")
        #expect(pushNotice.subscriber(token: token)?.status == "active")
        Self.expectCleanLogs(h, [token])
        await h.stop()
        await pushNotice.stop()
        await voyado.stop()
    }

    @Test func pushNoticePrimaryAnswersWhenTheVoyadoShadowFails() async throws {
        let pushNotice = try MockPushNotice(apiKey: Self.key), voyado = try MockVoyado()
        let h = try await Self.harness(Self.upstream(pushNotice, role: "primary") + "\n" + Self.voyado(voyado, role: "shadow"))
        voyado.enqueue(.init(status: 401))
        let apns = Harness.apnsToken()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome("pushnotice") == "forwarded")
        #expect(reply.outcome("voyado") == "failed")
        // An APNs installation: PushNotice (the primary) skips it, Voyado takes it.
        let ios = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(apns)"}"#)
        #expect(ios.status == 202)
        #expect(ios.outcome("pushnotice") == "skipped")
        #expect(ios.outcome("voyado") == "forwarded")
        #expect(pushNotice.received.count == 1)
        await h.stop()
        await pushNotice.stop()
        await voyado.stop()
    }
}
