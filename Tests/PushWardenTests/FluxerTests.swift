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

/// End to end against a mock Fluxer that follows seed document 002: what Fluxer receives, byte
/// for byte, for each contract operation, and what the client gets back.
@Suite struct FluxerTests {
    static let session = "fluxer-user-session"

    static func upstream(_ mock: MockFluxer, name: String = "fluxer", role: String? = nil, extra: String = "") -> String {
        var yaml = """
              - name: \(name)
                provider: fluxer
                base_url: \(mock.baseURL)
                session_header: X-Fluxer-Session
                retry: {attempts: 2, backoff: 10ms, max_backoff: 20ms}
        """
        if let role { yaml += "\n        role: \(role)" }
        if !extra.isEmpty { yaml += "\n" + extra }
        return yaml
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

    static let fluxerHeaders: HTTPHeaders = ["X-Fluxer-Session": session]
    static func fcmToken() -> String { "fcm-\(UUID().uuidString):APA91b-\(UUID().uuidString)" }
    static func endpoint() -> String { "https://fcm.googleapis.com/fcm/send/\(UUID().uuidString)" }
    static func keys() -> (p256dh: String, auth: String) {
        (Base64URL.encode([4] + (0..<64).map { _ in UInt8.random(in: 0...255) }),
         Base64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255) }))
    }

    /// Logs carry neither the user's session nor the app session, token or key.
    static func expectClean(_ h: SidecarHarness, _ secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        let logs = h.logs.text
        for secret in secrets + [session] {
            #expect(!logs.contains(secret), "a credential or token was logged", sourceLocation: sourceLocation)
        }
    }

    // MARK: Register

    @Test func legacyFCMRegistrationCarriesTheUsersSessionAndTheMappedPlatform() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let token = Self.fcmToken()
            let reply = try await h.post("/installations", """
                {"platform":"android","push_token":"\(token)","app_version":"3.4.1","os_version":"14","device_model":"Pixel 8","locale":"sv-SE"}
                """, headers: Self.fluxerHeaders)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "forwarded")

            try #require(mock.received.count == 1)
            let call = mock.received[0]
            #expect(call.method == "POST")
            #expect(call.path == "/v1/users/@me/mobile-devices")
            #expect(call.headers["Authorization"] == Self.session)
            #expect(call.headers["Content-Type"] == "application/json")
            #expect(call.headers["X-Fluxer-Session"] == nil)
            #expect(!call.headers.contains { $0.value.contains(h.token(contact: "alice").prefix(20)) }, "the app session stays home")
            #expect(call.bodyText == #"{"platform":"android_fcm","token":"\#(token)","app_id":"stable","user_agent":"app_version=3.4.1; os_version=14; device_model=Pixel 8"}"#)
            let stored = mock.registrations(session: Self.session)
            #expect(stored.count == 1)
            #expect(stored.values.first?.platform == "android_fcm")
            Self.expectClean(h, [token])
        }
    }

    @Test func webPushVoIPRegistrationSendsBothKeysAndTheDevelopmentEnvironment() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let url = Self.endpoint(), keys = Self.keys()
            let reply = try await h.post("/installations", """
                {"platform":"ios","push_service":"apns_voip","push_token":"\(url)","web_push_keys":{"p256dh":"\(keys.p256dh)","auth":"\(keys.auth)"},"environment":"sandbox"}
                """, headers: Self.fluxerHeaders)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "forwarded")
            try #require(mock.registers.count == 1)
            #expect(mock.registers[0].bodyText == #"{"platform":"ios_apns_voip","token":"\#(url)","encryption_key":"\#(keys.p256dh)","auth_secret":"\#(keys.auth)","app_id":"stable","provider_environment":"development"}"#)
            let stored = try #require(mock.registrations(session: Self.session).values.first)
            #expect(stored.providerEnvironment == "development")
            Self.expectClean(h, [url, keys.p256dh, keys.auth])
        }
    }

    @Test func unifiedPushAndApnsMapToTheirPlatformsWithThePolicysAppAndEnvironment() async throws {
        let mock = try MockFluxer()
        let h = try await SidecarHarness(upstreams: Self.upstream(mock, extra: """
                    app_id: canary
                    provider_environment: production
            """))
        let url = Self.endpoint(), keys = Self.keys(), apns = Harness.apnsToken()
        let unified = try await h.post("/installations", """
            {"platform":"android","push_service":"unified_push","push_token":"\(url)","web_push_keys":{"p256dh":"\(keys.p256dh)","auth":"\(keys.auth)"}}
            """, headers: Self.fluxerHeaders)
        #expect(unified.outcome("fluxer") == "forwarded")
        let ios = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(apns)","environment":"sandbox"}"#,
                                   headers: Self.fluxerHeaders)
        #expect(ios.outcome("fluxer") == "forwarded")
        try #require(mock.registers.count == 2)
        #expect(mock.registers[0].bodyText == #"{"platform":"android_unified_push","token":"\#(url)","encryption_key":"\#(keys.p256dh)","auth_secret":"\#(keys.auth)","app_id":"canary"}"#)
        // The policy fixes the environment: a sandbox build still registers as production.
        #expect(mock.registers[1].bodyText == #"{"platform":"ios_apns","token":"\#(apns.lowercased())","app_id":"canary","provider_environment":"production"}"#)
        await h.stop()
        await mock.stop()
    }

    /// The forwarded session is part of what was forwarded (issue 12, item 7): the same session
    /// again is `unchanged`; another session (another Fluxer user, or the same user's rotated
    /// session, which PushWarden cannot tell apart) is forwarded again.
    @Test func duplicateRegistrationMakesNoCallUnderTheSameSessionOnly() async throws {
        try await withSidecar(MockFluxer(sessions: [Self.session, "rotated-session"]), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            #expect(try await h.post("/installations", body, headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            #expect(try await h.post("/installations", body, headers: Self.fluxerHeaders).outcome("fluxer") == "unchanged")
            #expect(mock.received.count == 1)
            let again = try await h.post("/installations", body, headers: ["X-Fluxer-Session": "rotated-session"])
            #expect(again.status == 202)
            #expect(again.outcome("fluxer") == "forwarded")
            #expect(mock.received.count == 2)
        }
    }

    @Test func contactChangeIsForwardedAgain() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            #expect(try await h.post("/installations", body, contact: "alice", headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob", headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob", headers: Self.fluxerHeaders).outcome("fluxer") == "unchanged")
            #expect(mock.registers.count == 2)
            #expect(mock.registers[0].bodyText == mock.registers[1].bodyText)
        }
    }

    /// The same token registered for another environment is another registration at Fluxer:
    /// the one made with the old values is removed.
    @Test func environmentChangeRemovesTheRegistrationLeftBehind() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let token = Harness.apnsToken().lowercased()
            #expect(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)","environment":"sandbox"}"#,
                                     headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            #expect(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)","environment":"production"}"#,
                                     headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            #expect(mock.received.map(\.path) == [MockFluxer.registerPath, MockFluxer.registerPath, MockFluxer.unregisterPath])
            #expect(mock.unregisters[0].bodyText == #"{"platform":"ios_apns","token":"\#(token)","app_id":"stable","provider_environment":"development"}"#)
            #expect(mock.registrations(session: Self.session).values.map(\.providerEnvironment) == ["production"])
        }
    }

    @Test func rotationRegistersTheNewTokenAndRemovesTheOldOneWithItsFourValues() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let old = Harness.apnsToken().lowercased(), new = Harness.apnsToken().lowercased()
            #expect(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(old)","environment":"sandbox"}"#,
                                     headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            let reply = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(new)","environment":"sandbox","previous_push_token":"\#(old)"}"#,
                                         headers: Self.fluxerHeaders)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "forwarded")
            #expect(mock.received.map(\.path) == [MockFluxer.registerPath, MockFluxer.registerPath, MockFluxer.unregisterPath])
            #expect(mock.registers[1].bodyText == #"{"platform":"ios_apns","token":"\#(new)","app_id":"stable","provider_environment":"development"}"#)
            #expect(mock.unregisters[0].bodyText == #"{"platform":"ios_apns","token":"\#(old)","app_id":"stable","provider_environment":"development"}"#)
            #expect(mock.unregisters[0].headers["Authorization"] == Self.session)
            // Fluxer really removed the old registration: only the new one is left.
            #expect(mock.registrations(session: Self.session).values.map(\.token) == [new])
            // The old token's identity is gone: unregistering it now has nothing to name.
            let gone = try await h.post("/installations/unregister", #"{"push_token":"\#(old)"}"#, headers: Self.fluxerHeaders)
            #expect(gone.outcome("fluxer") == "skipped")
            #expect(mock.unregisters.count == 1)
            Self.expectClean(h, [old, new])
        }
    }

    @Test func rotationFromATokenNeverRegisteredHereStillRemovesItOnTheSameTransport() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let old = Self.fcmToken(), new = Self.fcmToken()
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#,
                                         headers: Self.fluxerHeaders)
            #expect(reply.outcome("fluxer") == "forwarded")
            try #require(mock.unregisters.count == 1)
            #expect(mock.unregisters[0].bodyText == #"{"platform":"android_fcm","token":"\#(old)","app_id":"stable"}"#)
        }
    }

    // MARK: Unregister

    @Test func unregisterSendsTheSameFourValuesAndRemovesTheRegistration() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let url = Self.endpoint(), keys = Self.keys()
            #expect(try await h.post("/installations", """
                {"platform":"ios","push_token":"\(url)","web_push_keys":{"p256dh":"\(keys.p256dh)","auth":"\(keys.auth)"},"environment":"sandbox"}
                """, headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            #expect(mock.registrations(session: Self.session).count == 1)

            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(url)"}"#, headers: Self.fluxerHeaders)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "forwarded")
            try #require(mock.unregisters.count == 1)
            let call = mock.unregisters[0]
            #expect(call.method == "POST")
            #expect(call.path == "/v1/users/@me/mobile-devices/unregister")
            #expect(call.headers["Authorization"] == Self.session)
            #expect(call.bodyText == #"{"platform":"ios_apns","token":"\#(url)","app_id":"stable","provider_environment":"development"}"#)
            #expect(mock.registrations(session: Self.session).isEmpty)

            // A second unregister: nothing is known any more, success without a call.
            let second = try await h.post("/installations/unregister", #"{"push_token":"\#(url)"}"#, headers: Self.fluxerHeaders)
            #expect(second.status == 202)
            #expect(second.outcome("fluxer") == "skipped")
            #expect(mock.unregisters.count == 1)
            Self.expectClean(h, [url, keys.p256dh, keys.auth])
        }
    }

    @Test func unregisterOfARegistrationFluxerNoLongerHasIsSuccess() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let token = Self.fcmToken()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#,
                                     headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            mock.reset()  // Fluxer dropped it (the endpoint answered 410, say).
            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#, headers: Self.fluxerHeaders)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "forwarded")
            #expect(mock.unregisters.count == 1)
            #expect(mock.unregisters[0].bodyText == #"{"platform":"android_fcm","token":"\#(token)","app_id":"stable"}"#)
        }
    }

    @Test func unregisterOfATokenNeverRegisteredIsSkipped() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(Self.fcmToken())"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "skipped")
            #expect(mock.received.isEmpty)
        }
    }

    // MARK: The user's session

    @Test func withoutTheFluxerSessionNothingIsSentAndTheClientGets401() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let token = Self.fcmToken()
            let register = #"{"platform":"android","push_token":"\#(token)"}"#
            let refused = try await h.post("/installations", register)
            #expect(refused.status == 401)
            #expect(refused.errorCode == "unauthorized")
            #expect(refused.text.contains("X-Fluxer-Session"))
            let empty = try await h.post("/installations", register, headers: ["X-Fluxer-Session": "  "])
            #expect(empty.status == 401)
            #expect(mock.received.isEmpty)

            #expect(try await h.post("/installations", register, headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            let unregister = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
            #expect(unregister.status == 401)
            #expect(unregister.errorCode == "unauthorized")
            #expect(mock.unregisters.isEmpty)
            // The identity was kept: with the session the removal still names the registration.
            let retried = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#, headers: Self.fluxerHeaders)
            #expect(retried.outcome("fluxer") == "forwarded")
            #expect(mock.registrations(session: Self.session).isEmpty)
        }
    }

    /// Fluxer's 401/403 refuse the USER's session, so they must not be 502 `upstream_auth_failed`
    /// (an operator problem): the client gets 401 `unauthorized` or 403 `forbidden` with Fluxer's code
    /// (`UNAUTHORIZED`, which seed 002 does not name, as `unknown:<hash>`).
    @Test(arguments: [
        ("Bot MTIzNDU2Nzg5MDEy.bot-token", "ACCESS_DENIED"),
        ("Bearer oauth2-access-token", "ACCESS_DENIED"),
        ("suspicious-user-session", "ACCOUNT_SUSPICIOUS_ACTIVITY"),
        ("expired-user-session", "UNAUTHORIZED"),
    ])
    func refusedUserSessionIsNotAnOperatorProblem(_ credential: String, _ code: String) async throws {
        try await withSidecar(MockFluxer(suspicious: ["suspicious-user-session"]), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#,
                                         headers: ["X-Fluxer-Session": credential])
            #expect(reply.status != 502)
            let unauthorized = code == "UNAUTHORIZED"
            #expect(reply.status == (unauthorized ? 401 : 403))
            #expect(reply.errorCode == (unauthorized ? "unauthorized" : "forbidden"))
            let shown = unauthorized ? UpstreamCodeTests.unknown(code) : code
            #expect(reply.json?["error"]?.objectValue?["upstream_code"]?.stringValue == shown)
            #expect(mock.received.count == 1, "a refused session is not retried")
            Self.expectClean(h, [credential])
        }
    }

    // MARK: Validation before any call

    @Test func rawVoIPTokenIsRefusedBeforeAnyCall() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let reply = try await h.post("/installations", #"{"platform":"ios","push_service":"apns_voip","push_token":"\#(Harness.apnsToken())"}"#,
                                         headers: Self.fluxerHeaders)
            #expect(reply.status == 400)
            #expect(reply.errorCode == "invalid_web_push")
            #expect(reply.errorField == "web_push_keys")
            #expect(mock.received.isEmpty)
        }
    }

    @Test func privateEndpointHostIsRefusedBeforeAnyCall() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let keys = Self.keys()
            let reply = try await h.post("/installations", """
                {"platform":"android","push_service":"fcm","push_token":"https://10.0.0.7/push/\(UUID().uuidString)","web_push_keys":{"p256dh":"\(keys.p256dh)","auth":"\(keys.auth)"}}
                """, headers: Self.fluxerHeaders)
            #expect(reply.status == 400)
            #expect(reply.errorCode == "url_not_publicly_routable")
            #expect(reply.errorField == "push_token")
            #expect(mock.received.isEmpty)
        }
    }

    @Test func webPushOnTheWebIsNotAFluxerPlatform() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            let keys = Self.keys()
            let reply = try await h.post("/installations", """
                {"platform":"web","push_token":"\(Self.endpoint())","web_push_keys":{"p256dh":"\(keys.p256dh)","auth":"\(keys.auth)"}}
                """)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "skipped")
            #expect(mock.received.isEmpty)
        }
    }

    // MARK: Upstream errors

    @Test func invalidFormBodyIsUpstreamRejectedWithFluxersCode() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            mock.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"],
                               body: #"{"code":"INVALID_FORM_BODY","message":"Invalid Form Body","errors":{"token":{"_errors":[{"code":"BASE_TYPE_BAD_LENGTH","message":"x"}]}}}"#))
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            let reply = try await h.post("/installations", body, headers: Self.fluxerHeaders)
            #expect(reply.status == 422)
            #expect(reply.errorCode == "upstream_rejected")
            #expect(reply.json?["error"]?.objectValue?["upstream_code"]?.stringValue == "INVALID_FORM_BODY")
            #expect(mock.received.count == 1)
            // A refusal is never remembered as a success.
            #expect(try await h.post("/installations", body, headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
        }
    }

    @Test func serverErrorsAreRetriedThen503() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            mock.enqueue(.init(status: 500), .init(status: 502))
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            let reply = try await h.post("/installations", body, headers: Self.fluxerHeaders)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            #expect(reply.headers["Retry-After"] != nil)
            #expect(mock.registers.count == 2)
            #expect(try await h.post("/installations", body, headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
        }
    }

    @Test func rateLimitIsRetriedAfterFluxersDelayWithinTheBudget() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            mock.enqueue(.init(status: 429, headers: ["Retry-After": "1"], body: #"{"code":"RATE_LIMITED","message":"slow down","retry_after":0.5,"global":false}"#))
            let started = Date()
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#, headers: Self.fluxerHeaders)
            #expect(reply.status == 202)
            #expect(reply.outcome("fluxer") == "forwarded")
            #expect(mock.registers.count == 2)
            #expect(Date().timeIntervalSince(started) >= 0.9)
        }
    }

    @Test func rateLimitBeyondTheBudgetIs503WithFluxersDelay() async throws {
        try await withSidecar(MockFluxer(), { mock in try await SidecarHarness(upstreams: Self.upstream(mock)) }) { h, mock async throws in
            // The document's own limit: the 21st registration in a minute is refused for ~60s.
            for _ in 0..<20 {
                #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#,
                                         headers: Self.fluxerHeaders).outcome("fluxer") == "forwarded")
            }
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#, headers: Self.fluxerHeaders)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            let retryAfter = try #require(reply.headers["Retry-After"].flatMap { Int($0) })
            #expect(retryAfter > 50 && retryAfter <= 60)
            #expect(mock.registers.count == 21)
        }
    }

    // MARK: Reading Fluxer's answers

    @Test func answersAreReadAsTheDocumentSays() throws {
        let adapter = FluxerAdapter(name: "fluxer", config: FluxerConfig(baseURL: "https://api.fluxer.app", sessionHeader: "X-Fluxer-Session"))
        func answer(_ status: Int, _ body: String, _ headers: HTTPHeaders = [:]) -> HTTPClientResponse {
            HTTPClientResponse(status: status, headers: headers, body: Array(body.utf8))
        }
        #expect(adapter.verdict(for: answer(200, #"{"success":true}"#), operation: .unregister) == .accepted)
        #expect(adapter.verdict(for: answer(400, #"{"code":"INVALID_FORM_BODY","message":"x"}"#), operation: .register)
                == .rejected(code: "INVALID_FORM_BODY"))
        #expect(adapter.verdict(for: answer(403, #"{"code":"ACCOUNT_SUSPICIOUS_ACTIVITY","message":"x"}"#), operation: .register)
                == .callerRefused(forbidden: true, code: "ACCOUNT_SUSPICIOUS_ACTIVITY"))
        #expect(adapter.verdict(for: answer(401, "not json"), operation: .unregister) == .callerRefused(forbidden: false, code: nil))
        #expect(adapter.verdict(for: answer(429, #"{"code":"RATE_LIMITED","retry_after":2.25}"#), operation: .register) == .retry(afterSeconds: 3))
        #expect(adapter.verdict(for: answer(429, "{}", ["Retry-After": "7"]), operation: .register) == .retry(afterSeconds: 7))
        #expect(adapter.verdict(for: answer(503, ""), operation: .register) == .retry(afterSeconds: nil))

        // A dry run answers as Fluxer would, and the identity keeps the four values' three plus the id.
        let installation = Installation(platform: .ios, pushService: .apns, pushToken: Harness.apnsToken().lowercased(), environment: .sandbox)
        let request = try adapter.registerRequest(installation, context: CallContext(contactID: "c", clientHeaders: Self.fluxerHeaders),
                                                  identity: nil, previous: nil)
        #expect(request.url == "https://api.fluxer.app/v1/users/@me/mobile-devices")
        let response = adapter.emulatedResponse(to: request)
        #expect(response.status == 200)
        let identity = try #require(adapter.identity(after: response, installation: installation, current: nil, previous: nil))
        #expect(identity["platform"] == "ios_apns")
        #expect(identity["app_id"] == "stable")
        #expect(identity["provider_environment"] == "development")
        #expect(identity["device_id"].map(FluxerAdapter.isDeviceID) == true)
        #expect(identity.values.count == 4)
    }

    // MARK: Next to another provider

    @Test func failingFluxerShadowNeverFailsTheVoyadoPrimary() async throws {
        let mock = try MockFluxer(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado, role: "primary") + "\n" + Self.upstream(mock, role: "shadow"),
                                         secrets: [.env("VOYADO_KEY"): "voyado-key"])
        mock.enqueue(.init(status: 503), .init(status: 503))
        let token = Self.fcmToken()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#, headers: Self.fluxerHeaders)
        #expect(reply.status == 202)
        #expect(reply.outcome("voyado") == "forwarded")
        #expect(reply.outcome("fluxer") == "failed")
        #expect(mock.registers.count == 2)
        #expect(voyado.received(path: "/installations").count == 1)
        // Without the Fluxer session the shadow is refused before any call; the primary still answers.
        let other = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
        #expect(other.status == 202)
        #expect(other.outcome("voyado") == "forwarded")
        #expect(other.outcome("fluxer") == "failed")
        #expect(mock.registers.count == 2)
        #expect(h.logs.text.contains("shadow upstream failed"))
        Self.expectClean(h, [token])
        await h.stop()
        await mock.stop()
        await voyado.stop()
    }

    @Test func failingVoyadoShadowNeverFailsTheFluxerPrimary() async throws {
        let mock = try MockFluxer(), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.upstream(mock, role: "primary") + "\n" + Self.voyado(voyado, role: "shadow"),
                                         secrets: [.env("VOYADO_KEY"): "voyado-key"])
        voyado.enqueue(.init(status: 503), .init(status: 503))
        let token = Harness.apnsToken().lowercased()
        let reply = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)"}"#, headers: Self.fluxerHeaders)
        #expect(reply.status == 202)
        #expect(reply.outcome("fluxer") == "forwarded")
        #expect(reply.outcome("voyado") == "failed")
        #expect(mock.registers.count == 1)
        #expect(mock.registers[0].bodyText == #"{"platform":"ios_apns","token":"\#(token)","app_id":"stable","provider_environment":"production"}"#)
        // The Fluxer primary refusing the missing session answers the client.
        let refused = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#)
        #expect(refused.status == 401)
        Self.expectClean(h, [token, "voyado-key"])
        await h.stop()
        await mock.stop()
        await voyado.stop()
    }
}
