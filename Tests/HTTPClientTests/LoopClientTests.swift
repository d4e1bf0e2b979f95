import Foundation
import HTTPClient
import Loops
import Testing

/// Calls made for an event loop (`execute(_:on:)`): they go out on the loop's own multi handle.
@Suite struct LoopClientTests {
    private func startedLoop() throws -> EventLoop {
        let loop = try EventLoop(name: "test-client")
        try loop.start()
        return loop
    }

    @Test func callsFromALoopUseTheLoopsOwnConnectionsAndResumeOnIt() async throws {
        try await withUpstream { server, client, base in
            let loop = try startedLoop()
            defer { loop.stop() }
            // One call off every loop leaves an idle connection in the client thread's pool.
            #expect(try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo")).status == 201)
            #expect(server.acceptedConnections == 1)
            let observed = try await Task(executorPreference: loop) { () throws -> [Bool] in
                var seen: [Bool] = []
                for _ in 0..<3 {
                    let response = try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo"), on: loop)
                    seen.append(response.status == 201 && response.body == Array("hello".utf8) && EventLoop.current === loop)
                }
                return seen
            }.value
            #expect(observed == [true, true, true])
            // Not the thread's idle connection: one of the loop's own, kept alive between its calls.
            #expect(server.acceptedConnections == 2)
        }
    }

    /// After a burst a loop gives its connections back: none is kept past five idle seconds (the
    /// next call opens a new one), while calls closer together share one.
    @Test func aLoopClosesItsConnectionsOnceIdleForFiveSeconds() async throws {
        try await withUpstream { server, client, base in
            let loop = try startedLoop()
            defer { loop.stop() }
            func call() async throws -> Int {
                try await Task(executorPreference: loop) { () throws -> Int in
                    try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo"), on: loop).status
                }.value
            }
            #expect(try await call() == 201)
            try await Task.sleep(for: .seconds(2))
            #expect(try await call() == 201)
            #expect(server.acceptedConnections == 1)
            try await Task.sleep(for: .seconds(6))
            #expect(try await call() == 201)
            #expect(server.acceptedConnections == 2)
        }
    }

    @Test func manyConcurrentLoopCallsCompleteWithinThePerHostLimit() async throws {
        try await withUpstream(HTTPClientConfiguration(maxConnectionsPerHost: 8, maxTotalConnections: 16)) { server, client, base in
            let loop = try startedLoop()
            defer { loop.stop() }
            let statuses = try await Task(executorPreference: loop) { () throws -> [Int] in
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for i in 0..<100 {
                        group.addTask {
                            try await client.execute(HTTPClientRequest(method: "POST", url: base + "/slow?i=\(i)", body: [1]), on: loop).status
                        }
                    }
                    return try await group.reduce(into: [Int]()) { $0.append($1) }
                }
            }.value
            #expect(statuses.count == 100 && statuses.allSatisfy { $0 == 200 })
            #expect(server.requests.count == 100)
            #expect(server.acceptedConnections <= 8, "\(server.acceptedConnections) connections")
        }
    }

    @Test func aLoopCallTimesOutOnTime() async throws {
        try await withUpstream { _, client, base in
            let loop = try startedLoop()
            defer { loop.stop() }
            let start = ContinuousClock.now
            await Task(executorPreference: loop) {
                await expectFailure(.timeout) {
                    try await client.execute(HTTPClientRequest(method: "GET", url: base + "/hang", timeoutMillis: 300), on: loop)
                }
            }.value
            let elapsed = milliseconds(since: start)
            #expect(elapsed >= 280 && elapsed < 1500, "took \(elapsed) ms")
        }
    }

    @Test func cancellingALoopTaskEndsItsCall() async throws {
        let loop = try startedLoop()
        defer { loop.stop() }
        try await expectCancellationEndsTheCall(on: loop)
    }

    @Test func afterShutdownLoopCallsFail() async throws {
        try await withUpstream { _, client, base in
            let loop = try startedLoop()
            defer { loop.stop() }
            client.shutdown()
            await Task(executorPreference: loop) {
                await expectFailure(.shutdown) {
                    try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo"), on: loop)
                }
            }.value
        }
    }

    /// The loop a call names decides, not the thread it is made from: a task on a loop that names
    /// none goes to the client's thread, a task off the loops that names one goes out on that
    /// loop's multi handle.
    @Test func theNamedLoopWinsOverTheThreadACallIsMadeOn() async throws {
        try await withUpstream { server, client, base in
            let loop = try startedLoop()
            defer { loop.stop() }
            #expect(try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo")).status == 201)
            #expect(server.acceptedConnections == 1)
            let onLoop = try await Task(executorPreference: loop) { () throws -> Bool in
                let response = try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo"), on: nil)
                return response.status == 201 && EventLoop.current === loop
            }.value
            #expect(onLoop, "answered, and the task came back to its loop")
            #expect(server.acceptedConnections == 1, "the client thread's idle connection, not a loop's")
            // From a task on no loop, for the loop: the loop's own handle (a new connection).
            #expect(try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo"), on: loop).status == 201)
            #expect(server.acceptedConnections == 2)
            // And that connection is the loop's: a call from the loop itself reuses it.
            let again = try await Task(executorPreference: loop) {
                try await client.execute(HTTPClientRequest(method: "GET", url: base + "/echo"), on: loop).status
            }.value
            #expect(again == 201)
            #expect(server.acceptedConnections == 2)
        }
    }
}
