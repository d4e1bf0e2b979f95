import Foundation
import HTTPClient
import PWCore
import PWPolicy
import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// Where a test's sidecar keeps its inventory.
enum CensusStore: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, single, cluster

    var testDescription: String { rawValue }
}

/// Coverage per upstream and the paged export (migration between providers) over real HTTP on
/// the admin listener, real mock providers, and the memory store, one real redis-server or the
/// real Redis Cluster: shares counted exactly while a shadow upstream fails some registrations,
/// the gauges and the dashboard's queries of them, and an export walk that returns every
/// installation once while registrations go on.
@Suite(.serialized) struct CoverageTests {
    static let shadowFailure = MockAnswer(status: 422, body: #"{"ok":false,"error":{"code":"validation_failed","message":"refused"}}"#)

    /// A sidecar with Voyado as the primary and Push Notice as the shadow (both sync), the
    /// admin token in force, on `store`; stopped with its mocks after `body`.
    static func withMigration(_ store: CensusStore, _ body: (SidecarHarness, MockVoyado, MockPushNotice) async throws -> Void) async throws {
        let voyado = try MockVoyado(apiKey: "voyado-key"), pn = try MockPushNotice(apiKey: PushNoticeTests.key)
        var secrets = InventoryTests.secrets
        secrets[.env("TEST_ADMIN_TOKEN")] = ServerToServerTests.adminToken
        let upstreams = InventoryTests.voyado(voyado) + "\n" + PushNoticeTests.upstream(pn, role: "shadow")
        func run(_ dedupe: (any DedupeStore)?) async throws {
            let h = try await SidecarHarness(upstreams: upstreams, secrets: secrets, memoryStore: store == .memory, store: dedupe,
                                             topLevel: "admin: {token: {env: TEST_ADMIN_TOKEN}}")
            do {
                try await body(h, voyado, pn)
            } catch {
                await h.stop()
                await voyado.stop()
                await pn.stop()
                throw error
            }
            await h.stop()
            await voyado.stop()
            await pn.stop()
        }
        switch store {
        case .memory, .single: try await run(nil)
        case .cluster:
            try await RedisCluster.use { cluster in
                let client = RedisClient(configuration: try RedisConfiguration(url: cluster.url))
                defer { client.close() }
                try await run(RedisStore(client: client))
            }
        }
    }

    /// `GET path` on the admin listener with the operator's token (or `authorization`).
    static func get(_ h: SidecarHarness, _ path: String, method: String = "GET",
                    authorization: String? = "Bearer " + ServerToServerTests.adminToken) async throws -> Harness.Reply {
        var headers: HTTPHeaders = [:]
        if let authorization { headers.set("Authorization", authorization) }
        let response = try await h.client.execute(HTTPClientRequest(method: method, url: "http://127.0.0.1:\(h.sidecar.adminPort)\(path)",
                                                                    headers: headers, timeoutMillis: 20_000))
        return Harness.Reply(status: response.status, headers: response.headers, body: response.body)
    }

    /// Registers `token` for `contact`; the shadow refuses it when `shadowFails`.
    static func register(_ h: SidecarHarness, _ pn: MockPushNotice, _ token: String, contact: String, shadowFails: Bool = false) async throws {
        if shadowFails { pn.enqueue(shadowFailure) }
        let reply = try await h.post("/installations", InventoryTests.android(token), contact: contact)
        #expect(reply.status == 202, "\(reply.text)")
        #expect(reply.outcome("voyado") != nil)
        #expect((reply.outcome("pushnotice") == "forwarded") == !shadowFails, "\(reply.text)")
    }

    static func upstream(_ reply: Harness.Reply, _ name: String) -> (installations: String?, share: String?) {
        let object = reply.json?["upstreams"]?.objectValue?[name]?.objectValue
        return (object?["installations"]?.numberText, object?["share"]?.numberText)
    }

    // MARK: Coverage

    @Test(arguments: CensusStore.allCases)
    func coverageCountsWhatEachUpstreamHoldsWhileTheShadowFailsSome(store: CensusStore) async throws {
        try await Self.withMigration(store) { h, _, pn in
            let contacts = (0..<10).map { "contact-\($0)" }
            var tokens: [(token: String, contact: String)] = []
            for (index, contact) in contacts.enumerated() {
                for _ in 0..<2 { tokens.append((InventoryTests.android(), contact)) }
                // A quarter of the registrations never reach the shadow.
                for (offset, entry) in tokens.suffix(2).enumerated() {
                    try await Self.register(h, pn, entry.token, contact: entry.contact, shadowFails: (2 * index + offset) % 4 == 0)
                }
            }
            // The sidecar counted once as it started: read again now, as the next minute would.
            let app = try InventoryTests.app(h)
            try await h.sidecar.census.read(app)
            let coverage = try await Self.get(h, "/v1/apps/\(h.app)/coverage")
            #expect(coverage.status == 200, "\(coverage.text)")
            #expect(coverage.headers["Cache-Control"] == "no-store")
            #expect(coverage.json?["installations"]?.numberText == "20")
            #expect(coverage.json?["contacts"]?.numberText == "10")
            #expect(Self.upstream(coverage, "voyado") == ("20", "1"))
            #expect(Self.upstream(coverage, "pushnotice") == ("15", "0.75"))
            let asOf = try #require(coverage.json?["as_of"]?.stringValue)
            #expect(asOf.hasSuffix("Z") && asOf.count == 24)

            // Within the minute the same reading answers: nothing is counted on each request.
            try await Self.register(h, pn, InventoryTests.android(), contact: "late")
            let cached = try await Self.get(h, "/v1/apps/\(h.app)/coverage")
            #expect(cached.json?["as_of"]?.stringValue == asOf)
            #expect(cached.json?["installations"]?.numberText == "20")

            // The shadow catches up on a token it failed (16 then 17 with "late"'s); a token it
            // failed moves to another contact and the shadow takes it there (18); a contact's two
            // installations are unregistered (the contact leaves; 16 of 19).
            try await Self.register(h, pn, tokens[0].token, contact: tokens[0].contact)
            try await Self.register(h, pn, tokens[4].token, contact: "contact-9")
            for entry in tokens[2...3] {
                let gone = try await h.post("/installations/unregister", InventoryTests.unregister(entry.token), contact: entry.contact)
                #expect(gone.status == 202)
            }
            try await h.sidecar.census.read(app)
            let after = try await Self.get(h, "/v1/apps/\(h.app)/coverage")
            #expect(after.json?["installations"]?.numberText == "19")
            #expect(after.json?["contacts"]?.numberText == "10")
            #expect(Self.upstream(after, "voyado") == ("19", "1"))
            #expect(Self.upstream(after, "pushnotice") == ("16", "0.8421"))

            // The gauges show the same reading, and the dashboard queries them.
            let metrics = try await h.admin("/metrics").text
            #expect(metrics.contains(#"pushwarden_inventory_installations{app="\#(h.app)",upstream="pushnotice"} 16"#))
            #expect(metrics.contains(#"pushwarden_inventory_installations{app="\#(h.app)",upstream="voyado"} 19"#))
            #expect(metrics.contains(#"pushwarden_inventory_app_installations{app="\#(h.app)"} 19"#))
            #expect(metrics.contains(#"pushwarden_inventory_contacts{app="\#(h.app)"} 10"#))
            let queries = try Self.dashboardQueries()
            for gauge in ["pushwarden_inventory_installations", "pushwarden_inventory_app_installations", "pushwarden_inventory_contacts"] {
                #expect(queries.contains { $0.contains(gauge + "{") }, "the dashboard queries \(gauge)")
                #expect(metrics.contains("# TYPE \(gauge) gauge"))
            }
        }
    }

    /// Two replicas of one app on one Redis: what either registered, both count alike.
    @Test func replicasSharingARedisAnswerTheSameCoverage() async throws {
        try await Self.withMigration(.single) { first, _, pn in
            let otherVoyado = try MockVoyado(apiKey: "voyado-key")
            let second = try await SidecarHarness(upstreams: InventoryTests.voyado(otherVoyado) + "\n"
                                                      + PushNoticeTests.upstream(pn, role: "shadow"),
                                                  secrets: InventoryTests.secrets.merging([.env("TEST_ADMIN_TOKEN"): ServerToServerTests.adminToken]) { $1 },
                                                  sameApp: first.app, topLevel: "admin: {token: {env: TEST_ADMIN_TOKEN}}")
            for index in 0..<10 {
                try await Self.register(index < 6 ? first : second, pn, InventoryTests.android(), contact: "replica-\(index % 3)",
                                        shadowFails: index == 9)
            }
            for h in [first, second] {
                try await h.sidecar.census.read(try InventoryTests.app(h))
                let coverage = try await Self.get(h, "/v1/apps/\(h.app)/coverage")
                #expect(coverage.json?["installations"]?.numberText == "10")
                #expect(coverage.json?["contacts"]?.numberText == "3")
                #expect(Self.upstream(coverage, "pushnotice") == ("9", "0.9"))
            }
            await second.stop()
            await otherVoyado.stop()
        }
    }

    /// Every query of the Grafana dashboard.
    static func dashboardQueries() throws -> [String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let data = try Data(contentsOf: root.appendingPathComponent("deploy/grafana/pushwarden.json"))
        let dashboard = try JSONValue.parse(Array(data))
        return (dashboard.objectValue?["panels"]?.arrayValue ?? []).flatMap { panel in
            (panel.objectValue?["targets"]?.arrayValue ?? []).compactMap { $0.objectValue?["expr"]?.stringValue }
        }
    }

    @Test func theRoutesAreTheAdminTokensAndRefuseWhatTheyDoNotTake() async throws {
        try await Self.withMigration(.memory) { h, _, _ in
            let base = "/v1/apps/\(h.app)"
            for path in [base + "/coverage", base + "/installations"] {
                let unauthorized = try await Self.get(h, path, authorization: nil)
                #expect(unauthorized.status == 401)
                #expect(unauthorized.headers["WWW-Authenticate"] == "Bearer")
                #expect(try await Self.get(h, path, authorization: "Bearer wrong").status == 401)
                #expect(try await Self.get(h, "/v1/apps/nope/" + path.split(separator: "/").last!).errorCode == "not_found")
                let post = try await Self.get(h, path, method: "POST")
                #expect(post.status == 405)
                #expect(post.headers["Allow"] == "GET")
            }
            for query in ["limit=0", "limit=1001", "limit=-1", "limit=x", "limit=7&limit=8", "cursor=%%%", "cursor=AAAA", "page=2"] {
                let reply = try await Self.get(h, base + "/installations?" + query)
                #expect(reply.status == 400, "\(query)")
                #expect(reply.errorCode == "invalid_request", "\(query)")
            }
            #expect(try await Self.get(h, base + "/coverage?x=1").status == 400)
            // The client listener has no such routes.
            let client = try await h.client.execute(HTTPClientRequest(method: "GET", url: "http://127.0.0.1:\(h.sidecar.port)\(base)/coverage",
                                                                      headers: ["Authorization": "Bearer " + ServerToServerTests.adminToken]))
            #expect(client.status == 404)
        }
    }

    // MARK: Export

    @Test(arguments: CensusStore.allCases)
    func aWalkInPagesOfSevenReturnsEachOfFiftyInstallationsOnceWhileRegistrationsGoOn(store: CensusStore) async throws {
        try await Self.withMigration(store) { h, _, pn in
            var present: [String: String] = [:]  // short hash → contact
            var shadowless: [(String, String)] = []
            for index in 0..<50 {
                let token = InventoryTests.android(), contact = "walker-\(index % 9)"
                try await Self.register(h, pn, token, contact: contact, shadowFails: index % 2 == 0)
                present[Redact.token(token)] = contact
                if index % 2 == 0 { shadowless.append((token, contact)) }
            }
            // Meanwhile: new installations, and the shadow taking those it failed (each rewrites
            // its installation's entry in the index).
            let stop = Mutex(false)
            let shadowFill = shadowless
            let churn = Task {
                var round = 0
                while !stop.withLock({ $0 }), round < 60 {
                    _ = try? await h.post("/installations", InventoryTests.android(InventoryTests.android()), contact: "newcomer-\(round % 5)")
                    if round < shadowFill.count {
                        let (token, contact) = shadowFill[round]
                        _ = try? await h.post("/installations", InventoryTests.android(token), contact: contact)
                    }
                    round += 1
                }
                return round
            }
            var seen: [String: Int] = [:]
            var cursor: String?
            var pages = 0
            repeat {
                let query = "limit=7" + (cursor.map { "&cursor=" + $0 } ?? "")
                let page = try await Self.get(h, "/v1/apps/\(h.app)/installations?" + query)
                #expect(page.status == 200, "\(page.text)")
                let items = page.json?["installations"]?.arrayValue ?? []
                #expect(items.count <= 7)
                for item in items {
                    let object = try #require(item.objectValue)
                    let token = try #require(object["token"]?.stringValue)
                    seen[token, default: 0] += 1
                    if let contact = present[token] { #expect(object["contact_id"]?.stringValue == contact) }
                    #expect(token.hasPrefix("tok:") && token.count == 12)
                    #expect(object["platform"]?.stringValue == "android")
                    #expect(object["upstreams"]?.arrayValue?.contains(.string("voyado")) == true)
                }
                cursor = page.json?["next_cursor"]?.stringValue
                if cursor == nil { #expect(page.json?["next_cursor"] == .null) }
                pages += 1
                // And between every two pages for certain: one more installation, and the shadow
                // taking one it failed (from the other end of the list than the churn's).
                #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android()), contact: "between").status == 202)
                if pages <= shadowless.count {
                    let (token, contact) = shadowless[shadowless.count - pages]
                    #expect(try await h.post("/installations", InventoryTests.android(token), contact: contact).status == 202)
                }
            } while cursor != nil && pages < 100
            stop.withLock { $0 = true }
            let rounds = await churn.value
            #expect(rounds > 0)
            #expect(pages >= 8)
            for (token, contact) in present { #expect(seen[token] == 1, "\(token) of \(contact) seen \(seen[token] ?? 0) times") }
            #expect(seen.values.allSatisfy { $0 == 1 }, "no installation is returned twice")
            // No raw token leaves: only the short hashes.
            #expect(!h.logs.text.contains("fcm-"))
        }
    }

    // MARK: Reconciling

    /// Counts and index lost (as for installations kept before they existed) or holding an entry
    /// whose record is gone: one reconcile pass over the shards makes them agree with the records.
    @Test func theReconcilePassMendsCountsAndIndexFromTheRecords() async throws {
        try await Self.withMigration(.single) { h, _, pn in
            var tokens: [String] = []
            for index in 0..<12 {
                let token = InventoryTests.android()
                tokens.append(token)
                try await Self.register(h, pn, token, contact: "mend-\(index % 4)", shadowFails: index < 3)
            }
            let redis = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
            defer { redis.close() }
            let keys = AppInventoryKeys(app: h.app)
            for shard in keys.shards { _ = try await redis.send(["DEL", shard.index, shard.counts, shard.contacts]) }
            // A stray entry naming an installation nobody holds.
            let stray = InventoryPosition(token: TokenKeys(digest: String(repeating: "ab", count: 32)),
                                          contact: ContactKeys(digest: String(repeating: "cd", count: 32)))
            let strayShard = keys.shard(of: stray.token)
            _ = try await redis.send(["ZADD", strayShard.index, "0", stray.indexKey + "voyado"])
            _ = try await redis.send(["HINCRBY", strayShard.counts, "i", "1"])
            let app = try InventoryTests.app(h)
            #expect(try await h.sidecar.census.read(app).installations == 1)

            // (The sidecar's own pass may mend a shard first: either way every shard is mended.)
            #expect(try await h.sidecar.census.reconcileAll(app) > 0)
            let coverage = try await h.sidecar.census.read(app)
            #expect(coverage.installations == 12)
            #expect(coverage.contacts == 4)
            #expect(coverage.upstreams.map(\.installations) == [12, 9])
            #expect(try await h.sidecar.census.reconcileAll(app) == 0)
            let page = try await Self.get(h, "/v1/apps/\(h.app)/installations?limit=1000")
            let items: [JSONValue] = page.json?["installations"]?.arrayValue ?? []
            let listed = Set(items.compactMap { $0.objectValue?["token"]?.stringValue })
            #expect(listed == Set(tokens.map { Redact.token($0) }))
            #expect(page.json?["next_cursor"] == .null)
        }
    }
}

extension JSONValue {
    /// A number's text as the answer wrote it.
    var numberText: String? {
        if case .number(let text) = self { return text }
        return nil
    }
}
