import Foundation
import PWCore
import PWPolicy
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// Several upstreams for one app: the primary answers the client, shadows are best effort, and
/// dedupe is per upstream.
@Suite struct AcrossProvidersTests {
    static func upstreams(primary: MockVoyado, shadow: MockVoyado) -> String {
        """
              - name: main
                provider: voyado
                role: primary
                base_path: \(primary.basePath)
                api_key: {env: MAIN_KEY}
                retry: {attempts: 2, backoff: 10ms, max_backoff: 20ms}
              - name: next
                provider: voyado
                role: shadow
                base_path: \(shadow.basePath)
                api_key: {env: NEXT_KEY}
                retry: {attempts: 2, backoff: 10ms, max_backoff: 20ms}
        """
    }

    /// One mock upstream per provider the policy can name, each following its `ProviderKind`'s document.
    @Test func oneMockPerProviderKind() {
        let mocks: [any ProviderMock.Type] = [MockVoyado.self, MockVoidhash.self, MockFluxer.self, MockNativeNotify.self, MockPushNotice.self]
        #expect(mocks.count == ProviderKind.allCases.count)
        #expect(Set(mocks.map { $0.kind }) == Set(ProviderKind.allCases))
    }

    @Test func failingShadowNeverFailsTheClient() async throws {
        let primary = try MockVoyado(apiKey: "main-key"), shadow = try MockVoyado(apiKey: "next-key")
        let h = try await SidecarHarness(upstreams: Self.upstreams(primary: primary, shadow: shadow),
                                         secrets: [.env("MAIN_KEY"): "main-key", .env("NEXT_KEY"): "next-key"])
        shadow.enqueue(.init(status: 503), .init(status: 503))
        let body = #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#
        let reply = try await h.post("/installations", body)
        #expect(reply.status == 202)
        #expect(reply.outcome("main") == "forwarded")
        #expect(reply.outcome("next") == "failed")
        #expect(primary.received(path: "/installations").count == 1)
        #expect(shadow.received(path: "/installations").count == 2)
        // The shadow's failure was not cached: the next registration reaches it again, the primary
        // answers unchanged.
        let again = try await h.post("/installations", body)
        #expect(again.outcome("main") == "unchanged")
        #expect(again.outcome("next") == "forwarded")
        #expect(primary.received(path: "/installations").count == 1)
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains(#"pushwarden_upstream_calls_total{upstream="next",operation="register",outcome="retryable"} 2"#))
        #expect(h.logs.text.contains("shadow upstream failed"))
        await h.stop()
        await primary.stop()
        await shadow.stop()
    }

    @Test func failingPrimaryFailsTheClientEvenWhenTheShadowTookIt() async throws {
        let primary = try MockVoyado(apiKey: "main-key"), shadow = try MockVoyado(apiKey: "next-key")
        let h = try await SidecarHarness(upstreams: Self.upstreams(primary: primary, shadow: shadow),
                                         secrets: [.env("MAIN_KEY"): "main-key", .env("NEXT_KEY"): "next-key"])
        primary.enqueue(.init(status: 400, body: #"{"error":{"code":"invalid_request"}}"#))
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#)
        #expect(reply.status == 422)
        #expect(reply.errorCode == "upstream_rejected")
        #expect(shadow.received(path: "/installations").count == 1)
        await h.stop()
        await primary.stop()
        await shadow.stop()
    }

    @Test func dedupeIsPerUpstream() async throws {
        let primary = try MockVoyado(apiKey: "main-key"), shadow = try MockVoyado(apiKey: "next-key")
        let single = """
                  - name: main
                    provider: voyado
                    base_path: \(primary.basePath)
                    api_key: {env: MAIN_KEY}
            """
        // The same app id served first with one upstream, then with two, sharing Redis.
        let first = try await SidecarHarness(upstreams: single, secrets: [.env("MAIN_KEY"): "main-key"])
        let body = #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#
        #expect(try await first.post("/installations", body).outcome("main") == "forwarded")
        await first.stop()
        let both = try await SidecarHarness(upstreams: Self.upstreams(primary: primary, shadow: shadow),
                                            secrets: [.env("MAIN_KEY"): "main-key", .env("NEXT_KEY"): "next-key"], sameApp: first.app)
        let reply = try await both.post("/installations", body)
        #expect(reply.outcome("main") == "unchanged")
        #expect(reply.outcome("next") == "forwarded")
        #expect(primary.received(path: "/installations").count == 1)
        #expect(shadow.received(path: "/installations").count == 1)
        await both.stop()
        await primary.stop()
        await shadow.stop()
    }
}
