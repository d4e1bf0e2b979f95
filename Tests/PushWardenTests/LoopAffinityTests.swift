import ClientAPI
import Foundation
import HTTPClient
import Loops
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import SessionAuth
import Testing

/// Where a registration's Redis commands go: over the connection of the loop its origin names,
/// whatever thread the work happens to run on. Each test has a Redis of its own, so every
/// connection Redis lists is the registrar's or the observer's.
@Suite(.serialized) struct LoopAffinityTests {
    struct Fixture {
        let redis: RedisServer
        let client: RedisClient
        let http: HTTPClient
        let app: AppRuntime
        let registrar: Registrar
        let mock: MockVoyado

        init() throws {
            redis = try RedisServer.start()
            mock = try MockVoyado(apiKey: "vk")
            let upstreams = """
                      - name: voyado
                        provider: voyado
                        role: primary
                        base_path: \(mock.basePath)
                        api_key: {env: VOYADO_KEY}
                """
            let logger = Logger(label: "test", level: .debug, sink: .memory())
            let metrics = Metrics()
            http = try HTTPClient()
            app = try TestApp.make(upstreams: upstreams, secrets: [.env("VOYADO_KEY"): Array("vk".utf8)], network: http, logger: logger,
                                   metrics: metrics, path: "affinity.yaml")
            client = RedisClient(configuration: redis.configuration())
            let store = RedisStore(client: client)
            registrar = Registrar(deduper: Deduper(store: store, metrics: metrics, logger: logger),
                                  identities: IdentityStore(store: store, logger: logger), metrics: metrics, logger: logger,
                                  inventory: Inventory(store: RedisInventoryStore(store: store), digests: .unkeyed))
        }

        func origin(on loop: EventLoop?) -> Registrar.Origin {
            Registrar.Origin(app: app, context: CallContext(contactID: "alice"), requestID: "test", loop: loop)
        }

        /// A registration through the whole operation (dedupe, lock, commit, inventory), run by a
        /// task on `loop`, for `origin`.
        func register(on loop: EventLoop, for origin: Registrar.Origin) async throws -> UpstreamOutcome? {
            let installation = Installation(platform: .android, pushService: .fcm, pushToken: "fcm-" + UUID().uuidString)
            let plan = try registrar.plan(installation, for: origin)
            let registrar = self.registrar
            return await Task(executorPreference: loop) {
                await registrar.register(installation, plan: plan, from: origin).first?.1
            }.value
        }

        /// Every client connection of this Redis but the observer's: its name and last command.
        func connections() async throws -> [(name: String, command: String)] {
            var configuration = redis.configuration()
            configuration.connections = 1
            let observer = RedisClient(configuration: configuration)
            defer { observer.close() }
            let list: String = try #require(try await observer.send(["CLIENT", "LIST"]).string)
            return list.split(whereSeparator: { $0.isNewline }).compactMap { line -> (name: String, command: String)? in
                var fields: [String: String] = [:]
                for field in line.split(separator: " ") {
                    let parts = field.split(separator: "=", maxSplits: 1)
                    if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
                }
                guard fields["cmd"] != "client|list" else { return nil }
                return (fields["name"] ?? "", fields["cmd"] ?? "")
            }
        }

        func stop() async {
            client.close()
            http.shutdown()
            await mock.stop()
            redis.stop()
        }
    }

    private func startedLoop() throws -> EventLoop {
        let loop = try EventLoop(name: "test-affinity")
        try loop.start()
        return loop
    }

    /// A request's registration on its loop: every command over that loop's own connection; the
    /// pool never connects.
    @Test func aRequestsRegistrationGoesOverItsLoopsConnection() async throws {
        let f = try Fixture()
        let loop = try startedLoop()
        defer { loop.stop() }
        #expect(try await f.client.send(["CLIENT", "SETNAME", "the-loop"], on: loop) == .status("OK"))
        #expect(try await f.register(on: loop, for: f.origin(on: loop)) == .forwarded)
        let seen = try await f.connections()
        #expect(seen.map(\.name) == ["the-loop"], "only the loop's connection: \(seen)")
        #expect(seen.first?.command != "client|setname", "and the registration used it: \(seen)")
        #expect(f.mock.received(path: "/installations").count == 1)
        await f.stop()
    }

    /// Work on a loop's thread whose origin names no loop (a worker's, say) uses the pool: the
    /// loop's connection is left alone.
    @Test func noLoopNamedMeansThePoolEvenOnALoopThread() async throws {
        let f = try Fixture()
        let loop = try startedLoop()
        defer { loop.stop() }
        #expect(try await f.client.send(["CLIENT", "SETNAME", "the-loop"], on: loop) == .status("OK"))
        #expect(try await f.register(on: loop, for: f.origin(on: nil)) == .forwarded)
        let seen = try await f.connections()
        let loopConnection = try #require(seen.first { $0.name == "the-loop" })
        #expect(loopConnection.command == "client|setname", "the loop's connection carried nothing: \(seen)")
        #expect(seen.contains { $0.name.isEmpty }, "the pool did: \(seen)")
        await f.stop()
    }
}
