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

/// End to end against a mock Voidhash that follows seed document 000: exactly what Voidhash
/// receives for each operation, the `pushDeviceTokenId` kept server-side, and its errors mapped
/// to the contract's codes.
@Suite struct VoidhashTests {
    static let key = "vh_pk_live_0123456789abcdef"
    static let webEndpoint = "https://fcm.googleapis.com/fcm/send/eXaMpLe:APA91bGZ"
    static let webKeys = #"{"p256dh":"\#(Base64URL.encode([UInt8(0x04)] + (1...64).map { UInt8($0) }))","auth":"\#(Base64URL.encode((1...16).map { UInt8($0 * 3) }))"}"#

    static func block(_ mock: MockVoidhash, name: String = "vh", role: String? = nil, ios: Bool = true,
                      extra: [String] = []) -> String {
        var lines = ["- name: \(name)", "  provider: voidhash", "  base_url: \(mock.baseURL)", "  publishable_key: {env: VH_KEY}",
                     "  android_package_name: com.example.droid", "  sdk_version: 0.0.1-alpha.1",
                     "  retry: {attempts: 3, backoff: 10ms, max_backoff: 20ms}"]
        if ios { lines.append("  ios_bundle_id: com.example.app") }
        if let role { lines.append("  role: \(role)") }
        lines += extra.map { "  " + $0 }
        return lines.map { "      " + $0 }.joined(separator: "\n")
    }

    static func harness(_ mock: MockVoidhash, key: String = key, ios: Bool = true, extra: [String] = []) async throws -> SidecarHarness {
        try await SidecarHarness(upstreams: block(mock, ios: ios, extra: extra), secrets: [.env("VH_KEY"): key])
    }

    static func fcm() -> String { "fcm-" + UUID().uuidString }

    /// The SDK headers every call must carry, as the document lists them.
    static func expectSDKHeaders(_ call: MockVoidhash.Received, distinct: String = "alice", platform: String = "ios",
                                 sourceLocation: SourceLocation = #_sourceLocation) {
        let expected: [(String, String)] = [
            ("x-publishable-key", key), ("x-distinct-id", distinct),
            ("x-client-bundle-id", platform == "ios" ? "com.example.app" : "com.example.droid"), ("x-platform", platform),
            ("x-platform-flavor", "native"), ("x-sdk", platform), ("x-sdk-version", "0.0.1-alpha.1"),
            ("x-is-debug-build", "false"), ("x-is-backgrounded", "false"), ("x-observer-mode", "false"),
            ("Content-Type", "application/json"),
        ]
        for (name, value) in expected {
            #expect(call.headers.values(name) == [value], "\(name)", sourceLocation: sourceLocation)
        }
        #expect(call.method == "POST", sourceLocation: sourceLocation)
    }

    @Test func firstRegistrationSendsEveryHeaderAndTheIdIsKeptForUnregister() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Harness.apnsToken()
            let reply = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)","environment":"sandbox"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("vh") == "forwarded")
            let calls = mock.received
            try #require(calls.count == 1)
            #expect(calls[0].path == "/api/v1/sdk/push-devices/register")
            Self.expectSDKHeaders(calls[0])
            #expect(calls[0].headers["x-distinct-id-encoding"] == nil)
            #expect(calls[0].bodyText == #"{"platform":"ios","provider":"apns","platformToken":"\#(token.lowercased())","bundleId":"com.example.app","environment":"sandbox"}"#)
            let device = try #require(mock.device(token: token.lowercased()))
            #expect(device.distinctID == "alice")

            let gone = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
            #expect(gone.status == 202)
            #expect(gone.outcome("vh") == "forwarded")
            let unregisters = mock.received(path: "/unregister")
            try #require(unregisters.count == 1)
            Self.expectSDKHeaders(unregisters[0])
            #expect(unregisters[0].bodyText == #"{"pushDeviceTokenId":"\#(device.id)"}"#)
            #expect(mock.device(id: device.id) == nil)
            // The id was forgotten with the registration: a second unregister has nothing to send.
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("vh") == "skipped")
            #expect(mock.received.count == 2)
        }
    }

    @Test func androidRegistrationUsesThePackageNameAndNoAPNsFields() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Self.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#).outcome("vh") == "forwarded")
            let call = try #require(mock.received.first)
            Self.expectSDKHeaders(call, platform: "android")
            #expect(call.bodyText == #"{"platform":"android","provider":"fcm","platformToken":"\#(token)"}"#)
        }
    }

    @Test func duplicateRegistrationMakesNoCall() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let body = #"{"platform":"android","push_token":"\#(Self.fcm())"}"#
            try await expectDuplicateMakesNoCall(h, mock, body: body, upstream: "vh")
        }
    }

    @Test func rotationIsARefreshOfTheKeptIdAndRetiresNothing() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let old = Self.fcm(), new = Self.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome("vh") == "forwarded")
            let id = try #require(mock.device(token: old)?.id)
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
            #expect(reply.outcome("vh") == "forwarded")
            let calls = mock.received
            try #require(calls.count == 2)
            #expect(calls[1].path == "/api/v1/sdk/push-devices/refresh")
            Self.expectSDKHeaders(calls[1], platform: "android")
            #expect(calls[1].bodyText == #"{"pushDeviceTokenId":"\#(id)","platformToken":"\#(new)"}"#)
            #expect(mock.device(id: id)?.platformToken == new)
            // The id moved to the new token: unregistering it removes that id; the old token has none.
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(old)"}"#).outcome("vh") == "skipped")
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(new)"}"#).outcome("vh") == "forwarded")
            #expect(mock.received(path: "/unregister").map(\.bodyText) == [#"{"pushDeviceTokenId":"\#(id)"}"#])
            #expect(mock.devices.isEmpty)
        }
    }

    @Test func rotationFromAnUnknownTokenIsARegister() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Harness.apnsToken().lowercased()
            let reply = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)","previous_push_token":"\#(Harness.apnsToken())"}"#)
            #expect(reply.outcome("vh") == "forwarded")
            #expect(mock.received.map(\.path) == ["/api/v1/sdk/push-devices/register"])
            #expect(mock.received.first?.bodyText == #"{"platform":"ios","provider":"apns","platformToken":"\#(token)","bundleId":"com.example.app","environment":"production"}"#)
        }
    }

    @Test func contactChangeRegistersUnderTheNewDistinctIdWhichMovesTheDevice() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Self.fcm()
            let body = #"{"platform":"android","push_token":"\#(token)"}"#
            #expect(try await h.post("/installations", body, contact: "alice").outcome("vh") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob").outcome("vh") == "forwarded")
            #expect(try await h.post("/installations", body, contact: "bob").outcome("vh") == "unchanged")
            let calls = mock.received
            #expect(calls.map(\.path) == Array(repeating: "/api/v1/sdk/push-devices/register", count: 2))
            #expect(calls.map { $0.headers["x-distinct-id"] } == ["alice", "bob"])
            #expect(calls[0].bodyText == calls[1].bodyText)
            #expect(mock.devices.count == 1)
            #expect(mock.device(token: token)?.distinctID == "bob")
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#, contact: "bob").outcome("vh") == "forwarded")
            #expect(mock.devices.isEmpty)
        }
    }

    /// An unregister is bound to its contact (docs/architecture.md, the inventory): another person's session
    /// removes nothing, not even by the `pushDeviceTokenId` PushWarden holds. (Voidhash's own 404
    /// for another distinct ID, "treat it as done", is checked in `verdicts` below.)
    @Test func anotherContactsUnregisterCallsNothing() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Self.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#, contact: "alice").outcome("vh") == "forwarded")
            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#, contact: "mallory")
            #expect(reply.status == 202)
            #expect(reply.outcome("vh") == "skipped")
            #expect(mock.received(path: "/unregister").isEmpty)
            #expect(mock.device(token: token)?.distinctID == "alice")
        }
    }

    @Test func unregisterOfATokenNeverRegisteredCallsNothing() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let reply = try await h.post("/installations/unregister", #"{"push_token":"\#(Self.fcm())"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("vh") == "skipped")
            #expect(mock.received.isEmpty)
        }
    }

    @Test func contactOutsidePrintableASCIIIsPercentEncoded() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let token = Self.fcm()
            let contact = "zoë-日本"
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#, contact: contact).outcome("vh") == "forwarded")
            let call = try #require(mock.received.first)
            Self.expectSDKHeaders(call, distinct: "zo%C3%AB-%E6%97%A5%E6%9C%AC", platform: "android")
            #expect(call.headers.values("x-distinct-id-encoding") == ["percent"])
            #expect(mock.device(token: token)?.distinctID == contact)
            // A printable contact with a space and a % is sent as is.
            let other = Self.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(other)"}"#, contact: "a b%41").outcome("vh") == "forwarded")
            #expect(mock.received.last?.headers["x-distinct-id"] == "a b%41")
            #expect(mock.received.last?.headers["x-distinct-id-encoding"] == nil)
            #expect(mock.device(token: other)?.distinctID == "a b%41")
        }
    }

    @Test func installationsVoidhashDoesNotTakeAreSkippedWithoutACall() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock, ios: false) }) { h, mock async throws in
            let bodies = [
                #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#,  // no ios_bundle_id in this policy
                #"{"platform":"ios","push_service":"apns_voip","push_token":"\#(Harness.apnsToken())"}"#,
                #"{"platform":"web","push_token":"\#(Self.webEndpoint)/\#(UUID().uuidString)","web_push_keys":\#(Self.webKeys)}"#,
                #"{"platform":"android","push_service":"fcm","push_token":"\#(Self.webEndpoint)/\#(UUID().uuidString)","web_push_keys":\#(Self.webKeys)}"#,
            ]
            for body in bodies {
                let reply = try await h.post("/installations", body)
                #expect(reply.status == 202, "\(reply.text)")
                #expect(reply.outcome("vh") == "skipped", "\(body)")
            }
            #expect(mock.received.isEmpty)
        }
    }

    @Test func contractRefusalsNeverReachVoidhash() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let badToken = try await h.post("/installations", #"{"platform":"ios","push_token":"not-hex"}"#)
            #expect(badToken.status == 400)
            #expect(badToken.errorCode == "invalid_token_format")
            let sandboxFCM = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())","environment":"sandbox"}"#)
            #expect(sandboxFCM.status == 400)
            #expect(mock.received.isEmpty)
        }
    }

    @Test func validationErrorIs422WithItsTag() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            mock.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"],
                               body: #"{"_tag":"Api/SdkValidationError","message":"missing header x-sdk"}"#))
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#)
            #expect(reply.status == 422)
            #expect(reply.errorCode == "upstream_rejected")
            #expect(reply.json?["error"]?.objectValue?["upstream_code"] == "Api/SdkValidationError")
            #expect(mock.received.count == 1)
        }
    }

    /// Both are the operator's problem, answered 502 after exactly one call: a key Voidhash does not
    /// know (401), and a team without push notifications turned on (403).
    @Test(arguments: [(stale: true, pushEnabled: true), (stale: false, pushEnabled: false)])
    func operatorProblemsAre502AndNotRetried(_ setting: (stale: Bool, pushEnabled: Bool)) async throws {
        let mock = try MockVoidhash(publishableKey: Self.key)
        mock.setPushEnabled(setting.pushEnabled)
        let h = try await Self.harness(mock, key: setting.stale ? "vh_pk_live_stale" : Self.key)
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#)
        #expect(reply.status == 502)
        #expect(reply.errorCode == "upstream_auth_failed")
        #expect(mock.received.count == 1)
        await h.stop()
        await mock.stop()
    }

    @Test func serverErrorsAreRetriedThen503AndNothingKept() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            mock.enqueue(.init(status: 500), .init(status: 500), .init(status: 500))
            let token = Self.fcm()
            let body = #"{"platform":"android","push_token":"\#(token)"}"#
            let reply = try await h.post("/installations", body)
            #expect(reply.status == 503)
            #expect(reply.errorCode == "upstream_unavailable")
            #expect(reply.headers["Retry-After"] != nil)
            #expect(mock.received.count == 3)
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("vh") == "skipped")
            #expect(try await h.post("/installations", body).outcome("vh") == "forwarded")
            #expect(mock.received.count == 4)
        }
    }

    /// The document gives refresh a 404 for an id another distinct ID registered. Without knowing
    /// whose the old id was, PushWarden refreshes and passes the refusal on.
    /// Person A registered the old token; person B's session rotates it. Voidhash refuses the
    /// refresh (404: not B's device), so PushWarden forgets the old id and registers the new token
    /// under B, which Voidhash documents as moving the device.
    @Test func refreshOfAnotherPersonsDeviceFallsBackToRegister() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let old = Self.fcm(), new = Self.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#, contact: "alice").outcome("vh") == "forwarded")
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#, contact: "bob")
            #expect(reply.status == 202)
            #expect(reply.outcome("vh") == "forwarded")
            #expect(mock.received.map(\.path).suffix(2) == ["/api/v1/sdk/push-devices/refresh", "/api/v1/sdk/push-devices/register"])
            #expect(mock.received.last?.headers["x-distinct-id"] == "bob")
        }
    }

    @Test func failingVoidhashShadowNeverFailsAHealthyVoyadoPrimary() async throws {
        let vh = try MockVoidhash(publishableKey: Self.key), voyado = try MockVoyado(apiKey: "voyado-key")
        let upstreams = """
                  - name: main
                    provider: voyado
                    role: primary
                    base_path: \(voyado.basePath)
                    api_key: {env: VOYADO_KEY}
            """ + "\n" + Self.block(vh, role: "shadow")
        let h = try await SidecarHarness(upstreams: upstreams, secrets: [.env("VH_KEY"): Self.key, .env("VOYADO_KEY"): "voyado-key"])
        vh.enqueue(.init(status: 503), .init(status: 503), .init(status: 503))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome("main") == "forwarded")
        #expect(reply.outcome("vh") == "failed")
        #expect(voyado.received(path: "/installations").count == 1)
        #expect(vh.received.count == 3)
        await h.stop()
        await vh.stop()
        await voyado.stop()
    }

    @Test func failingVoyadoShadowNeverFailsAHealthyVoidhashPrimary() async throws {
        let vh = try MockVoidhash(publishableKey: Self.key), voyado = try MockVoyado(apiKey: "voyado-key")
        let upstreams = Self.block(vh, role: "primary") + "\n" + """
                  - name: next
                    provider: voyado
                    role: shadow
                    base_path: \(voyado.basePath)
                    api_key: {env: VOYADO_KEY}
                    retry: {attempts: 1}
            """
        let h = try await SidecarHarness(upstreams: upstreams, secrets: [.env("VH_KEY"): Self.key, .env("VOYADO_KEY"): "voyado-key"])
        voyado.enqueue(.init(status: 400, body: #"{"error":{"code":"invalid_request"}}"#))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#)
        #expect(reply.status == 202)
        #expect(reply.outcome("vh") == "forwarded")
        #expect(reply.outcome("next") == "failed")
        #expect(vh.received.count == 1)
        await h.stop()
        await vh.stop()
        await voyado.stop()
    }

    @Test func logsCarryNoKeyAndNoRawToken() async throws {
        try await withSidecar(MockVoidhash(publishableKey: Self.key), { mock in try await Self.harness(mock) }) { h, mock async throws in
            let old = Harness.apnsToken().lowercased(), new = Harness.apnsToken().lowercased()
            _ = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(old)"}"#)
            _ = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
            mock.enqueue(.init(status: 500), .init(status: 500), .init(status: 500))
            _ = try await h.post("/installations", #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#)
            _ = try await h.post("/installations/unregister", #"{"push_token":"\#(new)"}"#)
            let logs = h.logs.text
            #expect(!logs.isEmpty)
            #expect(!logs.contains(Self.key))
            #expect(!logs.contains(old) && !logs.contains(new))
        }
    }

    @Test func aTestKeyNeedsDebugBuildAndALiveKeyForbidsIt() async throws {
        let mock = try MockVoidhash(publishableKey: "vh_pk_test_abc")
        await #expect(throws: (any Error).self) { try await Self.harness(mock, key: "vh_pk_test_abc") }
        await #expect(throws: (any Error).self) { try await Self.harness(mock, key: Self.key, extra: ["debug_build: true"]) }
        await #expect(throws: (any Error).self) { try await Self.harness(mock, key: "not-a-voidhash-key") }
        let h = try await Self.harness(mock, key: "vh_pk_test_abc", extra: ["debug_build: true", "observer_mode: true", "sdk: react-native"])
        #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(Self.fcm())"}"#).outcome("vh") == "forwarded")
        let call = try #require(mock.received.first)
        #expect(call.headers["x-is-debug-build"] == "true")
        #expect(call.headers["x-observer-mode"] == "true")
        #expect(call.headers["x-sdk"] == "react-native")
        await h.stop()
        await mock.stop()
    }
}

/// The adapter on its own: the distinct-id header can never carry CR, LF or raw non-ASCII,
/// whatever contact it is handed (the session checks are a second line, not the only one).
@Suite struct VoidhashAdapterUnitTests {
    static let adapter = VoidhashAdapter(
        name: "vh", config: VoidhashConfig(baseURL: "https://api.voidhash.com", publishableKey: .env("K"), iosBundleID: "com.example.app",
                                           androidPackageName: nil, sdkVersion: "1.0"),
        publishableKey: "vh_pk_live_x")

    @Test(arguments: [
        ("user_123", "user_123", false),
        ("a b%20c", "a b%20c", false),
        ("alice\r\nx-publishable-key: vh_pk_evil", "alice%0D%0Ax-publishable-key%3A%20vh_pk_evil", true),
        ("\n", "%0A", true),
        ("zoë", "zo%C3%AB", true),
        ("😀%", "%F0%9F%98%80%25", true),
        (" padded", "%20padded", true),
        ("tab\there", "tab%09here", true),
        ("nul\u{0}", "nul%00", true),
    ])
    func encoder(_ contact: String, _ expected: String, _ encoded: Bool) {
        let result = VoidhashDistinctID.encode(contact)
        #expect(result.value == expected)
        #expect(result.isPercentEncoded == encoded)
        if encoded { #expect(result.value.removingPercentEncoding == contact) }
    }

    @Test func headersNeverCarryControlCharacters() throws {
        let installation = Installation(platform: .ios, pushService: .apns, pushToken: String(repeating: "ab", count: 32))
        for contact in ["a\r\nb", "\r", "x\u{85}y", "é\n"] {
            let request = try Self.adapter.registerRequest(installation, context: CallContext(contactID: contact), identity: nil, previous: nil)
            for field in request.headers {
                #expect(field.value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }, "\(field.name)")
            }
            #expect(request.headers["x-distinct-id-encoding"] == "percent")
            #expect(request.headers["x-distinct-id"]?.removingPercentEncoding == contact)
        }
    }

    @Test func verdicts() {
        func response(_ status: Int, _ body: String = "") -> HTTPClientResponse {
            HTTPClientResponse(status: status, headers: [:], body: Array(body.utf8))
        }
        let a = Self.adapter
        #expect(a.verdict(for: response(200), operation: .register) == .accepted)
        #expect(a.verdict(for: response(201), operation: .register) == .accepted)
        #expect(a.verdict(for: response(404), operation: .unregister) == .accepted)
        #expect(a.verdict(for: response(404), operation: .register) == .staleIdentity)
        #expect(a.verdict(for: response(400, #"{"_tag":"Api/SdkValidationError","message":"m"}"#), operation: .register)
                == .rejected(code: "Api/SdkValidationError"))
        // No code: the caller shows the status (`http_400`), PushWarden's own text.
        #expect(a.verdict(for: response(400, "oops"), operation: .register) == .rejected(code: nil))
        #expect(a.verdict(for: response(401), operation: .register) == .authFailed)
        #expect(a.verdict(for: response(403), operation: .unregister) == .authFailed)
        #expect(a.verdict(for: response(500), operation: .register) == .retry(afterSeconds: nil))
    }

    @Test func identityIsTheAnsweredIdOrTheRefreshedOne() {
        let installation = Installation(platform: .ios, pushService: .apns, pushToken: String(repeating: "cd", count: 32))
        let answered = HTTPClientResponse(status: 201, headers: [:], body: Array(#"{"pushDeviceTokenId":"pdt_9"}"#.utf8))
        #expect(Self.adapter.identity(after: answered, installation: installation, current: nil, previous: nil)
                == UpstreamIdentity(["pushDeviceTokenId": "pdt_9", "platform": "ios"]))
        let empty = HTTPClientResponse(status: 200, headers: [:], body: [])
        #expect(Self.adapter.identity(after: empty, installation: installation, current: nil,
                                      previous: UpstreamIdentity(["pushDeviceTokenId": "pdt_1", "platform": "ios"]))
                == UpstreamIdentity(["pushDeviceTokenId": "pdt_1", "platform": "ios"]))
        #expect(Self.adapter.identity(after: empty, installation: installation, current: nil, previous: nil) == nil)
    }
}
