import Foundation
import PushWardenTestSupport
import RedisClient
import Testing

/// Keys unique to one test run, so tests can share `RedisServer.shared` while running in parallel.
private func key(_ name: String) -> String { "test:\(UUID().uuidString):\(name)" }

private func sharedClient(database: Int = 0) -> RedisClient {
    RedisClient(configuration: RedisServer.shared.configuration(database: database))
}

private func expectError(_ kind: RedisError.Kind, _ body: () async throws(RedisError) -> RedisReply,
                         sourceLocation: SourceLocation = #_sourceLocation) async {
    do {
        let reply = try await body()
        Issue.record("expected \(kind), got reply \(reply)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.kind == kind, "\(error)", sourceLocation: sourceLocation)
    }
}

@Suite struct RedisCommandTests {
    @Test func setGetDelRoundTrip() async throws {
        let client = sharedClient()
        defer { client.close() }
        let k = key("roundtrip")
        #expect(try await client.send(["SET", k, "hello"]) == .status("OK"))
        let value = try await client.send(["GET", k])
        #expect(value == .bulk(Array("hello".utf8)))
        #expect(value.string == "hello")
        #expect(try await client.send(["DEL", k]) == .integer(1))
        #expect(try await client.send(["GET", k]) == .null)
    }

    @Test func valuesAreBinarySafe() async throws {
        let client = sharedClient()
        defer { client.close() }
        let k = Array(key("bin").utf8) + [0x00, 0x0D, 0x0A, 0xFF]
        let value: [UInt8] = [0x00, 0x01, 0x0D, 0x0A, 0x24, 0x2A, 0x0D, 0x0A, 0x00, 0xFF, 0xFE]
        #expect(try await client.send(bytes: [Array("SET".utf8), k, value]) == .status("OK"))
        let reply = try await client.send(bytes: [Array("GET".utf8), k])
        #expect(reply == .bulk(value))
        #expect(reply.string == nil, "bytes that are not UTF-8 have no string")
        #expect(try await client.send(bytes: [Array("STRLEN".utf8), k]) == .integer(Int64(value.count)))
        #expect(try await client.send(bytes: [Array("SET".utf8), k, []]) == .status("OK"))
        #expect(try await client.send(bytes: [Array("GET".utf8), k]) == .bulk([]))
    }

    /// Every length's decimal header is right: one-digit to six-digit values and argument counts.
    @Test func valuesOfEveryLengthRoundTrip() async throws {
        let client = sharedClient()
        defer { client.close() }
        for length in [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 65_536, 100_000] {
            let k = Array(key("len-\(length)").utf8)
            let value = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            #expect(try await client.send(bytes: [Array("SET".utf8), k, value]) == .status("OK"))
            #expect(try await client.send(bytes: [Array("GET".utf8), k]) == .bulk(value), "length \(length)")
        }
        // Eleven arguments: a two-digit count.
        let listKey = Array(key("many").utf8)
        let items = (0..<10).map { Array("item-\($0)".utf8) }
        #expect(try await client.send(bytes: [Array("RPUSH".utf8), listKey] + items) == .integer(10))
        #expect(try await client.send(bytes: [Array("LRANGE".utf8), listKey, Array("0".utf8), Array("-1".utf8)]) == .array(items.map { .bulk($0) }))
    }

    @Test func missingKeyIsNull() async throws {
        let client = sharedClient()
        defer { client.close() }
        let reply = try await client.send(["GET", key("missing")])
        #expect(reply == .null)
        #expect(reply.string == nil)
    }

    @Test func integerAndArrayReplies() async throws {
        let client = sharedClient()
        defer { client.close() }
        let counter = key("counter")
        #expect(try await client.send(["INCR", counter]) == .integer(1))
        #expect(try await client.send(["INCRBY", counter, "-5000000000"]) == .integer(-4_999_999_999))
        let list = key("list")
        #expect(try await client.send(["RPUSH", list, "a", "", "c"]) == .integer(3))
        #expect(try await client.send(["LRANGE", list, "0", "-1"])
            == .array([.bulk(Array("a".utf8)), .bulk([]), .bulk(Array("c".utf8))]))
        #expect(try await client.send(["MGET", counter, key("absent")])
            == .array([.bulk(Array("-4999999999".utf8)), .null]))
        #expect(try await client.send(["DEL", counter, list, key("absent")]) == .integer(2))
    }

    @Test func serverErrorsAreRepliesNotThrown() async throws {
        let client = sharedClient()
        defer { client.close() }
        let unknown = try await client.send(["NOSUCHCOMMAND", "x"])
        guard case .error(let message) = unknown else {
            Issue.record("expected an error reply, got \(unknown)")
            return
        }
        #expect(message.hasPrefix("ERR unknown command"))
        let k = key("wrongtype")
        _ = try await client.send(["SET", k, "v"])
        let wrongType = try await client.send(["LPUSH", k, "x"])
        #expect(wrongType == .error("WRONGTYPE Operation against a key holding the wrong kind of value"))
        #expect(try await client.send(["GET", k]) == .bulk(Array("v".utf8)), "connection still usable")
    }

    @Test func setNXPXSemantics() async throws {
        let client = sharedClient()
        defer { client.close() }
        let k = key("dedupe")
        // Generous TTL: the first GET must see the key even on a loaded machine.
        #expect(try await client.send(["SET", k, "first", "NX", "PX", "1500"]) == .status("OK"))
        #expect(try await client.send(["SET", k, "second", "NX", "PX", "1500"]) == .null)
        #expect(try await client.send(["GET", k]) == .bulk(Array("first".utf8)))
        guard case .integer(let ttl) = try await client.send(["PTTL", k]) else {
            Issue.record("PTTL is not an integer")
            return
        }
        #expect(ttl > 0 && ttl <= 1500)
        let deadline = ContinuousClock.now + .seconds(5)
        while try await client.send(["GET", k]) != .null, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await client.send(["GET", k]) == .null, "expired")
        #expect(try await client.send(["SET", k, "third", "NX", "PX", "1500"]) == .status("OK"))
        #expect(try await client.send(["DEL", k]) == .integer(1))
    }

    @Test func tenThousandConcurrentSendsEachGetTheirOwnReply() async throws {
        let client = sharedClient()
        defer { client.close() }
        let prefix = key("many")
        let count = 10_000
        let started = ContinuousClock.now
        let setFailures = await withTaskGroup(of: Int.self) { group in
            for index in 0..<count {
                group.addTask {
                    let reply = try? await client.send(["SET", "\(prefix):\(index)", "value-\(index)"])
                    return reply == .status("OK") ? 0 : 1
                }
            }
            return await group.reduce(0, +)
        }
        #expect(setFailures == 0)
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for index in 0..<count {
                group.addTask {
                    let reply = try? await client.send(["GET", "\(prefix):\(index)"])
                    return reply?.string == "value-\(index)" ? 0 : 1
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
        #expect(ContinuousClock.now - started < .seconds(20))
        let keys = (0..<count).map { "\(prefix):\($0)" }
        #expect(try await client.send(["DEL"] + keys) == .integer(Int64(count)))
    }

    @Test func selectIsolatesDatabases() async throws {
        let one = sharedClient(database: 1)
        let two = sharedClient(database: 2)
        defer { one.close(); two.close() }
        let k = key("db")
        #expect(try await one.send(["SET", k, "in-one"]) == .status("OK"))
        #expect(try await two.send(["GET", k]) == .null)
        #expect(try await one.send(["GET", k]) == .bulk(Array("in-one".utf8)))
        let viaURL = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url + "/1"))
        defer { viaURL.close() }
        #expect(try await viaURL.send(["GET", k]) == .bulk(Array("in-one".utf8)))
        _ = try await one.send(["DEL", k])
    }

    @Test func pingEmptyCommandAndClose() async throws {
        let client = sharedClient()
        #expect(await client.ping())
        await expectError(.protocolError) { () async throws(RedisError) in try await client.send([]) }
        client.close()
        client.close()
        await expectError(.closed) { () async throws(RedisError) in try await client.send(["PING"]) }
        #expect(await client.ping() == false)
    }

    @Test func commandTimeoutFailsBacksOffAndRecovers() async throws {
        var configuration = RedisServer.shared.configuration()
        configuration.connections = 1
        configuration.commandTimeoutMillis = 200
        // A backoff long enough that "during the backoff" still holds on a loaded machine.
        configuration.reconnectBackoffMillis = 3000
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let started = ContinuousClock.now
        await expectError(.timeout) { () async throws(RedisError) in try await client.send(["BLPOP", key("never"), "5"]) }
        #expect(ContinuousClock.now - started < .seconds(2))
        let rejected = ContinuousClock.now
        await expectError(.unavailable) { () async throws(RedisError) in try await client.send(["PING"]) }
        #expect(ContinuousClock.now - rejected < .milliseconds(500), "fails fast during the backoff")
        try await Task.sleep(for: .milliseconds(3200))
        #expect(await client.ping(), "reconnected after the backoff")
    }
}

@Suite struct RedisConfigurationTests {
    @Test(arguments: [
        ("redis://localhost", RedisConfiguration(host: "localhost", port: 6379)),
        ("redis://127.0.0.1:6380/", RedisConfiguration(host: "127.0.0.1", port: 6380)),
        ("REDIS://cache:7000/3", RedisConfiguration(host: "cache", port: 7000, database: 3)),
        ("redis://:s3cret@cache/2", RedisConfiguration(host: "cache", password: "s3cret", database: 2)),
        ("redis://app:p%40ss%3Aw@cache:6390/0", RedisConfiguration(host: "cache", port: 6390, username: "app", password: "p@ss:w")),
        ("redis://[::1]:7001/5", RedisConfiguration(host: "::1", port: 7001, database: 5)),
    ])
    func parsesGoodURLs(url: String, expected: RedisConfiguration) throws {
        #expect(try RedisConfiguration(url: url) == expected)
    }

    @Test(arguments: [
        "", "localhost:6379", "http://localhost", "rediss://localhost", "unix:///tmp/redis.sock",
        "redis://", "redis://:6379", "redis://host:0", "redis://host:65536", "redis://host:port",
        "redis://host/db", "redis://host/-1", "redis://password@host", "redis://host?db=1",
        "redis://:bad%zz@host", "redis://[::1", "redis://host:6379#x",
    ])
    func refusesBadURLs(url: String) {
        #expect(throws: RedisError.self) { try RedisConfiguration(url: url) }
        do {
            _ = try RedisConfiguration(url: url)
        } catch {
            #expect(error.kind == .protocolError)
            #expect(error.detail.hasPrefix("invalid Redis URL"))
        }
    }

    @Test func badURLMessageDoesNotEchoThePassword() {
        do {
            _ = try RedisConfiguration(url: "redis://:topsecret@host:99999")
            Issue.record("accepted a bad port")
        } catch {
            #expect(!error.detail.contains("topsecret"))
        }
    }
}

@Suite struct RedisAvailabilityTests {
    @Test func authWithPassword() async throws {
        let server = try RedisServer.start(password: "pa ss\r\nword")
        defer { server.stop() }

        let authed = RedisClient(configuration: server.configuration())
        defer { authed.close() }
        #expect(try await authed.send(["SET", "k", "v"]) == .status("OK"))
        #expect(try await authed.send(["GET", "k"]) == .bulk(Array("v".utf8)))

        let anonymous = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: server.port))
        defer { anonymous.close() }
        guard case .error(let message) = try await anonymous.send(["GET", "k"]) else {
            Issue.record("unauthenticated GET was answered")
            return
        }
        #expect(message.hasPrefix("NOAUTH"))

        let wrong = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: server.port, password: "nope"))
        defer { wrong.close() }
        await expectError(.unavailable) { () async throws(RedisError) in try await wrong.send(["GET", "k"]) }

        let viaURL = RedisClient(configuration: try RedisConfiguration(url: "redis://:pa%20ss%0D%0Aword@127.0.0.1:\(server.port)"))
        defer { viaURL.close() }
        #expect(try await viaURL.send(["GET", "k"]) == .bulk(Array("v".utf8)))
        try await server.flushAll()
        #expect(try await authed.send(["GET", "k"]) == .null)
    }

    @Test func unreachableRedisFailsFast() async throws {
        let port = try #require(Loopback.unusedPort())
        let client = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: port))
        defer { client.close() }
        let started = ContinuousClock.now
        var kinds: [RedisError.Kind] = []
        for _ in 0..<100 {
            do {
                let reply = try await client.send(["GET", "k"])
                Issue.record("closed port answered \(reply)")
            } catch {
                kinds.append(error.kind)
            }
        }
        let elapsed = ContinuousClock.now - started
        #expect(kinds == Array(repeating: .unavailable, count: 100))
        #expect(elapsed < .seconds(2), "100 sends took \(elapsed)")
        #expect(await client.ping() == false)
    }

    @Test func recoversWhenRedisComesBack() async throws {
        let first = try RedisServer.start()
        let port = first.port
        var configuration = RedisConfiguration(host: "127.0.0.1", port: port)
        configuration.reconnectBackoffMillis = 100
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        #expect(try await client.send(["SET", "k", "before"]) == .status("OK"))

        first.stop()
        var failures = 0
        for _ in 0..<10 {
            do {
                _ = try await client.send(["GET", "k"])
            } catch {
                #expect(error.kind == .unavailable, "\(error)")
                failures += 1
            }
        }
        #expect(failures == 10, "every command fails while Redis is down")

        let second = try RedisServer.start(port: port)
        defer { second.stop() }
        let deadline = ContinuousClock.now + .seconds(5)
        var recovered = false
        while ContinuousClock.now < deadline {
            if (try? await client.send(["SET", "k", "after"])) == .status("OK") {
                recovered = true
                break
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(recovered)
        #expect(try await client.send(["GET", "k"]) == .bulk(Array("after".utf8)))
    }
}
