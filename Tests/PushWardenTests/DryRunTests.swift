import Foundation
import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
@testable import RedisStores
@testable import Registration
import Testing

/// `dry_run` emulating each provider, through a real sidecar: the emulated provider's own adapter
/// builds the requests (logged, with keys and tokens redacted) and its emulated answers drive the
/// outcomes and the identities kept.
@Suite(.serialized) struct DryRunTests {
    struct Case: CustomStringConvertible, Sendable {
        var emulates: String
        var extraYAML = ""
        var register: @Sendable () -> (token: String, body: String)
        var headers: HTTPHeaders = [:]
        var registerURL: String
        var unregisterURL: String
        var unregisterMethod = "POST"
        var takesEvents = false
        /// What the unregister request must name: the identity the register's answer handed back.
        var unregisterBodyContains: [String] = []
        var description: String { emulates }
    }

    static let session = "dry-session-" + UUID().uuidString

    static let cases: [Case] = [
        Case(emulates: "voyado",
             register: { let t = "fcm-" + UUID().uuidString; return (t, #"{"platform":"android","push_token":"\#(t)"}"#) },
             registerURL: "https://dry-run.invalid/voyado/installations",
             unregisterURL: "https://dry-run.invalid/voyado/installations/unregister", takesEvents: true),
        Case(emulates: "voidhash",
             register: { let t = Harness.apnsToken(); return (t, #"{"platform":"ios","push_token":"\#(t)"}"#) },
             registerURL: "https://dry-run.invalid/api/v1/sdk/push-devices/register",
             unregisterURL: "https://dry-run.invalid/api/v1/sdk/push-devices/unregister",
             // The kept id, shown as a token's short hash (the log redacts every *token* field).
             unregisterBodyContains: [#""pushDeviceTokenId":"tok:"#]),
        Case(emulates: "fluxer",
             register: { let t = FluxerTests.fcmToken(); return (t, #"{"platform":"android","push_token":"\#(t)"}"#) },
             headers: ["X-Fluxer-Session": session],
             registerURL: "https://dry-run.invalid/v1/users/@me/mobile-devices",
             unregisterURL: "https://dry-run.invalid/v1/users/@me/mobile-devices/unregister",
             unregisterBodyContains: [#""platform":"android_fcm""#, #""app_id":"stable""#]),
        Case(emulates: "nativenotify",
             register: { let t = NativeNotifyTests.fcmToken(); return (t, #"{"platform":"android","push_token":"\#(t)"}"#) },
             registerURL: "https://dry-run.invalid/api/universal/device/register",
             unregisterURL: "https://dry-run.invalid/api/universal/device/deregister",
             unregisterBodyContains: [#""deviceId":"pw-"#]),
        Case(emulates: "pushnotice", extraYAML: "\n        slug: shop-dry",
             register: { let t = NativeNotifyTests.fcmToken(); return (t, #"{"platform":"android","push_token":"\#(t)"}"#) },
             registerURL: "https://dry-run.invalid/api/v1/apps/shop-dry/subscribers",
             unregisterURL: "https://dry-run.invalid/api/v1/apps/shop-dry/subscribers", unregisterMethod: "DELETE"),
    ]

    private func sent(_ h: SidecarHarness) -> [JSONObject] {
        h.logs.text.split(separator: "\n").compactMap { (try? JSONValue.parse(String($0)))?.objectValue }
            .filter { $0["msg"]?.stringValue == "dry_run: would send" }
    }

    @Test(arguments: cases) func emulatesTheProvider(_ c: Case) async throws {
        let h = try await SidecarHarness(upstreams: "      - name: dry\n        provider: dry_run\n        emulates: \(c.emulates)\(c.extraYAML)",
                                         memoryStore: true)
        do {
            let (token, body) = c.register()
            let first = try await h.post("/installations", body, headers: c.headers)
            #expect(first.status == 202, "\(first.text)")
            #expect(first.outcome("dry") == "forwarded", "\(first.text)")
            let again = try await h.post("/installations", body, headers: c.headers)
            #expect(again.status == 202)
            #expect(again.outcome("dry") == "unchanged", "\(again.text)")
            #expect(sent(h).count == 1)

            let removed = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#, headers: c.headers)
            #expect(removed.status == 202, "\(removed.text)")
            #expect(removed.outcome("dry") == "forwarded", "\(removed.text)")

            let lines = sent(h)
            try #require(lines.count == 2)
            #expect(lines[0]["method"]?.stringValue == "POST")
            #expect(lines[0]["url"]?.stringValue == c.registerURL)
            #expect(lines[1]["method"]?.stringValue == c.unregisterMethod)
            #expect(lines[1]["url"]?.stringValue == c.unregisterURL)
            let unregisterBody = lines[1]["body"]?.stringValue ?? ""
            for part in c.unregisterBodyContains { #expect(unregisterBody.contains(part), "\(unregisterBody)") }
            // Tokens, keys and the session never appear; the stand-in keys only as <redacted> or a hash.
            for secret in [token, Self.session, "vh_pk_test_dryrun", "dry-run-app-token", "pnp_dryrun", "Bearer dry-run"] {
                #expect(!h.logs.text.contains(secret), "\(secret)")
            }
            for line in lines {
                let headers = line["headers"]?.stringValue ?? ""
                for name in ["Authorization", "x-publishable-key"] where headers.contains(name + ":") {
                    #expect(headers.contains(name + ": <redacted>"), "\(headers)")
                }
            }

            let events = try await h.post("/events", #"{"events":[{"type":"opened","message_id":"m","recipient_id":"r","occurred_at":"2026-01-01T00:00:00Z"}]}"#,
                                          headers: c.headers)
            #expect(events.status == 202, "\(events.text)")
            #expect(events.outcome("dry") == (c.takesEvents ? "forwarded" : "skipped"), "\(events.text)")
            #expect(sent(h).count == (c.takesEvents ? 3 : 2))
            if c.takesEvents { #expect(sent(h).last?["url"]?.stringValue == "https://dry-run.invalid/voyado/events") }
        } catch {
            await h.stop()
            throw error
        }
        await h.stop()
    }

    /// Emulating Fluxer, the client must send a session as it would for Fluxer; any value does.
    @Test func aFluxerDryRunNeedsTheSessionHeader() async throws {
        let h = try await SidecarHarness(upstreams: "      - name: dry\n        provider: dry_run\n        emulates: fluxer\n        session_header: X-My-Session",
                                         memoryStore: true)
        let body = #"{"platform":"android","push_token":"\#(FluxerTests.fcmToken())"}"#
        let refused = try await h.post("/installations", body)
        #expect(refused.status == 401)
        #expect(refused.errorCode == "unauthorized")
        #expect(refused.text.contains("X-My-Session"))
        let accepted = try await h.post("/installations", body, headers: ["X-My-Session": "anything"])
        #expect(accepted.outcome("dry") == "forwarded", "\(accepted.text)")
        await h.stop()
    }

    /// Voidhash hands back one id per token, the same one for the same token; refresh keeps it.
    @Test func aVoidhashDryRunHandsBackAnIdPerToken() {
        let adapter = ProviderFactory.dryRunAdapter(name: "dry", DryRunConfig(emulates: .voidhash, iosBundleID: "a.b", androidPackageName: "a.c"))
        func id(_ body: String, _ path: String = "register") -> String? {
            let answer = adapter.emulatedResponse(to: HTTPClientRequest(method: "POST", url: "https://dry-run.invalid/api/v1/sdk/push-devices/\(path)",
                                                                        body: Array(body.utf8)))
            return (try? JSONValue.parse(answer.body))?.objectValue?["pushDeviceTokenId"]?.stringValue
        }
        let a = id(#"{"platformToken":"aaaa"}"#)
        #expect(a != nil && a == id(#"{"platformToken":"aaaa"}"#))
        #expect(a != id(#"{"platformToken":"bbbb"}"#))
        #expect(id(#"{"pushDeviceTokenId":"pdt_x","platformToken":"cccc"}"#, "refresh") == "pdt_x")
    }
}
