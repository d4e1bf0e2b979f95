import Foundation
@testable import PushWarden
@testable import RedisStores
@testable import Registration
import PushWardenTestSupport
import RedisClient
import Testing

/// What a registration costs Redis in round trips, counted by Redis itself: every write the
/// sidecar sends (one per loop turn and connection) is one read event there
/// (`total_reads_processed`). A forward is the dedupe lookup, the check-and-lock, then the
/// dedupe entry and the inventory record in one write; a hit is the lookup alone; a rate limit
/// adds none of its own. A queued accept is the lookup, then the append and the inventory record
/// in one write. A queued delivery reads its shard once a pass. A redis-server of its own
/// per test, nothing else on it.
@Suite(.serialized) struct RoundTripTests {
    @Test func aForwardCostsThreeRoundTripsAndAHitOne() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let counter = RedisClient(configuration: server.configuration())
        defer { counter.close() }
        let voyado = try MockVoyado(apiKey: "voyado-key")
        let h = try await SidecarHarness(upstreams: InventoryTests.voyado(voyado), secrets: InventoryTests.secrets,
                                         clientYAML: "      platforms: [android]\n      rate_limits: {register: 1000/min}",
                                         store: RedisStore(client: RedisClient(configuration: server.configuration())))
        // Connections made and scripts loaded first, so that only the requests are counted.
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android()), contact: "warm").outcome == "forwarded")

        let batches = (0..<3).map { _ in (0..<20).map { _ in InventoryTests.android() } }
        // The least of three batches: work the sidecar does beside the requests only ever adds.
        var forwards: [Double] = []
        var hits: [Double] = []
        for tokens in batches {
            forwards.append(try await Self.readsPerRequest(tokens.count, counter: counter) { () async throws in
                for token in tokens {
                    #expect(try await h.post("/installations", InventoryTests.android(token), contact: "alice").outcome == "forwarded")
                }
            })
            hits.append(try await Self.readsPerRequest(tokens.count, counter: counter) { () async throws in
                for token in tokens {
                    #expect(try await h.post("/installations", InventoryTests.android(token), contact: "alice").outcome == "unchanged")
                }
            })
        }
        #expect((2.75...3.25).contains(forwards.min() ?? 0), "reads per forward in three batches: \(forwards)")
        #expect((0.75...1.25).contains(hits.min() ?? 0), "reads per hit in three batches: \(hits)")
        await h.stop()
        await voyado.stop()
    }

    /// A queued accept is the lookup, then the outbox append and the inventory record in one
    /// write: two round trips. The upstream refuses connections and its circuit opens at the first
    /// failure for a minute, so the workers sleep while the accepts are counted.
    @Test func aQueuedAcceptCostsTwoRoundTrips() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let counter = RedisClient(configuration: server.configuration())
        defer { counter.close() }
        let upstream = """
                  - name: voyado
                    provider: voyado
                    delivery: queued
                    base_path: http://127.0.0.1:\(Loopback.unusedPort() ?? 1)/api/v3
                    api_key: {env: VOYADO_KEY}
                    timeout: 1s
                    retry: {attempts: 1, backoff: 20ms, max_backoff: 100ms}
                    queue: {max_age: 1h, claim_after: 5s}
                    circuit: {failures: 1, within: 10s, open_for: 60s}
            """
        let h = try await SidecarHarness(upstreams: upstream, secrets: [.env("VOYADO_KEY"): "vk"],
                                         store: RedisStore(client: RedisClient(configuration: server.configuration())))
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android())).outcome("voyado") == "queued")
        #expect(await OutboxTests.eventually {
            (try? await h.admin("/metrics"))?.text.contains(#"pushwarden_upstream_circuit_state{app="\#(h.app)",upstream="voyado"} 1"#) == true
        }, "the first delivery failed and opened the circuit")
        var perAccept: [Double] = []
        for _ in 0..<3 {
            let tokens = (0..<20).map { _ in InventoryTests.android() }
            perAccept.append(try await Self.readsPerRequest(tokens.count, counter: counter) { () async throws in
                for token in tokens {
                    #expect(try await h.post("/installations", InventoryTests.android(token)).outcome("voyado") == "queued")
                }
            })
        }
        #expect((1.75...2.25).contains(perAccept.min() ?? 0), "reads per queued accept in three batches: \(perAccept)")
        await h.stop()
    }

    /// A queued delivery's pass reads its shard in one command, busy or idle: the shard's lease
    /// is renewed once a third of `claim_after` has gone and other consumers' stale entries are
    /// looked for every quarter of it (a second at least), not on every pass. Forty
    /// registrations, each delivered before the next is made (so every pass carries about one).
    @Test func aQueuedDeliveryReadsItsShardOnceAPass() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let counter = RedisClient(configuration: server.configuration())
        defer { counter.close() }
        let voyado = try MockVoyado(apiKey: "vk", latencyMillis: 5)
        let h = try await SidecarHarness(upstreams: OutboxTests.voyado(voyado), secrets: [.env("VOYADO_KEY"): "vk"],
                                         store: RedisStore(client: RedisClient(configuration: server.configuration())))
        /// Calls of each command Redis ran, from its own statistics.
        func calls() async throws -> [String: Int] {
            let info = try await counter.send(["INFO", "commandstats"], on: nil).string ?? ""
            var calls: [String: Int] = [:]
            for line in info.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_") {
                let name = line.dropFirst("cmdstat_".count).prefix { $0 != ":" }
                let count = line.split(separator: ":calls=").dropFirst().first?.prefix { $0.isNumber } ?? ""
                calls[String(name)] = Int(count)
            }
            return calls
        }
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android())).outcome("voyado") == "queued")
        #expect(await OutboxTests.eventually { voyado.received(path: "/installations").count == 1 })
        let before = try await calls()
        let started = Date()
        for n in 2...41 {
            #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android())).outcome("voyado") == "queued")
            #expect(await OutboxTests.eventually { voyado.received(path: "/installations").count == n })
        }
        let seconds = Date().timeIntervalSince(started)
        let after = try await calls()
        func made(_ command: String) -> Int { (after[command] ?? 0) - (before[command] ?? 0) }
        let shards = Double(Outbox.queuedShards)
        let passes = made("xreadgroup")
        print("queued deliveries: 40 in \(String(format: "%.1f", seconds)) s; XREADGROUP \(passes), XAUTOCLAIM \(made("xautoclaim")), "
              + "lease renewals (PEXPIRE) \(made("pexpire"))")
        #expect(passes >= 40, "every delivery was read")
        // claim_after 5s: a look every 1.25 s per shard, a renewal every 1.67 s, and the first of each.
        #expect(Double(made("xautoclaim")) <= shards * (seconds / 1.25 + 1), "XAUTOCLAIM \(made("xautoclaim")) in \(seconds) s")
        #expect(Double(made("pexpire")) <= shards * (seconds / 1.6 + 1), "PEXPIRE \(made("pexpire")) in \(seconds) s")
        await h.stop()
        await voyado.stop()
    }

    /// Redis's read events so far.
    static func reads(_ counter: RedisClient) async throws -> Int {
        let info = try await counter.send(["INFO", "stats"], on: nil).string ?? ""
        let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_reads_processed:") } ?? ""
        return Int(line.split(separator: ":").last ?? "") ?? -1
    }

    /// Reads per request while `requests` run, less what Redis read meanwhile for other work
    /// (the rate limits' sync, the census), measured over as long again right after.
    static func readsPerRequest(_ count: Int, counter: RedisClient, _ requests: () async throws -> Void) async throws -> Double {
        let started = Date()
        let before = try await reads(counter)
        try await requests()
        let during = try await reads(counter) - before - 1
        let elapsed = Date().timeIntervalSince(started)
        let quiet = try await reads(counter)
        try await Task.sleep(for: .milliseconds(Int(elapsed * 1000) + 1))
        let background = try await reads(counter) - quiet - 1
        return Double(during - background) / Double(count)
    }
}
