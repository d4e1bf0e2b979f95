import Foundation
@testable import PushWarden
@testable import RedisStores
import PushWardenTestSupport
import RedisClient
import Testing

/// What a registration costs Redis in round trips, counted by Redis itself: every write the
/// sidecar sends (one per loop turn and connection) is one read event there
/// (`total_reads_processed`). A forward is the dedupe lookup, the check-and-lock, then the
/// dedupe entry and the inventory record in one write; a hit is the lookup alone; a rate limit
/// adds none of its own. One redis-server for the suite, nothing else on it.
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
        func reads() async throws -> Int {
            let info = try await counter.send(["INFO", "stats"], on: nil).string ?? ""
            let line = info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("total_reads_processed:") } ?? ""
            return Int(line.split(separator: ":").last ?? "") ?? -1
        }
        // Connections made and scripts loaded first, so that only the requests are counted.
        #expect(try await h.post("/installations", InventoryTests.android(InventoryTests.android()), contact: "warm").outcome == "forwarded")

        let batches = (0..<3).map { _ in (0..<20).map { _ in InventoryTests.android() } }
        /// Reads per request while `requests` run, less what Redis read meanwhile for other work
        /// (the rate limits' sync, the census), measured over as long again right after.
        func readsPerRequest(_ count: Int, _ requests: () async throws -> Void) async throws -> Double {
            let started = Date()
            let before = try await reads()
            try await requests()
            let during = try await reads() - before - 1
            let elapsed = Date().timeIntervalSince(started)
            let quiet = try await reads()
            try await Task.sleep(for: .milliseconds(Int(elapsed * 1000) + 1))
            let background = try await reads() - quiet - 1
            return Double(during - background) / Double(count)
        }
        // The least of three batches: work the sidecar does beside the requests only ever adds.
        var forwards: [Double] = []
        var hits: [Double] = []
        for tokens in batches {
            forwards.append(try await readsPerRequest(tokens.count) { () async throws in
                for token in tokens {
                    #expect(try await h.post("/installations", InventoryTests.android(token), contact: "alice").outcome == "forwarded")
                }
            })
            hits.append(try await readsPerRequest(tokens.count) { () async throws in
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
}
