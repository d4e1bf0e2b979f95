import Foundation
import Loops
import PushWardenTestSupport
@testable import RedisClient
import Synchronization
import Testing

/// Slots and URLs, without a cluster.
@Suite struct ClusterSlotTests {
    @Test func slotsAreCRC16XModemWithHashTags() {
        // The specification's check value: CRC16-XMODEM("123456789") = 0x31C3.
        #expect(ClusterSlot.of(Array("123456789".utf8)) == 0x31C3)
        #expect(ClusterSlot.of(Array("foo".utf8)) == 12182)
        #expect(ClusterSlot.of(Array("{user1000}.following".utf8)) == ClusterSlot.of(Array("user1000".utf8)))
        #expect(ClusterSlot.of(Array("{user1000}.followers".utf8)) == ClusterSlot.of(Array("user1000".utf8)))
        // An empty tag hashes the whole key; only the first tag counts.
        #expect(ClusterSlot.of(Array("foo{}{bar}".utf8)) != ClusterSlot.of(Array("bar".utf8)))
        #expect(ClusterSlot.of(Array("foo{{bar}}zap".utf8)) == ClusterSlot.of(Array("{bar".utf8)))
        #expect(ClusterSlot.of(Array("foo{bar}{zap}".utf8)) == ClusterSlot.of(Array("bar".utf8)))
    }

    @Test func commandsNameTheirKeys() {
        func slot(_ words: String...) -> Int? { ClusterSlot.of(command: words.map { Array($0.utf8) }) }
        let tagged = ClusterSlot.of(Array("t".utf8))
        #expect(slot("GET", "{t}:a") == tagged)
        #expect(slot("set", "{t}:a", "v", "EX", "5") == tagged)
        #expect(slot("EVALSHA", "abc", "2", "{t}:a", "{t}:b", "x") == tagged)
        #expect(slot("EVAL", "return 1", "0") == nil)
        #expect(slot("DEL", "{t}:a", "{t}:b") == tagged)
        #expect(slot("PING") == nil)
        #expect(slot("CLUSTER", "SLOTS") == nil)
        // The short way (first letter and length) and the long way agree.
        #expect(slot("HSET", "{t}:a", "f", "v") == tagged)
        #expect(slot("zadd", "{t}:a", "1", "m") == tagged)
        #expect(slot("XADD", "{t}:a", "*", "f", "v") == tagged)
        #expect(slot("HELLO", "3") == nil)
        #expect(slot("SCAN", "0") == nil)
        #expect(slot("SUNION", "{t}:a", "{t}:b") == tagged)
    }

    @Test func clusterURLs() throws {
        let configuration = try RedisConfiguration(url: "redis+cluster://:s%40cret@10.0.0.1:7000,redis-b:7001,[::1]")
        #expect(configuration.isCluster)
        #expect(configuration.clusterSeeds == [RedisEndpoint(host: "10.0.0.1", port: 7000), RedisEndpoint(host: "redis-b", port: 7001),
                                               RedisEndpoint(host: "::1", port: 6379)])
        #expect(configuration.password == "s@cret")
        #expect(configuration.host == "10.0.0.1")
        #expect(try !RedisConfiguration(url: "redis://h:1").isCluster)
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis+cluster://h:1,h:2/3") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis+cluster://h:1,,h:2") }
        #expect(throws: RedisError.self) { try RedisConfiguration(url: "redis+cluster://") }
    }

    @Test func clusterAnswersAreRead() {
        #expect(ClusterAnswer("MOVED 3999 127.0.0.1:6381") == .moved(slot: 3999, RedisEndpoint(host: "127.0.0.1", port: 6381)))
        #expect(ClusterAnswer("ASK 3999 ::1:6381") == .ask(RedisEndpoint(host: "::1", port: 6381)))
        #expect(ClusterAnswer("MOVED 1 :7000") == .moved(slot: 1, RedisEndpoint(host: "", port: 7000)))
        #expect(ClusterAnswer("TRYAGAIN Multiple keys request during rehashing of slot") == .tryAgain)
        #expect(ClusterAnswer("CLUSTERDOWN The cluster is down") == .down)
        #expect(ClusterAnswer("ERR unknown command") == nil)
    }
}

/// A client against a real three-master cluster (the shared `RedisCluster`).
@Suite(.serialized) struct ClusterClientTests {
    private static func key(_ index: Int, _ run: String) -> String { "test:cluster:\(run):\(index)" }

    private static func client(_ cluster: RedisCluster) throws -> RedisClient {
        RedisClient(configuration: try RedisConfiguration(url: cluster.url))
    }

    /// Sets keys 0..<count of a new run to `v<index>` through `client`; returns the run.
    private static func setKeys(_ count: Int, through client: RedisClient) async throws -> String {
        let run = UUID().uuidString
        for index in 0..<count {
            #expect(try await client.send(["SET", key(index, run), "v\(index)"]) == .status("OK"))
        }
        return run
    }

    @Test func keysGoToEveryMasterAndComeBack() async throws {
        try await RedisCluster.use { cluster in
            let client = try Self.client(cluster)
            defer { client.close() }
            let run = try await Self.setKeys(120, through: client)
            // Each key sits on the master its slot names: asked directly (no redirection), it answers.
            let masters = try cluster.masters()
            #expect(masters.count == 3)
            var perMaster: [Int: Int] = [:]
            for index in 0..<120 {
                let name = Self.key(index, run)
                let slot = ClusterSlot.of(Array(name.utf8))
                let owner = try #require(masters.first { $0.slots.contains { $0.contains(slot) } })
                perMaster[owner.port, default: 0] += 1
                let direct = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: owner.port))
                #expect(try await direct.send(["GET", name]) == .bulk(Array("v\(index)".utf8)))
                direct.close()
                #expect(try await client.send(["GET", name]) == .bulk(Array("v\(index)".utf8)))
            }
            #expect(perMaster.count == 3)
            #expect(await client.ping())
        }
    }

    @Test func loopPathRoutesPipelinedCommands() async throws {
        try await RedisCluster.use { cluster in
            let client = try Self.client(cluster)
            let loop = try EventLoop(name: "test-cluster")
            try loop.start()
            defer {
                loop.stop()
                client.close()
            }
            let run = UUID().uuidString
            let replies = Mutex<[Int: RedisReply]>([:])
            let failures = Mutex<[String]>([])
            loop.execute {
                for index in 0..<200 {
                    client.send(["SET", Self.key(index, run), String(index)], on: loop) { result in
                        guard case .success = result else { failures.withLock { $0.append("\(result)") }; return }
                        client.send(["GET", Self.key(index, run)], on: loop) { result in
                            switch result {
                            case .success(let reply): replies.withLock { $0[index] = reply }
                            case .failure(let error): failures.withLock { $0.append("\(error)") }
                            }
                        }
                    }
                }
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while replies.withLock({ $0.count }) + failures.withLock({ $0.count }) < 200, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(failures.withLock { $0 } == [])
            let got = replies.withLock { $0 }
            #expect(got.count == 200)
            #expect((0..<200).allSatisfy { got[$0] == .bulk(Array(String($0).utf8)) })
        }
    }

    @Test func scriptsWithTaggedKeysRunAndMissingScriptsAreReported() async throws {
        try await RedisCluster.use { cluster in
            let client = try Self.client(cluster)
            defer { client.close() }
            let tag = "{\(UUID().uuidString)}"
            let script = "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); return 1"
            #expect(try await client.send(["EVAL", script, "2", "t:\(tag):a", "t:\(tag):b", "x"]) == .integer(1))
            #expect(try await client.send(["GET", "t:\(tag):b"]) == .bulk(Array("x".utf8)))
            let missing = try await client.send(["EVALSHA", String(repeating: "0", count: 40), "1", "t:\(tag):a"])
            guard case .error(let message) = missing else { Issue.record("\(missing)"); return }
            #expect(message.hasPrefix("NOSCRIPT"))
        }
    }

    /// Slots move (`redis-cli --cluster reshard`: ASK while each slot migrates, then MOVED) while
    /// both paths keep writing and reading: no command fails, and every value reads back.
    @Test func reshardingCostsRedirectionsNotErrors() async throws {
        try await RedisCluster.use { cluster in
            let client = try Self.client(cluster)
            let loop = try EventLoop(name: "test-cluster-reshard")
            try loop.start()
            defer {
                loop.stop()
                client.close()
            }
            // From slot 0's master, whose first slots these are, to another master: they come first
            // there too, so moving 40 back restores the map.
            let from = try cluster.master(forSlot: 0)
            let to = try #require(try cluster.masters().first { $0.port != from.port })
            let movedSlots = 0..<40
            // Keys in the slots about to move, found by their hash.
            var found: [String] = []
            var candidate = 0
            while found.count < 200 {
                let name = "test:reshard:\(UUID().uuidString.prefix(8)):\(candidate)"
                candidate += 1
                if movedSlots.contains(ClusterSlot.of(Array(name.utf8))) { found.append(name) }
            }
            let keys = found
            for name in keys { _ = try await client.send(["SET", name, "0"]) }

            let stop = Atomic<Bool>(false)
            let failures = Mutex<[String]>([])
            let rounds = Atomic<Int>(0)
            let traffic = Task {
                var round = 0
                while !stop.load(ordering: .relaxed) {
                    round += 1
                    for name in keys.prefix(50) {
                        do {
                            let reply = try await client.send(["INCR", name])
                            if case .error(let message) = reply { failures.withLock { $0.append(message) } }
                        } catch {
                            failures.withLock { $0.append("\(error)") }
                        }
                    }
                    let pending = Atomic<Int>(keys.count - 50)
                    loop.execute {
                        for name in keys.dropFirst(50) {
                            client.send(["INCR", name], on: loop) { result in
                                switch result {
                                case .success(.error(let message)): failures.withLock { $0.append(message) }
                                case .failure(let error): failures.withLock { $0.append("\(error)") }
                                default: break
                                }
                                pending.subtract(1, ordering: .relaxed)
                            }
                        }
                    }
                    while pending.load(ordering: .relaxed) > 0 { try? await Task.sleep(for: .milliseconds(1)) }
                    rounds.add(1, ordering: .relaxed)
                }
                return round
            }
            try await Task.sleep(for: .milliseconds(200))
            try cluster.reshard(count: movedSlots.count, from: from, to: to)
            try await Task.sleep(for: .milliseconds(300))
            stop.store(true, ordering: .relaxed)
            let total = await traffic.value
            #expect(failures.withLock { $0 } == [])
            #expect(total > 2)
            // The slots moved, and every increment landed exactly once.
            let moved = try cluster.master(forSlot: movedSlots.lowerBound)
            #expect(moved.port == to.port)
            for name in keys {
                #expect(try await client.send(["GET", name]) == .bulk(Array(String(total).utf8)))
            }
            // Back where they were, for the tests that follow.
            try cluster.reshard(count: movedSlots.count, from: try cluster.master(forSlot: movedSlots.lowerBound), to: from)
            try cluster.waitUntilHealthy(seconds: 20)
        }
    }

    /// The fixture's way back when a restarted node does not rejoin: the node on that port comes
    /// back under a new id as a replica, and the cluster serves every slot again.
    @Test func aNodeJoinedAgainAsANewNodeLeavesTheClusterHealthy() async throws {
        try await RedisCluster.use { cluster in
            let client = try Self.client(cluster)
            defer { client.close() }
            let run = try await Self.setKeys(30, through: client)
            guard let replica = try cluster.nodes().first(where: { !$0.isMaster && cluster.livePorts.contains($0.port) }) else {
                Issue.record("the cluster has no replica")
                return
            }
            try cluster.rejoinAsNewNode(port: replica.port)
            try cluster.waitUntilHealthy(seconds: 60)
            let nodes = try cluster.nodes()
            #expect(nodes.count == 6, "\(nodes.map(\.id))")
            let joined = nodes.first { $0.port == replica.port }
            #expect(joined.map { !$0.isMaster && $0.id != replica.id } == true)
            for index in 0..<30 {
                #expect(try await client.send(["GET", Self.key(index, run)]) == .bulk(Array("v\(index)".utf8)))
            }
        }
    }
}
