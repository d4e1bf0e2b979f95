import Foundation
import PWCore
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
@testable import RedisClient
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// Where the sidecars of a test keep their state.
enum SharedRedis: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case single, cluster

    var testDescription: String { rawValue }

    /// Runs `body` with the URL (the cluster's one test at a time, see `RedisCluster.use`).
    func with(_ body: (String) async throws -> Void) async throws {
        switch self {
        case .single: try await body(RedisServer.shared.url)
        case .cluster: try await RedisCluster.use { cluster in try await body(cluster.url) }
        }
    }
}

/// Sidecars that share one Redis: each with its own client, as separate processes would be.
/// Stops every sidecar and closes every client, also when `body` throws.
func withSidecars(_ count: Int, url: String, mock: MockVoyado, clientYAML: String? = nil,
                  _ body: ([Harness]) async throws -> Void) async throws {
    var clients: [RedisClient] = []
    var harnesses: [Harness] = []
    func tearDown() async {
        for h in harnesses { await h.base.stop() }
        for client in clients { client.close() }
    }
    do {
        for _ in 0..<count {
            let client = RedisClient(configuration: try RedisConfiguration(url: url))
            clients.append(client)
            harnesses.append(try await Harness(clientYAML: clientYAML, mock: mock, sharedStore: RedisStore(client: client),
                                               sameAppAs: harnesses.first))
        }
        try await body(harnesses)
    } catch {
        await tearDown()
        await mock.stop()
        throw error
    }
    await tearDown()
    await mock.stop()
}

private func registration(_ token: String) -> String { #"{"platform":"android","push_token":"\#(token)"}"# }

/// Every store operation through real sidecars on a real Redis Cluster (three masters, three
/// replicas), several sidecars sharing one Redis or one cluster, and a cluster that reshards and
/// fails over under load. One test at a time: they share the one cluster.
@Suite(.serialized) struct ClusterStoreTests {
    /// The outbox on the cluster: a queued registration and unregister are delivered in order,
    /// every command of a shard naming one slot.
    @Test func theOutboxDeliversOnTheCluster() async throws {
        try await RedisCluster.use { cluster in
            let client = RedisClient(configuration: try RedisConfiguration(url: cluster.url))
            defer { client.close() }
            let mock = try MockVoyado(apiKey: "vk")
            let h = try await SidecarHarness(upstreams: OutboxTests.voyado(mock), secrets: [.env("VOYADO_KEY"): "vk"],
                                             store: RedisStore(client: client))
            let token = "fcm-" + UUID().uuidString
            #expect(try await h.post("/installations", registration(token)).outcome("voyado") == "queued")
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("voyado") == "queued")
            #expect(await OutboxTests.eventually { mock.received(path: "/installations/unregister").count == 1 })
            let paths = mock.received.map(\.path)
            #expect(paths.firstIndex { $0.hasSuffix("/installations") }! < paths.firstIndex { $0.hasSuffix("/unregister") }!)
            await h.stop()
            await mock.stop()
        }
    }

    /// The inventory on the cluster: records, a move between contacts, the cap, a stale logout
    /// and an erasure, every command naming keys of one hash tag.
    @Test func theInventoryWorksOnTheCluster() async throws {
        try await RedisCluster.use { cluster in
            let client = RedisClient(configuration: try RedisConfiguration(url: cluster.url))
            defer { client.close() }
            let mock = try MockVoyado(apiKey: "voyado-key")
            let h = try await SidecarHarness(upstreams: InventoryTests.voyado(mock), secrets: InventoryTests.secrets,
                                             clientYAML: "      platforms: [ios, android]\n      max_installations: 3",
                                             store: RedisStore(client: client))
            let tokens = (0..<4).map { _ in "fcm-" + UUID().uuidString }
            for token in tokens {
                #expect(try await h.post("/installations", registration(token), contact: "alice").status == 202)
                try await Task.sleep(for: .milliseconds(5))  // last-seen times in milliseconds: no tie decides the eviction
            }
            #expect(try await InventoryTests.list(h, "alice").count == 3)  // the first one evicted
            #expect(mock.received(path: "/installations/unregister").compactMap { $0.object?["push_token"]?.stringValue } == [tokens[0]])
            #expect(try await h.post("/installations", registration(tokens[3]), contact: "bob").status == 202)
            #expect(try await InventoryTests.list(h, "alice").count == 2)
            #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(tokens[3])"}"#, contact: "alice")
                .outcome("voyado") == "skipped")
            let report = try await InventoryTests.registrar(h).erase("alice", in: try InventoryTests.app(h), requestID: "cluster")
            #expect(report.installations == 2)
            #expect(try await InventoryTests.list(h, "alice").isEmpty)
            #expect(try await InventoryTests.list(h, "bob").count == 1)
            #expect(!h.logs.text.contains("inventory store unavailable"))
            await h.stop()
            await mock.stop()
        }
    }

    @Test func everyOperationWorksOnTheClusterAndKeysSpreadOverEveryMaster() async throws {
        try await RedisCluster.use { cluster in
            let client = RedisClient(configuration: try RedisConfiguration(url: cluster.url))
            defer { client.close() }
            // Voidhash keeps an identity (its device id) for unregister: the identity key is used too.
            try await withSidecar(try MockVoidhash(publishableKey: VoidhashTests.key), { mock in
                try await SidecarHarness(upstreams: VoidhashTests.block(mock), secrets: [.env("VH_KEY"): VoidhashTests.key],
                                         store: RedisStore(client: client))
            }) { h, mock async throws in
                let token = Harness.apnsToken()
                let body = #"{"platform":"ios","push_token":"\#(token)"}"#
                #expect(try await h.post("/installations", body).outcome("vh") == "forwarded")
                #expect(try await h.post("/installations", body).outcome("vh") == "unchanged")
                let device = try #require(mock.device(token: token.lowercased()))
                let keys = RegistrationKeys(app: h.app, upstream: "vh", pushToken: token.lowercased())
                #expect(try await client.send(["EXISTS", keys.identity]) == .integer(1))
                #expect(ClusterSlot.of(Array(keys.entry.utf8)) == ClusterSlot.of(Array(keys.identity.utf8)))
                let gone = try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#)
                #expect(gone.outcome("vh") == "forwarded")
                #expect(mock.received(path: "/unregister").first?.bodyText == #"{"pushDeviceTokenId":"\#(device.id)"}"#)
                #expect(try await h.post("/installations/unregister", #"{"push_token":"\#(token)"}"#).outcome("vh") == "skipped")
                #expect(try await h.post("/installations", body).outcome("vh") == "forwarded")
                let ready = try await h.admin("/readyz")
                #expect(ready.json?["store"] == "reachable")
            }

            // Registration entries of many tokens, and their app's inventory index (256 shards),
            // land on all three masters.
            try await withSidecars(1, url: cluster.url, mock: try MockVoyado()) { sidecars in
                let h = sidecars[0]
                for _ in 0..<30 {
                    #expect(try await h.post("/installations", registration("fcm-\(UUID().uuidString)")).outcome == "forwarded")
                }
                var holders: [String: Int] = [:]
                for master in try cluster.masters() {
                    let direct = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: master.port))
                    for pattern in ["pw:v2:{*}:reg", "pw:v2:{inv:*}:seen", "pw:v2:{inv:*}:h:*"] {
                        if case .array(let names) = try await direct.send(["KEYS", pattern]), !names.isEmpty { holders[pattern, default: 0] += 1 }
                    }
                    direct.close()
                }
                #expect(holders == ["pw:v2:{*}:reg": 3, "pw:v2:{inv:*}:seen": 3, "pw:v2:{inv:*}:h:*": 3])
            }
        }
    }

    @Test(arguments: SharedRedis.allCases)
    func threeSidecarsMakeOneUpstreamCallAndShareTheRateLimit(_ redis: SharedRedis) async throws {
        try await redis.with { url in
            let mock = try MockVoyado(latencyMillis: 100)
            try await withSidecars(3, url: url, mock: mock,
                                   clientYAML: "      platforms: [android]\n      rate_limits: {unregister: 3/min}") { sidecars in
                let body = registration("fcm-\(UUID().uuidString)")
                let outcomes = try await withThrowingTaskGroup(of: String?.self) { group in
                    for i in 0..<50 { group.addTask { try await sidecars[i % 3].post("/installations", body).outcome } }
                    return try await group.reduce(into: [String?]()) { $0.append($1) }
                }
                #expect(outcomes.filter { $0 == "forwarded" }.count == 1)
                #expect(outcomes.filter { $0 == "unchanged" }.count == 49)
                #expect(mock.received(path: "/installations").count == 1)

                // 3/min for one contact, whichever sidecar it reaches: each sidecar may admit one
                // request (its share) the others have not heard of yet, so the three admit at most
                // 3 + 3 × 1 at once; once their counts have met in Redis (within a second), none
                // admits more, and Retry-After says when one will.
                let gone = #"{"push_token":"fcm-\#(UUID().uuidString)"}"#
                let contact = "carol-\(UUID().uuidString.prefix(6))"
                var admitted = 0
                for i in 0..<9 {
                    let reply = try await sidecars[i % 3].post("/installations/unregister", gone, contact: contact)
                    if reply.status == 202 { admitted += 1 } else { #expect(reply.errorCode == "rate_limited") }
                }
                // A request the store did not answer in time is admitted by design (logged and
                // counted): only those may go beyond the bound, and the message says how many there were.
                let fallbacks = try await rateLimitFallbacks(sidecars)
                #expect(admitted >= 3 && admitted - fallbacks <= 6, "admitted \(admitted) of 9, \(fallbacks) unchecked (the store did not answer)")
                try await Task.sleep(for: .milliseconds(1500))
                for sidecar in sidecars {
                    let reply = try await sidecar.post("/installations/unregister", gone, contact: contact)
                    #expect(reply.status == 429)
                    // The rest of this window (≤ 60 s), then until up to 6 requests weighted as the
                    // previous window leave room for one: 60 × (1 − 2/6) = 40 s more at most.
                    #expect((1...100).contains(Int(reply.headers["Retry-After"] ?? "") ?? -1), "Retry-After \(reply.headers["Retry-After"] ?? "-")")
                }
                #expect(try await sidecars[1].post("/installations/unregister", gone, contact: contact + "-other").status == 202)
            }
        }
    }

    /// A burst of registrations from one contact at three sidecars at once: together they admit
    /// the limit plus at most one share each (10/min: a share of 1), one sidecar alone admits
    /// exactly the limit, and nothing admitted reaches the upstream twice.
    @Test(arguments: SharedRedis.allCases)
    func aBurstAtThreeReplicasStaysWithinTheStatedBound(_ redis: SharedRedis) async throws {
        try await redis.with { url in
            let mock = try MockVoyado()
            try await withSidecars(3, url: url, mock: mock,
                                   clientYAML: "      platforms: [android]\n      rate_limits: {register: 10/min}") { sidecars in
                func burst(_ contact: String, at targets: [Harness]) async throws -> (admitted: Int, limited: Int) {
                    let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                        for i in 0..<60 {
                            group.addTask {
                                try await targets[i % targets.count].post("/installations", registration("fcm-\(UUID().uuidString)"), contact: contact).status
                            }
                        }
                        return try await group.reduce(into: [Int]()) { $0.append($1) }
                    }
                    #expect(statuses.allSatisfy { $0 == 202 || $0 == 429 }, "\(statuses)")
                    return (statuses.filter { $0 == 202 }.count, statuses.filter { $0 == 429 }.count)
                }
                let shared = try await burst("erin-\(UUID().uuidString.prefix(6))", at: sidecars)
                #expect((10...13).contains(shared.admitted), "three sidecars admitted \(shared.admitted) of 60")
                let alone = try await burst("frank-\(UUID().uuidString.prefix(6))", at: [sidecars[0]])
                #expect(alone.admitted == 10, "one sidecar admitted \(alone.admitted) of 60")
                #expect(mock.received(path: "/installations").count == shared.admitted + alone.admitted)
            }
        }
    }

    /// Slots holding registrations move to another master while registrations keep coming: every
    /// request answers 202, and dedupe holds throughout (no extra upstream call).
    @Test func reshardingWhileRegistrationsFlowCostsNoErrors() async throws {
        try await RedisCluster.use { cluster in
            let mock = try MockVoyado()
            try await withSidecars(2, url: cluster.url, mock: mock) { sidecars in
                let from = try cluster.master(forSlot: 0)
                let to = try #require(try cluster.masters().first { $0.port != from.port })
                let moving = 0..<200
                var tokens: [String] = []
                while tokens.count < 20 {
                    let token = "fcm-\(UUID().uuidString)"
                    let entry = RegistrationKeys(app: sidecars[0].app, upstream: "voyado", pushToken: token).entry
                    if moving.contains(ClusterSlot.of(Array(entry.utf8))) { tokens.append(token) }
                }
                for token in tokens { #expect(try await sidecars[0].post("/installations", registration(token)).status == 202) }
                let baseline = mock.received(path: "/installations").count

                let flow = Task { try await steadyRegistrations(tokens, through: sidecars, perSecond: 40, seconds: 4) }
                try await Task.sleep(for: .milliseconds(500))
                try cluster.reshard(count: moving.count, from: from, to: to)
                let result = try await flow.value
                #expect(try cluster.master(forSlot: 0).port == to.port)
                #expect(result.statuses.allSatisfy { $0 == 202 }, "statuses \(Set(result.statuses))")
                #expect(mock.received(path: "/installations").count == baseline)
                for h in sidecars {
                    #expect(!(try await h.admin("/metrics")).text.contains("pushwarden_dedupe_degraded_total{"))
                }
                try cluster.reshard(count: moving.count, from: to, to: from)
                try cluster.waitUntilHealthy(seconds: 20)
            }
        }
    }

    /// A master is SIGKILLed while registrations flow at 20/s for 12 s: every request still answers
    /// 202 (dedupe degrades while its slots have no master: extra upstream calls, counted), and once
    /// the replica has taken over, dedupe works again. The node is restarted afterwards and rejoins.
    @Test func aMasterKilledWhileRegistrationsFlowCostsDedupeNotAnswers() async throws {
        try await RedisCluster.use { cluster in
            let mock = try MockVoyado()
            try await withSidecars(2, url: cluster.url, mock: mock) { sidecars in
                let tokens = (0..<60).map { _ in "fcm-\(UUID().uuidString)" }
                for token in tokens { #expect(try await sidecars[0].post("/installations", registration(token)).outcome == "forwarded") }
                let entry = RegistrationKeys(app: sidecars[0].app, upstream: "voyado", pushToken: tokens[0]).entry
                let victim = try cluster.master(forSlot: ClusterSlot.of(Array(entry.utf8)))

                let flow = Task { try await steadyRegistrations(tokens, through: sidecars, perSecond: 20, seconds: 12) }
                try await Task.sleep(for: .seconds(2))
                cluster.kill(port: victim.port)
                let killedAt = ContinuousClock.now
                let result = try await flow.value
                let extra = mock.received(path: "/installations").count - tokens.count
                let degraded = result.forwardedAt.max().map { $0 - killedAt }
                print("failover: \(result.statuses.count) requests, longest \(result.longest), extra upstream calls \(extra), "
                      + "last one forwarded \(degraded.map { "\($0)" } ?? "-") after the kill")
                // Dedupe came back during the flow: its last 2 s made no extra call.
                #expect(degraded.map { $0 < .seconds(8) } ?? true)
                #expect(result.statuses.allSatisfy { $0 == 202 }, "statuses \(Set(result.statuses))")

                // The replica took over: the victim's slots have a live master again, and a new
                // registration is deduplicated.
                var dedupesAgain: Duration?
                while ContinuousClock.now - killedAt < .seconds(30) {
                    let token = "fcm-\(UUID().uuidString)"
                    _ = try await sidecars[0].post("/installations", registration(token))
                    if try await sidecars[1].post("/installations", registration(token)).outcome == "unchanged" {
                        dedupesAgain = ContinuousClock.now - killedAt
                        break
                    }
                    try await Task.sleep(for: .milliseconds(200))
                }
                #expect(dedupesAgain != nil)
                let promoted = try cluster.master(forSlot: ClusterSlot.of(Array(entry.utf8)))
                #expect(promoted.port != victim.port)
                // What was registered before the kill survived on the replica.
                #expect(try await sidecars[1].post("/installations", registration(tokens[0])).outcome == "unchanged")
            }
            try cluster.restart(port: stoppedPort(cluster))
        }
    }
}

extension ClusterStoreTests {
    /// New registrations flow at 20/s while a master is SIGKILLed: each one answered `202
    /// forwarded` during the failover is remembered once the replica took over (its next call is
    /// `unchanged`, no second upstream call) and listed in its contact's inventory, although the
    /// dedupe commit and the inventory write that followed the upstream's answer first failed.
    @Test func registrationsAnsweredDuringAFailoverAreRemembered() async throws {
        try await RedisCluster.use { cluster in
            let mock = try MockVoyado()
            try await withSidecars(2, url: cluster.url, mock: mock) { sidecars in
                let tokens = (0..<240).map { _ in "fcm-\(UUID().uuidString)" }
                let victim = try cluster.master(forSlot: 0)
                let flow = Task { try await steadyRegistrations(tokens, through: sidecars, perSecond: 20, seconds: 12) }
                try await Task.sleep(for: .seconds(2))
                cluster.kill(port: victim.port)
                let killedAt = ContinuousClock.now
                let result = try await flow.value
                #expect(result.statuses.count == tokens.count)
                #expect(result.statuses.allSatisfy { $0 == 202 }, "statuses \(Set(result.statuses))")
                let deferred = sidecars.map { $0.base.sidecar.handler.registrar.deduper.pending }

                // Every write that waited went through once the slots had a master again.
                while deferred.contains(where: { $0.count > 0 }), ContinuousClock.now - killedAt < .seconds(40) {
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(deferred.allSatisfy { $0.count == 0 }, "writes still waiting: \(deferred.map(\.count))")
                let metrics = try await sidecars[0].admin("/metrics").text + sidecars[1].admin("/metrics").text
                let calls = mock.received(path: "/installations").count
                print("failover, new registrations: \(result.statuses.count) requests, longest \(result.longest), "
                      + "\(calls - tokens.count) extra upstream calls, writes retried: "
                      + metrics.split(separator: "\n").filter { $0.hasPrefix("pushwarden_store_writes_retried_total{") }.joined(separator: " "))

                // Listed before anything registers again (which would write the records anew).
                let listed = Set(try await InventoryTests.list(sidecars[0].base, "alice").map(\.token))
                #expect(listed == Set(tokens.map(Redact.token)), "\(tokens.count - listed.count) registrations missing from the inventory")
                var forgotten: [String] = []
                for (index, token) in tokens.enumerated() {
                    let reply = try await sidecars[(index + 1) % 2].post("/installations", registration(token))
                    if reply.outcome != "unchanged" { forgotten.append("\(index): \(reply.status) \(reply.outcome ?? "-")") }
                }
                #expect(forgotten.isEmpty, "answered 202 during the failover, not remembered after it: \(forgotten.count) of \(tokens.count)")
                #expect(mock.received(path: "/installations").count == calls, "a second registration reached the upstream")
                #expect(try cluster.master(forSlot: 0).port != victim.port)
            }
            try cluster.restart(port: stoppedPort(cluster))
        }
    }
}

/// `pushwarden_rate_limit_fallback_total` summed over `sidecars`: requests admitted unchecked.
private func rateLimitFallbacks(_ sidecars: [Harness]) async throws -> Int {
    var total = 0
    for sidecar in sidecars {
        for line in try await sidecar.admin("/metrics").text.split(separator: "\n")
        where line.hasPrefix("pushwarden_rate_limit_fallback_total{") {
            total += Int(Double(line.split(separator: " ").last.map(String.init) ?? "") ?? 0)
        }
    }
    return total
}

/// The one node a test killed, to start again.
private func stoppedPort(_ cluster: RedisCluster) -> Int {
    cluster.ports.first { !cluster.livePorts.contains($0) } ?? cluster.ports[0]
}

struct FlowResult: Sendable {
    var statuses: [Int]
    var longest: Duration
    /// When each request that was forwarded (not answered from the dedupe cache) started.
    var forwardedAt: [ContinuousClock.Instant]
}

/// Registers `tokens` in turn, `perSecond` requests started per second (each without waiting for
/// the one before), round-robin over `sidecars`, for `seconds`; waits for every answer.
func steadyRegistrations(_ tokens: [String], through sidecars: [Harness], perSecond: Int, seconds: Int) async throws -> FlowResult {
    let interval = Duration.milliseconds(1000 / perSecond)
    let start = ContinuousClock.now
    return try await withThrowingTaskGroup(of: (Int, Duration, ContinuousClock.Instant?).self) { group in
        for index in 0..<(perSecond * seconds) {
            try await Task.sleep(until: start + interval * index, clock: .continuous)
            let h = sidecars[index % sidecars.count]
            let token = tokens[index % tokens.count]
            group.addTask {
                let began = ContinuousClock.now
                let reply = try await h.post("/installations", registration(token))
                return (reply.status, ContinuousClock.now - began, reply.outcome == "forwarded" ? began : nil)
            }
        }
        var result = FlowResult(statuses: [], longest: .zero, forwardedAt: [])
        for try await (status, took, forwarded) in group {
            result.statuses.append(status)
            result.longest = max(result.longest, took)
            if let forwarded { result.forwardedAt.append(forwarded) }
        }
        return result
    }
}

/// Rate limits where Redis is away, and with the memory store.
@Suite struct RateLimitStoreTests {
    /// Without Redis each process counts what it admitted itself: a request beyond its share
    /// needs Redis, which does not answer, so it is admitted, counted and logged (once); past the
    /// limit in this process's own count it is refused.
    @Test func anUnansweringRedisAdmitsCountsAndLogs() async throws {
        let h = try await Harness(store: .unreachableRedis, clientYAML: "      platforms: [android]\n      rate_limits: {unregister: 5/min}")
        let body = #"{"push_token":"fcm-\#(UUID().uuidString)"}"#
        for _ in 0..<5 { #expect(try await h.post("/installations/unregister", body).status == 202) }
        #expect(try await h.post("/installations/unregister", body).status == 429)
        let metrics = try await h.admin("/metrics")
        #expect(metrics.text.contains("pushwarden_rate_limit_fallback_total{app=\"\(h.app)\"} 4"))
        #expect(h.logs.text.components(separatedBy: "rate limit store unavailable; request admitted").count - 1 == 1)
        await h.stop()
    }

    /// A window's counter in Redis set by hand to the largest count Redis holds: the contact is
    /// refused (with a Retry-After), and nothing in the sums overflows.
    @Test func aCounterSetToTheLargestCountIsRefusedNotACrash() async throws {
        let h = try await Harness(clientYAML: "      platforms: [android]\n      rate_limits: {unregister: 5/min}")
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        defer { client.close() }
        let contact = "mallory-\(UUID().uuidString.prefix(6))"
        let key = KeyDigest.unkeyed.contact(contact, app: h.app).rateLimit(route: "unregister")
        let window = Int64(Date().timeIntervalSince1970 * 1000) / 60_000
        for w in [window, window + 1] {
            _ = try await client.send(["SET", key + ":" + String(w), String(Int64.max - 1), "PX", "180000"])
        }
        let body = #"{"push_token":"fcm-\#(UUID().uuidString)"}"#
        var statuses: [Int] = []
        for _ in 0..<4 {
            let reply = try await h.post("/installations/unregister", body, contact: contact)
            statuses.append(reply.status)
            if reply.status == 429 { #expect((Int(reply.headers["Retry-After"] ?? "") ?? 0) >= 1) }
        }
        // The first is admitted on this process's share (it has heard nothing yet); the next asks Redis.
        #expect(statuses.first == 202)
        #expect(statuses.dropFirst().allSatisfy { $0 == 429 }, "\(statuses)")
        #expect(try await h.post("/installations/unregister", body, contact: contact + "-other").status == 202)
        await h.stop()
    }

    @Test func theMemoryStoreLimitsPerProcessWithItsWindow() async throws {
        let h = try await Harness(store: .memory, clientYAML: "      platforms: [android]\n      rate_limits: {unregister: 2/min}")
        let body = #"{"push_token":"fcm-\#(UUID().uuidString)"}"#
        #expect(try await h.post("/installations/unregister", body).status == 202)
        #expect(try await h.post("/installations/unregister", body).status == 202)
        let limited = try await h.post("/installations/unregister", body)
        #expect(limited.status == 429)
        // The window ends within 60 s; the two requests' weight as the previous window halves 30 s later.
        #expect((1...90).contains(Int(limited.headers["Retry-After"] ?? "") ?? 0))
        await h.stop()
    }
}
