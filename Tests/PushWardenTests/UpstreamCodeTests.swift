import ClientAPI
import Foundation
import HTTPClient
import PWCore
import PWCrypto
@testable import Providers
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// What of a provider's error code reaches the client's `upstream_code` and the logs: the codes
/// the provider's own document lists, as they are; anything else as `unknown:` and a short hash,
/// so a provider that echoes its input never puts a push token or a Web Push secret there.
///
/// The documented codes here are copied from the seed documents, independently of the adapters'
/// lists, so a code missing from an adapter's list fails here.
@Suite struct UpstreamCodeTests {
    /// What the client should see for an undocumented code.
    static func unknown(_ raw: String) -> String { "unknown:" + String(SHA256.hexHash(Array(raw.utf8)).prefix(8)) }
    /// A Web Push `auth` secret: base64url of 16 random bytes.
    static func authSecret() -> String { Base64URL.encode((0..<16).map { _ in UInt8.random(in: 0...255) }) }
    static func p256dh() -> String { Base64URL.encode([4] + (0..<64).map { _ in UInt8.random(in: 0...255) }) }
    static func endpoint() -> String { "https://fcm.googleapis.com/fcm/send/\(UUID().uuidString)" }
    static let json: HTTPHeaders = ["Content-Type": "application/json"]

    /// `{"error": {"code": ...}}`, the envelope of Voyado, Native Notify and PushNotice.
    static func envelope(_ code: String) -> String {
        JSONValue.object(JSONObject([JSONMember("error", .object(JSONObject([
            JSONMember("code", .string(code)), JSONMember("message", .string("refused")),
        ])))])).encodedString()
    }

    /// Fluxer's top-level `{"code": ...}`.
    static func fluxerBody(_ code: String) -> String {
        JSONValue.object(JSONObject([JSONMember("code", .string(code)), JSONMember("message", .string("refused"))])).encodedString()
    }

    /// Voidhash's `{"_tag": ...}`.
    static func voidhashBody(_ code: String) -> String {
        JSONValue.object(JSONObject([JSONMember("_tag", .string(code)), JSONMember("message", .string("refused"))])).encodedString()
    }

    static func expectShown(_ reply: Harness.Reply, _ code: String, status: Int = 422, errorCode: String = "upstream_rejected",
                            sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(reply.status == status, "\(code)", sourceLocation: sourceLocation)
        #expect(reply.errorCode == errorCode, "\(code)", sourceLocation: sourceLocation)
        #expect(reply.json?["error"]?.objectValue?["upstream_code"]?.stringValue == code, sourceLocation: sourceLocation)
    }

    /// The echoed value is in neither the client's answer nor the logs; the answer names its hash.
    /// - Parameter logged: whether this refusal's log line is written: the first of its upstream
    ///   in a second is, later ones within the second are counted instead (`LogLimiter`).
    static func expectHidden(_ reply: Harness.Reply, _ raw: String, logs: LogSink, status: Int = 422,
                             errorCode: String = "upstream_rejected", logged: Bool = true,
                             sourceLocation: SourceLocation = #_sourceLocation) {
        expectShown(reply, unknown(raw), status: status, errorCode: errorCode, sourceLocation: sourceLocation)
        #expect(!reply.text.contains(raw), "the echoed value reached the client", sourceLocation: sourceLocation)
        #expect(!reply.headers.fields.contains { $0.value.contains(raw) }, sourceLocation: sourceLocation)
        let text = logs.text
        if logged { #expect(text.contains(unknown(raw)), "the log names the hash", sourceLocation: sourceLocation) }
        #expect(!text.contains(raw), "the echoed value was logged", sourceLocation: sourceLocation)
    }

    // MARK: The shared rule

    @Test func documentedCodesPassAndAnythingElseIsItsShortHash() {
        #expect(UpstreamErrorCode.shown("invalid_platform", documented: ["invalid_platform"]) == "invalid_platform")
        // Exact match only: no case folding, no prefix.
        #expect(UpstreamErrorCode.shown("INVALID_PLATFORM", documented: ["invalid_platform"]) == Self.unknown("INVALID_PLATFORM"))
        #expect(UpstreamErrorCode.shown("invalid_platform ", documented: ["invalid_platform"]) == Self.unknown("invalid_platform "))
        #expect(UpstreamErrorCode.shown("", documented: []) == Self.unknown(""))
        #expect(UpstreamErrorCode.status(400) == "http_400")
        // The same short hash as a token's `tok:` form.
        #expect(Redact.token("abc") == "tok:" + Redact.shortHash("abc"))
        #expect(Self.unknown("abc") == "unknown:" + Redact.shortHash("abc"))
    }

    /// PushWarden's own codes can never come from a provider's list: `stale_identity` drives the
    /// re-registration after Voidhash's 404, and `http_...` / `unknown:...` are our renderings.
    @Test func noProviderListHoldsOurOwnCodes() {
        let lists: [(String, Set<String>)] = [
            ("voyado", VoyadoAdapter.documentedErrorCodes), ("voidhash", VoidhashAdapter.documentedErrorCodes),
            ("fluxer", FluxerAdapter.documentedErrorCodes), ("nativenotify", NativeNotifyAdapter.documentedErrorCodes),
            ("pushnotice", PushNoticeAdapter.documentedErrorCodes),
        ]
        for (provider, codes) in lists {
            for code in codes {
                #expect(code != "stale_identity", "\(provider)")
                #expect(!code.hasPrefix("http_") && !code.hasPrefix("unknown:") && !code.isEmpty, "\(provider): \(code)")
            }
        }
        #expect(Set(Self.voyadoCodes) == VoyadoAdapter.documentedErrorCodes)
        #expect(Set(Self.fluxerCodes) == FluxerAdapter.documentedErrorCodes)
        #expect(Set(Self.nativeNotifyCodes + ["app_not_found"]) == NativeNotifyAdapter.documentedErrorCodes)
        #expect(VoidhashAdapter.documentedErrorCodes == ["Api/SdkValidationError"])
        #expect(PushNoticeAdapter.documentedErrorCodes.isEmpty)
    }

    // MARK: Voyado (seed 001)

    /// Every code of the document's error tables and its "Failure modes" table.
    static let voyadoCodes = ["invalid_json", "invalid_request", "invalid_platform", "unauthorized", "invalid_path",
                              "invalid_event", "invalid_event_type"]

    @Test func voyadoDocumentedCodesPassThrough() async throws {
        let h = try await Harness()
        for code in Self.voyadoCodes {
            h.mock.enqueue(.init(status: 400, headers: Self.json, body: Self.envelope(code)))
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
            Self.expectShown(reply, code)
        }
        // The first refusal's line (later ones within the second are counted, not written).
        #expect(h.logs.text.contains(#""upstream_code":"\#(Self.voyadoCodes[0])""#))
        await h.stop()
    }

    @Test func voyadoEchoedTokenOrSecretIsHidden() async throws {
        let h = try await Harness()
        let token = Harness.apnsToken()
        h.mock.enqueue(.init(status: 400, headers: Self.json, body: Self.envelope(token)))
        Self.expectHidden(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)"}"#), token, logs: h.logs)
        let secret = Self.authSecret()
        h.mock.enqueue(.init(status: 400, headers: Self.json, body: Self.envelope(secret)))
        Self.expectHidden(try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#),
                          secret, logs: h.logs, logged: false)
        await h.stop()
    }

    /// An answer without a code still names its status: `http_<status>` is ours, not the provider's.
    @Test func voyadoAnswerWithoutACodeIsItsStatus() async throws {
        let h = try await Harness()
        h.mock.enqueue(.init(status: 400, body: "Bad Request"))
        Self.expectShown(try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#), "http_400")
        await h.stop()
    }

    // MARK: Voidhash (seed 000)

    static func voidhash(_ mock: MockVoidhash) async throws -> SidecarHarness {
        try await VoidhashTests.harness(mock)
    }

    @Test func voidhashDocumentedTagPassesThrough() async throws {
        try await withSidecar(MockVoidhash(publishableKey: VoidhashTests.key), Self.voidhash) { h, mock async throws in
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.voidhashBody("Api/SdkValidationError")))
            Self.expectShown(try await h.post("/installations", #"{"platform":"android","push_token":"\#(VoidhashTests.fcm())"}"#),
                             "Api/SdkValidationError")
        }
    }

    @Test func voidhashEchoedTokenOrSecretIsHidden() async throws {
        try await withSidecar(MockVoidhash(publishableKey: VoidhashTests.key), Self.voidhash) { h, mock async throws in
            let token = Harness.apnsToken()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.voidhashBody(token)))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)"}"#), token, logs: h.logs)
            let fcm = VoidhashTests.fcm()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.voidhashBody(fcm)))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"android","push_token":"\#(fcm)"}"#), fcm, logs: h.logs, logged: false)
            let secret = Self.authSecret()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.voidhashBody(secret)))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"android","push_token":"\#(VoidhashTests.fcm())"}"#),
                              secret, logs: h.logs, logged: false)
        }
    }

    /// `stale_identity` is PushWarden's own code for Voidhash's 404 on refresh: a provider that
    /// sends it as its code must not make the sidecar forget the previous token's id and register
    /// again.
    @Test func voidhashCannotSpoofTheStaleIdentityCode() async throws {
        try await withSidecar(MockVoidhash(publishableKey: VoidhashTests.key), Self.voidhash) { h, mock async throws in
            let old = VoidhashTests.fcm(), new = VoidhashTests.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome("vh") == "forwarded")
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.voidhashBody("stale_identity")))
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
            Self.expectShown(reply, Self.unknown("stale_identity"))
            #expect(mock.received.map(\.path) == ["/api/v1/sdk/push-devices/register", "/api/v1/sdk/push-devices/refresh"])
        }
    }

    /// The real stale identity (Voidhash's 404 on refresh) still registers afresh.
    @Test func voidhashRefresh404StillRegistersAfresh() async throws {
        try await withSidecar(MockVoidhash(publishableKey: VoidhashTests.key), Self.voidhash) { h, mock async throws in
            let old = VoidhashTests.fcm(), new = VoidhashTests.fcm()
            #expect(try await h.post("/installations", #"{"platform":"android","push_token":"\#(old)"}"#).outcome("vh") == "forwarded")
            mock.enqueue(.init(status: 404, headers: Self.json, body: Self.voidhashBody("Api/NotFound")))
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(new)","previous_push_token":"\#(old)"}"#)
            #expect(reply.status == 202)
            #expect(reply.outcome("vh") == "forwarded")
            #expect(mock.received.map(\.path) == ["/api/v1/sdk/push-devices/register", "/api/v1/sdk/push-devices/refresh",
                                                  "/api/v1/sdk/push-devices/register"])
        }
    }

    // MARK: Fluxer (seed 002)

    /// The codes the document names: the two 403s in its introduction, `URL_NOT_PUBLICLY_ROUTABLE`
    /// under "Register mobile push device", and `INVALID_FORM_BODY` in both Response tables.
    static let fluxerCodes = ["ACCESS_DENIED", "ACCOUNT_SUSPICIOUS_ACTIVITY", "URL_NOT_PUBLICLY_ROUTABLE", "INVALID_FORM_BODY"]

    static func fluxer(_ mock: MockFluxer) async throws -> SidecarHarness {
        try await SidecarHarness(upstreams: FluxerTests.upstream(mock))
    }

    @Test func fluxerDocumentedCodesPassThrough() async throws {
        try await withSidecar(MockFluxer(), Self.fluxer) { h, mock async throws in
            for code in Self.fluxerCodes {
                mock.enqueue(.init(status: 400, headers: Self.json, body: Self.fluxerBody(code)))
                let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(FluxerTests.fcmToken())"}"#,
                                             headers: FluxerTests.fluxerHeaders)
                Self.expectShown(reply, code)
            }
            mock.enqueue(.init(status: 403, headers: Self.json, body: Self.fluxerBody("ACCESS_DENIED")))
            let refused = try await h.post("/installations", #"{"platform":"android","push_token":"\#(FluxerTests.fcmToken())"}"#,
                                           headers: FluxerTests.fluxerHeaders)
            Self.expectShown(refused, "ACCESS_DENIED", status: 403, errorCode: "forbidden")
        }
    }

    @Test func fluxerEchoedTokenOrSecretIsHidden() async throws {
        try await withSidecar(MockFluxer(), Self.fluxer) { h, mock async throws in
            let token = Harness.apnsToken()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.fluxerBody(token)))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)"}"#,
                                               headers: FluxerTests.fluxerHeaders), token, logs: h.logs)
            // The registration's own Web Push auth secret, echoed.
            let secret = Self.authSecret()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.fluxerBody(secret)))
            let webPush = """
                {"platform":"android","push_service":"fcm","push_token":"\(Self.endpoint())","web_push_keys":{"p256dh":"\(Self.p256dh())","auth":"\(secret)"}}
                """
            Self.expectHidden(try await h.post("/installations", webPush, headers: FluxerTests.fluxerHeaders), secret, logs: h.logs, logged: false)
            // The user's session refused (401, 403): the code is shown by the same rule.
            for (status, errorCode) in [(401, "unauthorized"), (403, "forbidden")] {
                let echoed = Self.authSecret()
                mock.enqueue(.init(status: status, headers: Self.json, body: Self.fluxerBody(echoed)))
                let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(FluxerTests.fcmToken())"}"#,
                                             headers: FluxerTests.fluxerHeaders)
                Self.expectHidden(reply, echoed, logs: h.logs, status: status, errorCode: errorCode, logged: status == 401)
            }
        }
    }

    // MARK: Native Notify (seed 003)

    /// The document's "Errors" table, all but `app_not_found` (the operator's problem: 502, no code).
    static let nativeNotifyCodes = ["invalid_body", "missing_field", "invalid_field", "invalid_platform", "invalid_device_id",
                                    "invalid_subscriber_id", "invalid_tokens", "no_tokens_provided", "invalid_token_format",
                                    "invalid_web_push_endpoint", "invalid_web_push_keys", "invalid_web_push",
                                    "token_platform_mismatch", "unsupported_token_type", "invalid_environment", "invalid_framework",
                                    "environment_disabled"]

    static func nativeNotify(_ mock: MockNativeNotify) async throws -> SidecarHarness {
        try await NativeNotifyTests.harness(mock)
    }

    @Test func nativeNotifyDocumentedCodesPassThrough() async throws {
        try await withSidecar(MockNativeNotify(appToken: NativeNotifyTests.appToken), Self.nativeNotify) { h, mock async throws in
            for code in Self.nativeNotifyCodes {
                mock.enqueue(.init(status: code == "environment_disabled" ? 403 : 400, headers: Self.json, body: Self.envelope(code)))
                let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(NativeNotifyTests.fcmToken())"}"#)
                Self.expectShown(reply, code)
            }
        }
    }

    @Test func nativeNotifyEchoedTokenOrSecretIsHidden() async throws {
        try await withSidecar(MockNativeNotify(appToken: NativeNotifyTests.appToken), Self.nativeNotify) { h, mock async throws in
            let token = Harness.apnsToken()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.envelope(token)))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"ios","push_token":"\#(token)"}"#), token, logs: h.logs)
            let secret = Self.authSecret()
            mock.enqueue(.init(status: 400, headers: Self.json, body: Self.envelope(secret)))
            let webPush = #"{"platform":"web","push_token":"\#(Self.endpoint())","web_push_keys":{"p256dh":"\#(Self.p256dh())","auth":"\#(secret)"}}"#
            Self.expectHidden(try await h.post("/installations", webPush), secret, logs: h.logs, logged: false)
        }
    }

    // MARK: PushNotice (seed 004)

    static func pushNotice(_ mock: MockPushNotice) async throws -> SidecarHarness {
        try await PushNoticeTests.harness(PushNoticeTests.upstream(mock))
    }

    /// PushNotice's document lists no error code at all (only statuses, in "8. Errors & retries"):
    /// a code-less refusal names its status, and any code it sends is shown only as a hash.
    @Test func pushNoticeDocumentsNoCodeSoOnlyTheStatusPassesThrough() async throws {
        try await withSidecar(MockPushNotice(apiKey: PushNoticeTests.key), Self.pushNotice) { h, mock async throws in
            mock.enqueue(.init(status: 422))
            Self.expectShown(try await h.post("/installations", #"{"platform":"android","push_token":"\#(PushNoticeTests.fcmToken())"}"#),
                             "http_422")
            mock.enqueue(.init(status: 422, headers: Self.json, body: Self.envelope("validation_failed")))
            Self.expectShown(try await h.post("/installations", #"{"platform":"android","push_token":"\#(PushNoticeTests.fcmToken())"}"#),
                             Self.unknown("validation_failed"))
        }
    }

    @Test func pushNoticeEchoedTokenOrSecretIsHidden() async throws {
        try await withSidecar(MockPushNotice(apiKey: PushNoticeTests.key), Self.pushNotice) { h, mock async throws in
            let token = PushNoticeTests.fcmToken()
            mock.enqueue(.init(status: 422, headers: Self.json, body: Self.envelope(token)))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"android","push_token":"\#(token)"}"#), token, logs: h.logs)
            // The short forms PushNotice's reader also takes: `{"error": "..."}` and `{"code": "..."}`.
            let secret = Self.authSecret().lowercased()
            mock.enqueue(.init(status: 422, headers: Self.json, body: #"{"error":"\#(secret)"}"#))
            Self.expectHidden(try await h.post("/installations", #"{"platform":"android","push_token":"\#(PushNoticeTests.fcmToken())"}"#),
                              secret, logs: h.logs, logged: false)
            let other = Self.authSecret()
            mock.enqueue(.init(status: 422, headers: Self.json, body: #"{"code":"\#(other)"}"#))
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"\#(PushNoticeTests.fcmToken())"}"#)
            #expect(!reply.text.contains(other) && !h.logs.text.contains(other))
        }
    }
}
