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
import SessionAuth
import Testing

/// The registration operations on their own: no PushWarden server, no HTTP request, just an app
/// runtime, a store and real mock providers on loopback, as an outbox worker or an erasure sees it.
@Suite(.serialized) struct RegistrarTests {
    /// An app with the given upstreams, its registrar and the upstream client, over a memory store.
    struct Fixture {
        let app: AppRuntime
        let registrar: Registrar
        let client: HTTPClient
        let store: MemoryStore

        init(upstreams: String, secrets: [SecretRef: String]) throws {
            let logger = Logger(label: "test", level: .debug, sink: .memory())
            let metrics = Metrics()
            client = try HTTPClient()
            app = try TestApp.make(upstreams: upstreams, secrets: secrets.mapValues { Array($0.utf8) }, network: client, logger: logger,
                                   metrics: metrics, path: "registrar.yaml")
            store = MemoryStore()
            registrar = Registrar(deduper: Deduper(store: store, metrics: metrics, logger: logger),
                                  identities: IdentityStore(store: store, logger: logger), metrics: metrics, logger: logger)
        }

        func origin(_ contact: String = "alice") -> Registrar.Origin {
            Registrar.Origin(app: app, context: CallContext(contactID: contact), requestID: "test", loop: nil)
        }

        func caller(_ name: String) throws -> UpstreamCaller {
            try #require(app.upstreams.first { $0.adapter.name == name })
        }
    }

    static func voyado(_ mock: MockVoyado, name: String = "voyado", role: String = "primary") -> String {
        """
              - name: \(name)
                provider: voyado
                role: \(role)
                base_path: \(mock.basePath)
                api_key: {env: VOYADO_KEY}
                retry: {attempts: 2, backoff: 5ms, max_backoff: 10ms}
        """
    }

    static func fcm() -> String { "fcm-" + UUID().uuidString }

    @Test func aRegistrationIsForwardedOnceThenUnchanged() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let f = try Fixture(upstreams: Self.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk"])
        defer { f.client.shutdown() }
        let installation = Installation(platform: .android, pushService: .fcm, pushToken: Self.fcm())
        let plan = try f.registrar.plan(installation, for: f.origin())
        let first = await f.registrar.register(installation, plan: plan, from: f.origin())
        #expect(first.map(\.0) == ["voyado"])
        #expect(first.first?.1 == .forwarded)
        let second = await f.registrar.register(installation, plan: plan, from: f.origin())
        #expect(second.first?.1 == .unchanged)
        #expect(mock.received(path: "/installations").count == 1)
        // Another contact is another registration: forwarded again.
        let moved = await f.registrar.register(installation, plan: try f.registrar.plan(installation, for: f.origin("bob")), from: f.origin("bob"))
        #expect(moved.first?.1 == .forwarded)
        await mock.stop()
    }

    /// A worker with no HTTP context goes through the same dedupe as the client API.
    @Test func theSingleUpstreamOperationIsTheSameCode() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let f = try Fixture(upstreams: Self.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk"])
        defer { f.client.shutdown() }
        let installation = Installation(platform: .android, pushService: .fcm, pushToken: Self.fcm())
        #expect(await f.registrar.register(installation, at: try f.caller("voyado"), from: f.origin()) == .forwarded)
        let whole = await f.registrar.register(installation, plan: try f.registrar.plan(installation, for: f.origin()), from: f.origin())
        #expect(whole.first?.1 == .unchanged)
        #expect(await f.registrar.unregister(installation.pushToken, at: try f.caller("voyado"), from: f.origin()) == .forwarded)
        #expect(mock.received(path: "/installations").count == 1)
        #expect(mock.received(path: "/installations/unregister").count == 1)
        // Forgotten: the next registration reaches the upstream again.
        #expect(await f.registrar.register(installation, at: try f.caller("voyado"), from: f.origin()) == .forwarded)
        await mock.stop()
    }

    /// Failures stay typed: the edge alone turns them into the contract's errors.
    @Test func failuresAreTypedUntilTheEdge() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let f = try Fixture(upstreams: Self.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk"])
        defer { f.client.shutdown() }
        let caller = try f.caller("voyado")
        mock.enqueue(.init(status: 503), .init(status: 503))
        let down = await f.registrar.register(Installation(platform: .android, pushService: .fcm, pushToken: Self.fcm()), at: caller,
                                              from: f.origin())
        guard case .failed(.unavailable(let upstream, let retryAfter)) = down else {
            Issue.record("expected unavailable, got \(down)")
            return
        }
        #expect(upstream == "voyado")
        #expect(retryAfter >= 1)
        mock.enqueue(.init(status: 400, headers: ["Content-Type": "application/json"],
                           body: #"{"error":{"code":"invalid_platform","message":"x"}}"#))
        let refused = await f.registrar.register(Installation(platform: .android, pushService: .fcm, pushToken: Self.fcm()), at: caller,
                                                 from: f.origin())
        #expect(refused == .failed(.rejected(upstream: "voyado", status: 400, code: "invalid_platform")))
        if case .failed(let failure) = refused {
            #expect(failure.contractError.code == .upstreamRejected)
            #expect(failure.contractError.upstreamCode == "invalid_platform")
        }
        await mock.stop()
    }

    /// A shadow's failure is its own; the primary's outcome decides, and a rotation the primary
    /// took retires the previous token where the new one went.
    @Test func aRotationRetiresThePreviousTokenAtTheUpstreamsThatTookTheNewOne() async throws {
        let primary = try MockVoyado(apiKey: "vk")
        let shadow = try MockVoyado(apiKey: "vk")
        let f = try Fixture(upstreams: Self.voyado(primary) + "\n" + Self.voyado(shadow, name: "shadow", role: "shadow"),
                            secrets: [.env("VOYADO_KEY"): "vk"])
        defer { f.client.shutdown() }
        let old = Self.fcm()
        let installation = Installation(platform: .android, pushService: .fcm, pushToken: Self.fcm(), previousPushToken: old)
        shadow.enqueue(.init(status: 503), .init(status: 503))
        let outcomes = await f.registrar.register(installation, plan: try f.registrar.plan(installation, for: f.origin()), from: f.origin())
        #expect(outcomes.map(\.0) == ["voyado", "shadow"])
        #expect(outcomes[0].1 == .forwarded)
        guard case .failed(.unavailable) = outcomes[1].1 else {
            Issue.record("shadow: \(outcomes[1].1)")
            return
        }
        #expect(f.app.primarySucceeded(outcomes))
        let removed = primary.received(path: "/installations/unregister")
        #expect(removed.count == 1)
        #expect(removed.first.map { String(decoding: $0.body, as: UTF8.self).contains(old) } == true)
        #expect(shadow.received(path: "/installations/unregister").isEmpty)
        await primary.stop()
        await shadow.stop()
    }

    /// Events go only where the settings say they are taken, which `policy explain` reads too.
    @Test func eventsFollowTheSettingsAndTheAdapterAgrees() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let f = try Fixture(upstreams: Self.voyado(mock) + "\n" + """
                  - name: pn
                    provider: pushnotice
                    role: shadow
                    base_url: http://127.0.0.1:1
                    slug: ktso
                    api_key: {env: PN_KEY}
            """, secrets: [.env("VOYADO_KEY"): "vk", .env("PN_KEY"): "pnp_" + String(repeating: "a", count: 32)])
        defer { f.client.shutdown() }
        for caller in f.app.upstreams {
            let builds = caller.adapter.eventsRequest([], context: CallContext(contactID: "c")) != nil
            #expect(builds == caller.takesEvents, "\(caller.adapter.name)")
        }
        let event = try #require(try RequestValidator.events(
            body: Array(#"{"events":[{"type":"opened","message_id":"m1","recipient_id":"r1","occurred_at":"2026-12-01T10:00:00Z"}]}"#.utf8),
            policy: f.app.policy.client, contactID: "alice").first)
        let outcomes = await f.registrar.report([event], from: f.origin())
        #expect(outcomes.map(\.1) == [.forwarded, .skipped])
        #expect(mock.received(path: "/events").count == 1)
        await mock.stop()
    }
}
