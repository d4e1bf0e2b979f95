import ClientAPI
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

/// End to end against a mock Native Notify that follows seed document 003: what the sidecar sends
/// (exactly), how it keeps Native Notify's `deviceId` per token chain, and how Native Notify's
/// rules and answers reach the client as the contract's codes.
@Suite struct NativeNotifyTests {
    static let appToken = "nn-app-token-7f3a9c"
    static let register = "/api/universal/device/register"
    static let deregister = "/api/universal/device/deregister"

    static func upstream(_ mock: MockNativeNotify, name: String = "nn", role: String = "primary", extra: String = "") -> String {
        """
              - name: \(name)
                provider: nativenotify
                role: \(role)
                base_url: \(mock.baseURL)
                app_id: \(mock.appID)
                app_token: {env: NN_TOKEN}
                retry: {attempts: 2, backoff: 10ms, max_backoff: 20ms}\(extra)
        """
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

    static func harness(_ mock: MockNativeNotify, token: String = appToken, extra: String = "") async throws -> SidecarHarness {
        try await SidecarHarness(upstreams: upstream(mock, extra: extra), secrets: [.env("NN_TOKEN"): token])
    }

    static func fcmToken() -> String { "fcm:" + UUID().uuidString + "-" + UUID().uuidString }
    static func webKeys() -> String {
        let p256dh = Base64URL.encode([4] + (0..<64).map { _ in UInt8.random(in: 0...255) })
        let auth = Base64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255) })
        return #"{"p256dh":"\#(p256dh)","auth":"\#(auth)"}"#
    }

    /// No secret and no raw token ever reaches the logs.
    static func expectClean(_ h: SidecarHarness, _ secrets: [String]) {
        let logs = h.logs.text
        #expect(!logs.contains(appToken))
        for secret in secrets { #expect(!logs.contains(secret)) }
    }

    // MARK: Register

    @Test func firstRegistrationSendsTheDocumentedBodyAndDuplicatesAreNotSent() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock, extra: "\n        environment: staging\n        framework: Flutter") }) { h, mock async throws in
            let token = Harness.apnsToken()
            let body = #"{"platform":"ios","push_token":"\#(token)","app_version":" 2.4.0 ","timezone":"America/New_York","locale":"en-US","os_version":"26.1"}"#
            let reply = try await h.post("/installations", body)
            #expect(reply.status == 202)
            #expect(reply.outcome("nn") == "forwarded")

            let calls = mock.received
            try #require(calls.count == 1)
            #expect(calls[0].method == "POST")
            #expect(calls[0].path == Self.register)
            #expect(calls[0].headers["Content-Type"] == "application/json")
            #expect(calls[0].headers["Authorization"] == nil)
            let sent = try #require(calls[0].object)
            #expect(sent.keys == ["appId", "appToken", "deviceId", "platform", "subscriberId", "appVersion", "timezone",
                                  "environment", "framework", "tokens"])
            #expect(sent["appId"] == .number("123"))
            #expect(sent["appToken"] == .string(Self.appToken))
            let deviceID = try #require(sent["deviceId"]?.stringValue)
            #expect(deviceID.hasPrefix("pw-") && deviceID.count == 25)
            #expect(sent["platform"] == "ios")
            #expect(sent["subscriberId"] == "alice")
            #expect(sent["appVersion"] == "2.4.0")
            #expect(sent["timezone"] == "America/New_York")
            #expect(sent["environment"] == "staging")
            #expect(sent["framework"] == "Flutter")
            #expect(sent["tokens"] == .object(JSONObject([JSONMember("apnsToken", .string(token.lowercased()))])))
            #expect(mock.device(deviceID)?.tokens == ["apnsToken": token.lowercased()])

            let again = try await h.post("/installations", body)
            #expect(again.status == 202)
            #expect(again.outcome("nn") == "unchanged")
            #expect(mock.received.count == 1)
            Self.expectClean(h, [token, token.lowercased()])
        }
    }

    @Test func installationIDIsTheDeviceIDAndWebPushIsSentAsASubscription() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let installation = "install-" + UUID().uuidString
            let fcm = Self.fcmToken()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(fcm)","installation_id":"\#(installation)"}"#)
                .outcome("nn") == "forwarded")
            let endpoint = "https://fcm.googleapis.com/fcm/send/" + UUID().uuidString
            let keys = Self.webKeys()
            #expect(try await h.post("/installations", #"{"platform":"web","push_token":"\#(endpoint)","web_push_keys":\#(keys)}"#)
                .outcome("nn") == "forwarded")

            let calls = mock.registrations
            try #require(calls.count == 2)
            let android = try #require(calls[0].object)
            #expect(android.keys == ["appId", "appToken", "deviceId", "platform", "subscriberId", "environment", "tokens"])
            #expect(android["deviceId"] == .string(installation))
            #expect(android["platform"] == "android")
            #expect(android["environment"] == "production")
            #expect(android["tokens"] == .object(JSONObject([JSONMember("fcmToken", .string(fcm))])))
            let web = try #require(calls[1].object)
            #expect(web.keys == ["appId", "appToken", "deviceId", "platform", "subscriberId", "environment", "webPush"])
            #expect(web["platform"] == "web")
            let subscription = try #require(web["webPush"]?.objectValue)
            #expect(subscription.keys == ["endpoint", "keys"])
            #expect(subscription["endpoint"] == .string(endpoint))
            #expect(subscription["keys"] == (try JSONValue.parse(keys)))
            #expect(mock.device(installation)?.tokens == ["fcmToken": fcm])
            Self.expectClean(h, [fcm, endpoint])
        }
    }

    @Test func servicesNativeNotifyDoesNotHaveAreSkipped() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let voip = try await h.post("/installations", #"{"platform":"ios","push_service":"apns_voip","push_token":"\#(Harness.apnsToken())"}"#)
            #expect(voip.status == 202)
            #expect(voip.outcome("nn") == "skipped")
            let unified = try await h.post("/installations", #"""
                {"platform":"android","push_service":"unified_push","push_token":"https://ntfy.example.com/up\#(UUID().uuidString)","web_push_keys":\#(Self.webKeys())}
                """#)
            #expect(unified.status == 202)
            #expect(unified.outcome("nn") == "skipped")
            #expect(mock.received.isEmpty)
        }
    }

    // MARK: Identity across calls

    @Test func rotationKeepsTheDeviceAndRemovesNothing() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let old = Self.fcmToken(), new = Self.fcmToken()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome("nn") == "forwarded")
            let rotated = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
            #expect(rotated.status == 202)
            #expect(rotated.outcome("nn") == "forwarded")

            let calls = mock.registrations
            try #require(calls.count == 2)
            let deviceID = try #require(calls[0].object?["deviceId"]?.stringValue)
            #expect(calls[1].object?["deviceId"] == .string(deviceID))
            #expect(calls[1].object?["tokens"] == .object(JSONObject([JSONMember("fcmToken", .string(new))])))
            #expect(mock.deregistrations.isEmpty)
            #expect(mock.devices.count == 1)
            #expect(mock.device(deviceID)?.tokens == ["fcmToken": new])

            // The device is now kept under the new token only.
            let gone = try await h.post("/installations/unregister", #"{"push_token":"\#(old)"}"#)
            #expect(gone.status == 202)
            #expect(gone.outcome("nn") == "skipped")
            #expect(mock.deregistrations.isEmpty)
            let removed = try await h.post("/installations/unregister", #"{"push_token":"\#(new)"}"#)
            #expect(removed.outcome("nn") == "forwarded")
            #expect(mock.deregistrations.map(\.bodyText) == [#"{"appId":123,"appToken":"\#(Self.appToken)","deviceId":"\#(deviceID)"}"#])
            #expect(mock.devices.isEmpty)
            Self.expectClean(h, [old, new])
        }
    }

    @Test func rotationOntoAnotherInstallationIDDeregistersTheOldDevice() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let old = Harness.apnsToken(), new = Harness.apnsToken()
            let first = "ios-" + UUID().uuidString, second = "ios-" + UUID().uuidString
            #expect(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(old)","installation_id":"\#(first)"}"#)
                .outcome("nn") == "forwarded")
            #expect(try await h.post("/installations", #"""
                {"platform":"ios","push_token":"\#(new)","previous_push_token":"\#(old)","installation_id":"\#(second)"}
                """#).outcome("nn") == "forwarded")
            #expect(mock.registrations.compactMap { $0.object?["deviceId"]?.stringValue } == [first, second])
            #expect(mock.deregistrations.map(\.bodyText) == [#"{"appId":123,"appToken":"\#(Self.appToken)","deviceId":"\#(first)"}"#])
            #expect(mock.device(first) == nil)
            #expect(mock.device(second)?.tokens == ["apnsToken": new.lowercased()])
        }
    }

    @Test func contactChangeIsForwardedToTheSameDevice() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            #expect(try await h.post("/installations", body, contact: "alice").outcome("nn") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob").outcome("nn") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob").outcome("nn") == "unchanged")
            let calls = mock.registrations
            #expect(calls.compactMap { $0.object?["subscriberId"]?.stringValue } == ["alice", "bob"])
            let devices = Set(calls.compactMap { $0.object?["deviceId"]?.stringValue })
            #expect(devices.count == 1)
            #expect(mock.device(try #require(devices.first))?.subscriberID == "bob")
        }
    }

    /// A new `installation_id` for the same token (a reinstall that kept the token) moves the
    /// token to another device; the old device, left without a token, is deregistered.
    @Test func installationIDChangeDeregistersTheDeviceLeftBehind() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Self.fcmToken()
            let first = "first-" + UUID().uuidString, second = "second-" + UUID().uuidString
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)","installation_id":"\#(first)"}"#)
                .outcome("nn") == "forwarded")
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)","installation_id":"\#(second)"}"#)
                .outcome("nn") == "forwarded")
            #expect(mock.registrations.last?.object?["deviceId"] == .string(second))
            #expect(mock.deregistrations.count == 1)
            #expect(mock.deregistrations.first?.object?["deviceId"] == .string(first))
            // The token's identity is the new device: unregister removes that one.
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("nn") == "forwarded")
            #expect(mock.deregistrations.last?.object?["deviceId"] == .string(second))
        }
    }

    @Test func unregisterOfADeviceAlreadyGoneAtNativeNotifyIsSuccess() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Self.fcmToken()
            let installation = "gone-" + UUID().uuidString
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)","installation_id":"\#(installation)"}"#)
                .outcome("nn") == "forwarded")
            mock.removeDevice(installation)  // deleted in Native Notify's dashboard meanwhile
            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("nn") == "forwarded")
            #expect(mock.deregistrations.count == 1)
            #expect(mock.deregistrations.first?.object?["deviceId"] == .string(installation))
            // A second unregister knows no device any more: nothing is sent.
            let again = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
            #expect(again.status == 202)
            #expect(again.outcome("nn") == "skipped")
            #expect(mock.deregistrations.count == 1)
            // Unregister forgot the dedupe entry: the same registration is forwarded again.
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)","installation_id":"\#(installation)"}"#)
                .outcome("nn") == "forwarded")
        }
    }

    // MARK: Native Notify's rules, before any call

    @Test func nativeNotifyRulesAnswerWithTheContractsCodesWithoutACall() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let cases: [(body: String, contact: String, status: Int, code: String, field: String?)] = [
                // The Web Push form of APNs: Native Notify takes webPush only from platform web.
                (#"{"platform":"ios","push_token":"https://web.push.apple.com/\#(UUID().uuidString)","web_push_keys":\#(Self.webKeys())}"#,
                 "alice", 400, "token_platform_mismatch", "push_token"),
                (#"{"platform":"android","push_token":"https://fcm.googleapis.com/wp/\#(UUID().uuidString)","web_push_keys":\#(Self.webKeys())}"#,
                 "alice", 400, "token_platform_mismatch", "push_token"),
                (#"{"platform":"android","push_token":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"}"#, "alice", 400, "unsupported_token_type", "push_token"),
                (#"{"platform":"android","push_token":"\#(Self.fcmToken())","app_version":"\#(String(repeating: "1", count: 51))"}"#,
                 "alice", 400, "invalid_request", "app_version"),
                (#"{"platform":"android","push_token":"\#(Self.fcmToken())","timezone":"Etc/\#(String(repeating: "x", count: 57))"}"#,
                 "alice", 400, "invalid_request", "timezone"),
                // 129 astral characters: within the session's 256 characters, over Native Notify's 256 UTF-16 units.
                (#"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#, String(repeating: "😀", count: 129), 422,
                 "upstream_rejected", nil),
            ]
            for c in cases {
                let reply = try await h.post("/installations", c.body, contact: c.contact)
                #expect(reply.status == c.status, "\(c.code)")
                #expect(reply.errorCode == c.code)
                #expect(reply.errorField == c.field)
            }
            let last = try await h.post("/installations", cases[5].body, contact: cases[5].contact)
            #expect(last.json?["error"]?.objectValue?["upstream_code"] == "invalid_subscriber_id")
            #expect(mock.received.isEmpty)
        }
    }

    // MARK: Native Notify's answers

    @Test func refusalsReachTheClientWithNativeNotifysCode() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let body = #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#
            mock.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"],
                               body: #"{"error":{"code":"invalid_token_format","message":"Token does not match its shape","field":"tokens.fcmToken"}}"#))
            let refused = try await h.post("/installations", body)
            #expect(refused.status == 422)
            #expect(refused.errorCode == "upstream_rejected")
            #expect(refused.json?["error"]?.objectValue?["upstream_code"] == "invalid_token_format")
            #expect(mock.registrations.count == 1)
            // A refusal is not remembered: the next try reaches Native Notify again.
            #expect(try await h.post("/installations", body).outcome("nn") == "forwarded")
            #expect(mock.registrations.count == 2)
        }
    }

    @Test func disabledEnvironmentIsRejectedWithItsCode() async throws {
        let mock = try MockNativeNotify(appToken: Self.appToken)
        mock.disable(environment: "development")
        let h = try await Self.harness(mock, extra: "\n        environment: development")
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
        #expect(reply.status == 422)
        #expect(reply.errorCode == "upstream_rejected")
        #expect(reply.json?["error"]?.objectValue?["upstream_code"] == "environment_disabled")
        #expect(mock.registrations.count == 1)
        #expect(mock.devices.isEmpty)
        #expect(h.logs.text.contains("environment_disabled"))
        await h.stop()
        await mock.stop()
    }

    @Test func wrongAppTokenIsAnOperatorProblem() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock, token: "nn-wrong-token-d41d8c") }) { h, mock async throws in
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
            #expect(reply.status == 502)
            #expect(reply.errorCode == "upstream_auth_failed")
            #expect(mock.registrations.count == 1)  // a 401 is not retried
            #expect(!h.logs.text.contains("nn-wrong-token-d41d8c"))
        }
    }

    @Test func serverErrorsAreRetriedThenUnavailable() async throws {
        try await withSidecar(MockNativeNotify(appToken: Self.appToken), { mock in try await Self.harness(mock) }) { h, mock async throws in
            mock.enqueue(.init(status: 503), .init(status: 500))
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            #expect(reply.headers["Retry-After"] != nil)
            #expect(mock.registrations.count == 2)
        }
    }

    // MARK: Beside another provider

    @Test func failingNativeNotifyShadowNeverFailsTheVoyadoPrimary() async throws {
        let nn = try MockNativeNotify(appToken: Self.appToken), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.voyado(voyado, role: "primary") + "\n" + Self.upstream(nn, role: "shadow"),
                                         secrets: [.env("NN_TOKEN"): Self.appToken, .env("VOYADO_KEY"): "voyado-key"])
        nn.enqueue(.init(status: 500), .init(status: 500))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome("voyado") == "forwarded")
        #expect(reply.outcome("nn") == "failed")
        #expect(nn.registrations.count == 2)
        // A rule only Native Notify has fails only Native Notify, without a call to it.
        let long = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcmToken())","app_version":"\#(String(repeating: "9", count: 55))"}"#)
        #expect(long.status == 202)
        #expect(long.outcome("voyado") == "forwarded")
        #expect(long.outcome("nn") == "failed")
        #expect(nn.registrations.count == 2)
        #expect(voyado.received(path: "/installations").count == 2)
        await h.stop()
        await nn.stop()
        await voyado.stop()
    }

    @Test func failingVoyadoShadowNeverFailsTheNativeNotifyPrimary() async throws {
        let nn = try MockNativeNotify(appToken: Self.appToken), voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: Self.upstream(nn, role: "primary") + "\n" + Self.voyado(voyado, role: "shadow"),
                                         secrets: [.env("NN_TOKEN"): Self.appToken, .env("VOYADO_KEY"): "voyado-key"])
        voyado.enqueue(.init(status: 503), .init(status: 503))
        let token = Self.fcmToken()
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome("nn") == "forwarded")
        #expect(reply.outcome("voyado") == "failed")
        #expect(nn.registrations.count == 1)
        // Web push: Voyado skips it, Native Notify takes it.
        let web = try await h.post("/installations", #"{"platform":"web","push_token":"https://updates.push.services.mozilla.com/wpush/v2/\#(UUID().uuidString)","web_push_keys":\#(Self.webKeys())}"#)
        #expect(web.outcome("nn") == "forwarded")
        #expect(web.outcome("voyado") == "skipped")
        let gone = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
        #expect(gone.outcome("nn") == "forwarded")
        #expect(nn.deregistrations.count == 1)
        Self.expectClean(h, [token, "voyado-key"])
        await h.stop()
        await nn.stop()
        await voyado.stop()
    }

    // MARK: The adapter alone

    @Test func deviceIDsFollowTheTokenChain() throws {
        let adapter = NativeNotifyAdapter(name: "nn", config: NativeNotifyConfig(appID: 7, appToken: .env("X")), appToken: Array("k1".utf8))
        let other = NativeNotifyAdapter(name: "nn", config: NativeNotifyConfig(appID: 7, appToken: .env("X")), appToken: Array("k2".utf8))
        let token = Self.fcmToken()
        let plain = Installation(platform: .android, pushService: .fcm, pushToken: token)
        let derived = adapter.deviceID(for: plain, current: nil, previous: nil)
        #expect(derived.hasPrefix("pw-") && derived.count == 25)
        #expect(adapter.deviceID(for: plain, current: nil, previous: nil) == derived)  // a re-sent first registration lands on the same device
        #expect(other.deviceID(for: plain, current: nil, previous: nil) != derived)   // keyed: not a bare hash of the token
        let kept = UpstreamIdentity(["deviceId": "kept"]), chain = UpstreamIdentity(["deviceId": "chain"])
        #expect(adapter.deviceID(for: plain, current: kept, previous: nil) == "kept")
        #expect(adapter.deviceID(for: plain, current: kept, previous: chain) == "chain")
        var withID = plain
        withID.installationID = "install-1"
        #expect(adapter.deviceID(for: withID, current: kept, previous: chain) == "install-1")
        // Retirement: nothing while the chain stays on its device, the old device when it moved.
        #expect(adapter.retireRequest(previousToken: "old", installation: plain, context: CallContext(contactID: "a"), identity: chain) == nil)
        let retire = try #require(adapter.retireRequest(previousToken: "old", installation: withID, context: CallContext(contactID: "a"), identity: chain))
        #expect(retire.url == "https://app.nativenotify.com/api/universal/device/deregister")
        #expect(String(decoding: retire.body, as: UTF8.self) == #"{"appId":7,"appToken":"k1","deviceId":"chain"}"#)
        #expect(adapter.unregisterRequest(pushToken: token, context: CallContext(contactID: "a"), identity: nil) == nil)
    }

    @Test func emulatedAnswersAreTheDocumentedOnes() throws {
        let adapter = NativeNotifyAdapter(name: "nn", config: NativeNotifyConfig(appID: 7, appToken: .env("X")), appToken: Array("k".utf8))
        let installation = Installation(platform: .ios, pushService: .apns, pushToken: String(repeating: "ab", count: 32))
        let request = try adapter.registerRequest(installation, context: CallContext(contactID: "alice"), identity: nil, previous: nil)
        let answer = adapter.emulatedResponse(to: request)
        #expect(answer.status == 201)
        let body = try #require((try? JSONValue.parse(answer.body))?.objectValue)
        #expect(body["tokens"] == .object(JSONObject([JSONMember("apnsToken", "registered")])))
        #expect(body["device"]?.objectValue?["subscriberId"] == "alice")
        #expect(adapter.verdict(for: answer, operation: .register) == .accepted)
        let removal = try #require(adapter.unregisterRequest(pushToken: installation.pushToken, context: CallContext(contactID: "alice"),
                                                             identity: UpstreamIdentity(["deviceId": "d1"])))
        let removed = adapter.emulatedResponse(to: removal)
        #expect(removed.status == 200)
        #expect(String(decoding: removed.body, as: UTF8.self) == #"{"ok":true,"deviceId":"d1","removed":false,"tokensRemoved":0}"#)
        #expect(adapter.verdict(for: HTTPClientResponse(status: 401, headers: [:], body: Array("Unauthorized".utf8)), operation: .register) == .authFailed)
        #expect(adapter.verdict(for: HTTPClientResponse(status: 429, headers: ["Retry-After": "3"], body: []), operation: .register) == .retry(afterSeconds: 3))
    }

    // MARK: The mock follows the document

    @Test func mockFollowsTheDocument() async throws {
        let mock = try MockNativeNotify(appToken: Self.appToken)
        let client = try HTTPClient()
        func post(_ path: String, _ body: String) async throws -> (Int, String) {
            let r = try await client.execute(HTTPClientRequest(method: "POST", url: mock.baseURL + path, headers: ["Content-Type": "application/json"],
                                                               body: Array(body.utf8), timeoutMillis: 5000))
            return (r.status, String(decoding: r.body, as: UTF8.self))
        }
        let auth = #""appId":123,"appToken":"\#(Self.appToken)""#
        let hex = String(repeating: "0c", count: 32)
        let fcm = Self.fcmToken()
        func code(_ reply: (Int, String)) -> String? { (try? JSONValue.parse(reply.1))?.objectValue?["error"]?.objectValue?["code"]?.stringValue }

        #expect(try await post(Self.register, #"{"appId":123,"appToken":"wrong","deviceId":"d","platform":"ios","tokens":{"apnsToken":"\#(hex)"}}"#) == (401, "Unauthorized"))
        #expect(code(try await post(Self.register, "[1]")) == "invalid_body")
        #expect(code(try await post(Self.register, #"{\#(auth),"platform":"ios"}"#)) == "missing_field")
        #expect(code(try await post(Self.register, #"{"appId":"123","appToken":"x","deviceId":"d","platform":"ios"}"#)) == "invalid_field")
        #expect(code(try await post(Self.register, #"{\#(auth),"deviceId":"d","platform":"ios"}"#)) == "no_tokens_provided")
        #expect(code(try await post(Self.register, #"{\#(auth),"deviceId":"d","platform":"ios","tokens":{"fcmToken":"\#(fcm)"}}"#)) == "token_platform_mismatch")
        #expect(code(try await post(Self.register, #"{\#(auth),"deviceId":"d","platform":"android","tokens":{"fcm_token":"ExponentPushToken[abcdefghijklmnopqrstuvwxyz]"}}"#)) == "unsupported_token_type")
        #expect(code(try await post(Self.register, #"{\#(auth),"deviceId":"d","platform":"ios","tokens":{"apnsToken":"0c9d"}}"#)) == "invalid_token_format")
        #expect(code(try await post(Self.register, #"{\#(auth),"deviceId":"d","platform":"ios","webPush":{"endpoint":"https://x.example/1"}}"#)) == "token_platform_mismatch")
        #expect(mock.devices.isEmpty)

        // Aliases, then a token moving from one device to another.
        let first = try await post(Self.register, #"{\#(auth),"deviceId":"d1","platform":"ios","subscriberId":42,"tokens":{"apns_token":"\#(hex)"}}"#)
        #expect(first.0 == 201)
        #expect((try? JSONValue.parse(first.1))?.objectValue?["tokens"] == .object(JSONObject([JSONMember("apnsToken", "registered")])))
        #expect(mock.device("d1")?.subscriberID == "42")
        let again = try await post(Self.register, #"{\#(auth),"deviceId":"d1","platform":"ios","tokens":{"apnToken":"\#(hex)"}}"#)
        #expect((try? JSONValue.parse(again.1))?.objectValue?["tokens"] == .object(JSONObject([JSONMember("apnsToken", "refreshed")])))
        #expect(mock.device("d1")?.subscriberID == "42")  // omitted optional fields keep their value
        let moved = try await post(Self.register, #"{\#(auth),"deviceId":"d2","platform":"ios","tokens":{"apnsToken":"\#(hex)"}}"#)
        #expect((try? JSONValue.parse(moved.1))?.objectValue?["tokens"] == .object(JSONObject([JSONMember("apnsToken", "reassigned")])))
        #expect(mock.device("d1")?.tokens == [:])
        #expect(try await post(Self.deregister, #"{\#(auth),"deviceId":"d2"}"#) == (200, #"{"ok":true,"deviceId":"d2","removed":true,"tokensRemoved":1}"#))
        #expect(try await post(Self.deregister, #"{\#(auth),"deviceId":"d2"}"#) == (200, #"{"ok":true,"deviceId":"d2","removed":false,"tokensRemoved":0}"#))
        client.shutdown()
        await mock.stop()
    }
}
