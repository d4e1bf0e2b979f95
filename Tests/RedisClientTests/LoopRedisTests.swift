import Foundation
import Loops
import PushWardenTestSupport
@testable import RedisClient
import Synchronization
import Testing

/// Keys unique to one test run, so tests can share `RedisServer.shared` while running in parallel.
private func loopKey(_ name: String) -> String { "test:loop:\(UUID().uuidString):\(name)" }

private func startedLoop(_ name: String = "test-loop") throws -> EventLoop {
    let loop = try EventLoop(name: name)
    try loop.start()
    return loop
}

/// One completion as the test sees it.
private struct Outcome: Sendable {
    var index = 0
    let result: Result<RedisReply, RedisError>
    /// Whether the completion ran on the loop's thread.
    let onLoop: Bool
    /// Whether the completion ran before `send` returned.
    let synchronous: Bool

    var reply: RedisReply? { try? result.get() }
    var errorKind: RedisError.Kind? {
        guard case .failure(let error) = result else { return nil }
        return error.kind
    }
    var errorDetail: String {
        guard case .failure(let error) = result else { return "" }
        return error.detail
    }
}

/// Results handed from a loop thread to the test, which polls for them with a deadline.
private final class Inbox<T: Sendable>: Sendable {
    private let items = Mutex<[T]>([])

    func append(_ item: T) { items.withLock { $0.append(item) } }

    var snapshot: [T] { items.withLock { $0 } }

    /// Waits until `count` items arrived or `limit` passed; returns what arrived.
    func wait(for count: Int, within limit: Duration = .seconds(5)) async -> [T] {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            let items = snapshot
            if items.count >= count { return items }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return snapshot
    }
}

/// Sends `arguments` from `loop`'s thread, as the server's request handlers will, with index `index`.
private func send(_ arguments: [String], with client: RedisClient, on loop: EventLoop, index: Int = 0, into inbox: Inbox<Outcome>) {
    var returned = false
    client.send(arguments, on: loop) { result in
        inbox.append(Outcome(index: index, result: result, onLoop: loop.isCurrent, synchronous: !returned))
    }
    returned = true
}

/// Sends `count` GETs in one turn of `loop` and waits (up to 3 s) for their completions; returns
/// them and how long they took.
private func burst(_ count: Int, with client: RedisClient, on loop: EventLoop) async -> (outcomes: [Outcome], took: Duration) {
    let inbox = Inbox<Outcome>()
    let started = ContinuousClock.now
    loop.execute {
        for index in 0..<count { send(["GET", "k"], with: client, on: loop, index: index, into: inbox) }
    }
    let outcomes = await inbox.wait(for: count, within: .seconds(3))
    return (outcomes, ContinuousClock.now - started)
}

/// Posts one command to `loop` and waits (bounded) for its completion.
private func roundTrip(_ arguments: [String], with client: RedisClient, on loop: EventLoop,
                       within limit: Duration = .seconds(5)) async -> Outcome? {
    let inbox = Inbox<Outcome>()
    loop.execute { send(arguments, with: client, on: loop, into: inbox) }
    return await inbox.wait(for: 1, within: limit).first
}

/// The redis-server's pid, from `INFO server`, to stop and continue it.
private func processID(of server: RedisServer) async throws -> pid_t {
    let client = RedisClient(configuration: server.configuration())
    defer { client.close() }
    let info = try #require(try await client.send(["INFO", "server"]).string)
    let line = try #require(info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("process_id:") })
    return try #require(pid_t(line.dropFirst("process_id:".count)))
}

@Suite struct LoopRedisTests {
    @Test func repliesArriveOnTheLoopThread() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close() }
        let k = loopKey("hello")

        let set = try #require(await roundTrip(["SET", k, "world"], with: client, on: loop))
        #expect(set.reply == .status("OK"), "\(set.result)")
        #expect(set.onLoop)
        #expect(!set.synchronous, "a reply is never delivered inside send")

        let get = try #require(await roundTrip(["GET", k], with: client, on: loop))
        #expect(get.reply == .bulk(Array("world".utf8)))
        #expect(get.onLoop)
        #expect(try await client.send(["GET", k]) == .bulk(Array("world".utf8)), "the pipelined client sees the write")
        _ = try await client.send(["DEL", k])
    }

    @Test func aThousandSetsAndGetsInOneTurnCompleteInOrder() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close() }
        let prefix = loopKey("many")
        let count = 1000
        let inbox = Inbox<Outcome>()
        loop.execute {
            for index in 0..<count {
                send(["SET", "\(prefix):\(index)", "value-\(index)"], with: client, on: loop, index: index, into: inbox)
            }
            for index in 0..<count {
                send(["GET", "\(prefix):\(index)"], with: client, on: loop, index: count + index, into: inbox)
            }
        }
        let outcomes = await inbox.wait(for: 2 * count, within: .seconds(10))
        try #require(outcomes.count == 2 * count)
        #expect(outcomes.map(\.index) == Array(0..<(2 * count)), "completions in the order the commands were sent")
        #expect(outcomes.allSatisfy { $0.onLoop })
        #expect(!outcomes.contains { $0.synchronous })
        #expect(outcomes.prefix(count).allSatisfy { $0.reply == .status("OK") })
        let wrong = outcomes.suffix(count).filter { $0.reply?.string != "value-\($0.index - count)" }
        #expect(wrong.isEmpty, "\(wrong.count) GETs answered another value, first: \(String(describing: wrong.first?.result))")
        let keys = (0..<count).map { "\(prefix):\($0)" }
        #expect(try await client.send(["DEL"] + keys) == .integer(Int64(count)))
    }

    @Test func completionsMaySendAgain() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close() }
        let k = loopKey("chain")
        let inbox = Inbox<Outcome>()
        @Sendable func step(_ index: Int) {
            client.send(["INCR", k], on: loop) { result in
                inbox.append(Outcome(index: index, result: result, onLoop: loop.isCurrent, synchronous: false))
                if index < 9 { step(index + 1) }
            }
        }
        loop.execute { step(0) }
        let outcomes = await inbox.wait(for: 10)
        #expect(outcomes.map(\.reply) == (1...10).map { .integer(Int64($0)) })
        _ = try await client.send(["DEL", k])
    }

    /// A reply many reads long, on a loop whose every turn is busy (a storm's request work), must
    /// not wait a turn per read.
    @Test func aLargeReplyOnABusyLoopArrivesWithinTheCommandTimeout() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = RedisServer.shared.configuration()
        configuration.commandTimeoutMillis = 300
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let k = loopKey("large")
        let value = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 % 251) }
        _ = try await client.send(bytes: [Array("SET".utf8), Array(k.utf8), value])
        #expect(await roundTrip(["PING"], with: client, on: loop)?.reply == .status("PONG"), "the loop's connection is up")

        let busy = BusyTurns(millis: 10)
        loop.execute { loop.add(busy) }
        let started = ContinuousClock.now
        let got = try #require(await roundTrip(["GET", k], with: client, on: loop))
        let took = ContinuousClock.now - started
        busy.stop()
        // Compared apart: a failed expectation on the reply itself would print a megabyte.
        let same = got.reply == .bulk(value)
        #expect(same, "\(got.errorKind.map { "\($0): \(got.errorDetail)" } ?? "a reply of another value")")
        #expect(busy.turns >= 2, "the loop was busy while the reply came (\(busy.turns) turns)")
        #expect(took < .milliseconds(300), "took \(took)")
        _ = try await client.send(["DEL", k])
    }

    @Test func oneConnectionPerClientPerLoop() async throws {
        let first = try startedLoop("test-loop-1")
        let second = try startedLoop("test-loop-2")
        defer { first.stop(); second.stop() }
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        let other = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close(); other.close() }
        func id(_ client: RedisClient, _ loop: EventLoop) async throws -> RedisReply {
            try #require(await roundTrip(["CLIENT", "ID"], with: client, on: loop)?.reply)
        }
        let onFirst = try await id(client, first)
        #expect(try await id(client, first) == onFirst, "the loop reuses its connection")
        #expect(try await id(client, second) != onFirst, "another loop has its own")
        #expect(try await id(other, first) != onFirst, "another client has its own")
    }

    /// `send(_:on:)`: the loop the caller names decides the connection, not the thread the task
    /// happens to run on. Named from the loop or from off it, the loop's own; nil from the loop, the pool.
    @Test func theNamedLoopDecidesTheConnection() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close() }
        let loopConnection = try #require(await roundTrip(["CLIENT", "ID"], with: client, on: loop)?.reply)
        let fromTheLoop = try await Task(executorPreference: loop) { () throws -> [RedisReply] in
            [try await client.send(["CLIENT", "ID"], on: loop), try await client.send(["CLIENT", "ID"], on: nil)]
        }.value
        #expect(fromTheLoop[0] == loopConnection, "named: the loop's own connection")
        #expect(fromTheLoop[1] != loopConnection, "none named, though on the loop's thread: the pool")
        let resumedOnTheLoop = await Task(executorPreference: loop) { () -> Bool in
            _ = try? await client.send(["PING"], on: nil)
            return EventLoop.current === loop
        }.value
        #expect(resumedOnTheLoop, "a pooled command resumes the task on its loop")
        #expect(try await client.send(["CLIENT", "ID"], on: loop) == loopConnection, "named from off the loop: still the loop's")
        #expect(try await client.send(["CLIENT", "ID"], on: nil) != loopConnection)
    }

    @Test func aStoppedLoopRefusesANamedCommand() async throws {
        let loop = try startedLoop()
        loop.stop()
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        defer { client.close() }
        await #expect(throws: RedisError.self) { try await client.send(["PING"], on: loop) }
    }

    @Test func authAndSelectGoFirstOnEveryConnection() async throws {
        let password = "loop pa\r\nss"
        let server = try RedisServer.start(password: password)
        defer { server.stop() }
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: server.configuration(database: 3))
        defer { client.close() }

        let set = try #require(await roundTrip(["SET", "k", "in-three"], with: client, on: loop))
        #expect(set.reply == .status("OK"), "\(set.result)")
        let checker = RedisClient(configuration: server.configuration(database: 3))
        let zero = RedisClient(configuration: server.configuration())
        defer { checker.close(); zero.close() }
        #expect(try await checker.send(["GET", "k"]) == .bulk(Array("in-three".utf8)))
        #expect(try await zero.send(["GET", "k"]) == .null, "SELECT 3 ran before SET")

        var wrongConfiguration = RedisConfiguration(host: "127.0.0.1", port: server.port, password: "not-the-password")
        wrongConfiguration.reconnectBackoffMillis = 3000
        let wrong = RedisClient(configuration: wrongConfiguration)
        defer { wrong.close() }
        let refused = try #require(await roundTrip(["GET", "k"], with: wrong, on: loop))
        #expect(refused.errorKind == .unavailable, "\(refused.result)")
        #expect(refused.errorDetail.contains("AUTH"))
        #expect(!refused.errorDetail.contains("not-the-password"))
        let backingOff = try #require(await roundTrip(["GET", "k"], with: wrong, on: loop))
        #expect(backingOff.errorKind == .unavailable)
        #expect(backingOff.synchronous, "refused at once during the backoff")
    }

    /// A host name is looked up off the loop; once found, the loop connects to it.
    @Test func aHostNameIsResolvedOffTheLoop() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = RedisServer.shared.configuration()
        configuration.host = "localhost"
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let deadline = ContinuousClock.now + .seconds(5)
        var outcome = await roundTrip(["PING"], with: client, on: loop)
        while outcome?.reply != .status("PONG"), ContinuousClock.now < deadline {
            // Only "not yet resolved" may come before the answer.
            #expect(outcome?.errorKind == .unavailable && outcome?.errorDetail.contains("localhost") == true, "\(outcome?.errorDetail ?? "none")")
            try await Task.sleep(for: .milliseconds(20))
            outcome = await roundTrip(["PING"], with: client, on: loop)
        }
        #expect(outcome?.reply == .status("PONG"))
        #expect(outcome?.onLoop == true)
    }

    /// A name with several addresses is tried address by address: on a machine whose
    /// `/etc/hosts` lists `::1 localhost` before `127.0.0.1`, `localhost` must still reach a Redis
    /// bound to 127.0.0.1 only, with no backoff between the addresses.
    @Test(arguments: [["::1", "127.0.0.1"], ["127.0.0.1", "::1"]])
    func everyAddressOfANameIsTriedInTurn(_ addresses: [String]) async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = RedisServer.shared.configuration()
        configuration.host = "redis.two-addresses.test"
        configuration.reconnectBackoffMillis = 60_000  // a backoff would outlast the test
        let client = RedisClient(configuration: configuration, lookUp: { _ in .success(addresses) })
        defer { client.close() }
        let deadline = ContinuousClock.now + .seconds(5)
        var outcome = await roundTrip(["PING"], with: client, on: loop)
        while outcome?.reply != .status("PONG"), ContinuousClock.now < deadline {
            // At most one turn's commands fail while the refused address is left behind.
            #expect(outcome?.errorKind == .unavailable, "\(outcome?.errorDetail ?? "none")")
            #expect(outcome?.errorDetail.contains("waiting to reconnect") == false, "\(outcome?.errorDetail ?? "none")")
            try await Task.sleep(for: .milliseconds(20))
            outcome = await roundTrip(["PING"], with: client, on: loop)
        }
        #expect(outcome?.reply == .status("PONG"))
        // The address that worked is kept: later commands go straight to it.
        for _ in 0..<5 { #expect(await roundTrip(["PING"], with: client, on: loop)?.reply == .status("PONG")) }
    }

    @Test func theSystemLookupGivesEveryAddressOnce() throws {
        let addresses = try HostResolver.resolve("localhost").get()
        #expect(!addresses.isEmpty)
        #expect(Set(addresses).count == addresses.count)
        #expect(addresses.allSatisfy { HostResolver.isIPLiteral($0) })
    }

    /// A name lookup that takes seconds (a DNS server that does not answer) happens off the loop:
    /// meanwhile commands fail at once and the loop stays free; then the loop connects to the
    /// address the lookup gave.
    @Test func aSlowNameLookupNeverBlocksTheLoop() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = RedisServer.shared.configuration()
        configuration.host = "redis.slow.test"
        let client = RedisClient(configuration: configuration, lookUp: HostResolver.slow(2, giving: "127.0.0.1"))
        defer { client.close() }
        let started = ContinuousClock.now
        let early = await roundTrip(["PING"], with: client, on: loop, within: .seconds(1))
        #expect(ContinuousClock.now - started < .milliseconds(500))
        #expect(early?.errorKind == .unavailable)
        #expect(early?.errorDetail.contains("resolving redis.slow.test") == true, "\(early?.errorDetail ?? "none")")
        var outcome = early
        let deadline = ContinuousClock.now + .seconds(6)
        while outcome?.reply != .status("PONG"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            outcome = await roundTrip(["PING"], with: client, on: loop)
        }
        #expect(outcome?.reply == .status("PONG"))
        #expect(ContinuousClock.now - started >= .seconds(2), "connected only once the lookup answered")
    }

    /// A name that does not resolve costs the loop nothing:
    /// commands fail at once as unavailable, and the loop keeps running other work.
    @Test func anUnresolvableHostNeverBlocksTheLoop() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisConfiguration(host: "pushwarden-no-such-host.invalid", port: 6379))
        defer { client.close() }
        let (outcomes, took) = await burst(50, with: client, on: loop)
        #expect(took < .seconds(1))
        #expect(outcomes.count == 50)
        #expect(outcomes.allSatisfy { $0.errorKind == .unavailable && $0.onLoop && $0.errorDetail.contains("pushwarden-no-such-host.invalid") })
        let ran = Inbox<Bool>()
        loop.execute { ran.append(true) }
        #expect(await ran.wait(for: 1, within: .milliseconds(500)).count == 1, "the loop is free")
    }

    @Test func unreachableRedisFailsFast() async throws {
        let probe = try RedisServer.start()
        let port = probe.port
        probe.stop()
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisConfiguration(host: "127.0.0.1", port: port))
        defer { client.close() }
        let (outcomes, took) = await burst(100, with: client, on: loop)
        #expect(took < .seconds(2))
        #expect(outcomes.count == 100)
        #expect(outcomes.allSatisfy { $0.errorKind == .unavailable && $0.onLoop })
    }

    @Test func killedRedisFailsCommandsInFlightAndLaterOnesQuickly() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = server.configuration()
        configuration.commandTimeoutMillis = 10_000  // so the failure below is the EOF, not a timeout
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        #expect(await roundTrip(["PING"], with: client, on: loop)?.reply == .status("PONG"))

        let inbox = Inbox<Outcome>()
        loop.execute { send(["BLPOP", "never", "8"], with: client, on: loop, into: inbox) }
        try await Task.sleep(for: .milliseconds(200))
        let killed = ContinuousClock.now
        server.stop()
        let inFlight = try #require(await inbox.wait(for: 1, within: .seconds(3)).first)
        #expect(inFlight.errorKind == .unavailable, "\(inFlight.result)")
        #expect(ContinuousClock.now - killed < .seconds(2))

        let later = ContinuousClock.now
        let next = try #require(await roundTrip(["PING"], with: client, on: loop, within: .seconds(3)))
        #expect(next.errorKind == .unavailable, "\(next.result)")
        #expect(ContinuousClock.now - later < .seconds(1))
    }

    @Test func stoppedRedisTimesOutBacksOffAndRecovers() async throws {
        let server = try RedisServer.start()
        defer { server.stop() }
        let pid = try await processID(of: server)
        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = server.configuration()
        configuration.commandTimeoutMillis = 200
        // Long enough that "during the backoff" still holds on a loaded machine.
        configuration.reconnectBackoffMillis = 2000
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        #expect(await roundTrip(["SET", "k", "v"], with: client, on: loop)?.reply == .status("OK"))

        try #require(kill(pid, SIGSTOP) == 0)
        var continued = false
        defer { if !continued { kill(pid, SIGCONT) } }
        let started = ContinuousClock.now
        let timedOut = try #require(await roundTrip(["GET", "k"], with: client, on: loop, within: .seconds(3)))
        let waited = ContinuousClock.now - started
        #expect(timedOut.errorKind == .timeout, "\(timedOut.result)")
        #expect(waited >= .milliseconds(150) && waited < .milliseconds(1500), "timed out after \(waited)")

        let refused = try #require(await roundTrip(["GET", "k"], with: client, on: loop))
        #expect(refused.errorKind == .unavailable, "\(refused.result)")
        #expect(refused.synchronous, "refused at once during the backoff")

        kill(pid, SIGCONT)
        continued = true
        try await Task.sleep(for: .milliseconds(2200))
        let recovered = try #require(await roundTrip(["GET", "k"], with: client, on: loop))
        #expect(recovered.reply == .bulk(Array("v".utf8)), "\(recovered.result)")
    }

    @Test func connectTimeoutFailsAndBacksOff() async throws {
        // A listener that never accepts, its accept queue filled: the kernel drops further SYNs,
        // so a connect to it hangs until the client gives up.
        let (listener, listenerPort) = try #require(Loopback.bind(listen: 0))
        defer { close(listener) }
        var address = Loopback.address(port: listenerPort)
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 {
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            try #require(filler >= 0)
            fillers.append(filler)
            _ = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) }
            }
        }
        try await Task.sleep(for: .milliseconds(100))

        let loop = try startedLoop()
        defer { loop.stop() }
        var configuration = RedisConfiguration(host: "127.0.0.1", port: listenerPort)
        configuration.connectTimeoutMillis = 200
        configuration.reconnectBackoffMillis = 3000
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let started = ContinuousClock.now
        let timedOut = try #require(await roundTrip(["PING"], with: client, on: loop, within: .seconds(3)))
        let waited = ContinuousClock.now - started
        #expect(timedOut.errorKind == .unavailable, "\(timedOut.result)")
        #expect(timedOut.errorDetail.contains("no connection within 200 ms"), "\(timedOut.result)")
        #expect(waited >= .milliseconds(150) && waited < .milliseconds(1500), "gave up after \(waited)")
        let refused = try #require(await roundTrip(["PING"], with: client, on: loop))
        #expect(refused.errorKind == .unavailable)
        #expect(refused.synchronous, "refused at once during the backoff")
    }

    @Test func closedClientRefusesWithClosed() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let client = RedisClient(configuration: RedisServer.shared.configuration())
        #expect(await roundTrip(["PING"], with: client, on: loop)?.reply == .status("PONG"))
        client.close()
        let refused = try #require(await roundTrip(["PING"], with: client, on: loop))
        #expect(refused.errorKind == .closed)
        #expect(refused.synchronous)
        #expect(refused.onLoop)
    }

    @Test func stoppingTheLoopFailsPendingCommandsWithClosed() async throws {
        let loop = try startedLoop()
        var configuration = RedisServer.shared.configuration()
        configuration.commandTimeoutMillis = 10_000
        let client = RedisClient(configuration: configuration)
        defer { client.close() }
        let inbox = Inbox<Outcome>()
        loop.execute {
            client.send(["BLPOP", loopKey("never"), "8"], on: loop) { result in
                inbox.append(Outcome(index: 0, result: result, onLoop: loop.isCurrent, synchronous: false))
                // Sending again from a stopping loop's completion is refused, not a crash.
                send(["PING"], with: client, on: loop, index: 1, into: inbox)
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        #expect(inbox.snapshot.isEmpty, "BLPOP is still waiting")
        let stopping = ContinuousClock.now
        loop.stop()
        #expect(ContinuousClock.now - stopping < .seconds(2))
        let outcomes = inbox.snapshot
        try #require(outcomes.count == 2, "stop returns after the completions ran")
        #expect(outcomes[0].errorKind == .closed, "\(outcomes[0].result)")
        #expect(outcomes[0].onLoop)
        #expect(outcomes[1].errorKind == .closed, "\(outcomes[1].result)")
        #expect(outcomes[1].synchronous)
    }
}

@Suite struct EventLoopTests {
    /// `assertOnLoop`, the check loop-confined state makes: silent on the loop. `execute` says
    /// whether it took the job: a stopped loop drops it, and the caller can answer instead.
    @Test func theLoopCheckPassesOnItsLoopAndExecuteSaysWhetherItTookTheJob() async throws {
        let loop = try startedLoop()
        let ran = Inbox<Bool>()
        #expect(loop.execute {
            loop.assertOnLoop("test state")
            ran.append(loop.isCurrent)
        })
        #expect(await ran.wait(for: 1) == [true])
        loop.stop()
        #expect(!loop.execute {}, "a stopped loop drops what is posted, and says so")
    }

    #if DEBUG
    /// Off its loop, the check traps (debug builds only; it compiles to nothing in release).
    @Test func theLoopCheckTrapsOffItsLoop() async {
        await #expect(processExitsWith: .failure) {
            let loop = try! EventLoop(name: "test-confined")
            try! loop.start()
            loop.assertOnLoop("test state")
        }
    }
    #endif

    @Test func executeRunsOnTheLoopThreadAndStopJoins() async throws {
        let loop = try startedLoop()
        #expect(!loop.isCurrent)
        let ran = Inbox<Bool>()
        loop.execute { ran.append(loop.isCurrent) }
        #expect(await ran.wait(for: 1) == [true])

        loop.execute {
            usleep(100_000)
            ran.append(loop.isCurrent)
        }
        loop.stop()
        #expect(ran.snapshot == [true, true], "stop ran the posted job and joined the thread")
        loop.execute { ran.append(false) }
        try await Task.sleep(for: .milliseconds(50))
        #expect(ran.snapshot.count == 2, "jobs after stop are dropped")
        loop.stop()
    }
}

@Suite struct LoopExecutorTests {
    @Test func tasksPreferringALoopRunAndResumeOnIt() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        let observed = await Task(executorPreference: loop) { () -> [Bool] in
            var seen = [EventLoop.current === loop]
            // Resumed from another thread: the task must come back to the loop.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                Thread { continuation.resume() }.start()
            }
            seen.append(EventLoop.current === loop)
            try? await Task.sleep(for: .milliseconds(5))
            seen.append(EventLoop.current === loop)
            return seen
        }.value
        #expect(observed == [true, true, true])
        #expect(EventLoop.current == nil)
    }

    /// A task preferring a loop that stops while it waits still finishes: its next job goes to the
    /// global pool instead of being dropped (a shutdown awaits the outbox workers on the loops).
    @Test func aTaskWhoseLoopStoppedFinishesOffIt() async throws {
        let loop = try startedLoop()
        let task = Task(executorPreference: loop) { () -> [Bool] in
            var seen = [EventLoop.current === loop]
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                Thread {
                    loop.stop()
                    continuation.resume()
                }.start()
            }
            seen.append(EventLoop.current === loop)
            return seen
        }
        let finished = await withTaskGroup(of: [Bool]?.self) { group in
            group.addTask { await task.value }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        #expect(finished == [true, false], "the task ran on its loop, then finished off it once the loop stopped")
    }
}

/// A loop participant that spends `millis` of each turn busy and keeps the loop turning, until
/// stopped.
private final class BusyTurns: LoopParticipant, Sendable {
    private let millis: Int
    private let state = Mutex<(running: Bool, turns: Int)>((true, 0))

    init(millis: Int) { self.millis = millis }

    var turns: Int { state.withLock { $0.turns } }

    func stop() { state.withLock { $0.running = false } }

    func turnEnded(now: UInt64) {
        guard state.withLock({ state in
            if state.running { state.turns += 1 }
            return state.running
        }) else { return }
        let until = ContinuousClock.now + .milliseconds(millis)
        while ContinuousClock.now < until {}
    }

    var nextDeadline: UInt64? { state.withLock { $0.running } ? 0 : nil }
}
