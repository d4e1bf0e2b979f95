import Foundation
import PushWardenTestSupport
import Testing
@testable import HTTPServer

/// What one client address and one slow client may hold: connections per address over the whole
/// server, and the deadline for a request head that a trickle of bytes does not extend.
@Suite struct ConnectionLimitTests {
    /// Sends the request line, then one header line every `interval` ms, until the server closes
    /// the connection or `maximum` has passed. Returns when it closed (nil: never) and whether it
    /// answered anything.
    static func trickle(port: Int, intervalMillis: Int32 = 200, maximum: Duration = .seconds(5)) async throws -> (closedAfter: Duration?, answered: Bool) {
        try await offPool {
            let client = try RawHTTPClient(port: port)
            let start = ContinuousClock.now
            try client.send("GET /slowloris HTTP/1.1\r\nHost: t\r\n")
            var line = 0
            while ContinuousClock.now - start < maximum {
                switch client.waitForClose(milliseconds: intervalMillis) {
                case .some(true): return (ContinuousClock.now - start, false)
                case .some(false): return (ContinuousClock.now - start, true)
                case nil: break
                }
                line += 1
                try? client.send("X-Line-\(line): still coming\r\n")
            }
            return (nil, false)
        }
    }

    @Test func aTricklingHeadIsClosedAtTheDeadline() async throws {
        // The idle timeout (30 s) would never fire: a line comes every 200 ms.
        try await withServer(HTTPServerConfiguration(threads: 2, headTimeoutSeconds: 1)) { server, handler in
            let (closedAfter, answered) = try await Self.trickle(port: server.port)
            #expect(closedAfter != nil, "still open after 5 s")
            if let closedAfter {
                #expect(closedAfter >= .milliseconds(900) && closedAfter < .seconds(3), "closed after \(closedAfter)")
            }
            #expect(!answered)
            #expect(handler.handledPaths.isEmpty)
        }
    }

    @Test func theDeadlineCoversHeadsOnly() async throws {
        try await withServer(HTTPServerConfiguration(threads: 2, headTimeoutSeconds: 1)) { server, _ in
            // A handler slower than the deadline, and a kept-alive client that pauses under it
            // between requests, are served; an idle kept-alive connection is closed after it.
            let (slow, second, idleClosed) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("GET /slow?ms=1500 HTTP/1.1\r\nHost: t\r\n\r\n")
                let slow = try client.readResponse()
                Thread.sleep(forTimeInterval: 0.5)
                try client.send("GET /again HTTP/1.1\r\nHost: t\r\n\r\n")
                let second = try client.readResponse()
                return (slow, second, client.waitForClose(milliseconds: 3000))
            }
            #expect(slow.status == 200)
            #expect(second.status == 200 && second.header("X-Path") == "/again")
            #expect(idleClosed == true)
        }
    }

    /// The deadline that closes an idle kept-alive connection is announced a second early
    /// (`Keep-Alive: timeout=N`), so a client that honours it never sends a request into the close;
    /// one that reuses the connection within N is served.
    @Test func keptAliveResponsesAnnounceWhenTheServerClosesAnIdleConnection() async throws {
        try await withServer(HTTPServerConfiguration(threads: 2, headTimeoutSeconds: 3)) { server, _ in
            let (first, second, refused) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("GET /one HTTP/1.1\r\nHost: t\r\n\r\n")
                let first = try client.readResponse()
                Thread.sleep(forTimeInterval: 2.0)
                try client.send("GET /two HTTP/1.1\r\nHost: t\r\n\r\n")
                let second = try client.readResponse()
                let refused = try RawHTTPClient(port: server.port)
                try refused.send("POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 999999999\r\n\r\n")
                return (first, second, try refused.readResponse())
            }
            #expect(first.status == 200 && first.header("Keep-Alive") == "timeout=2")
            #expect(second.status == 200 && second.header("X-Path") == "/two", "reused within the announced timeout")
            // A response that closes the connection announces nothing.
            #expect(refused.header("Connection")?.lowercased() == "close")
            #expect(refused.header("Keep-Alive") == nil)
        }
        #expect(ServerCore.keepAlive(headTimeoutSeconds: 10) == "timeout=9")
        #expect(ServerCore.keepAlive(headTimeoutSeconds: 1) == "timeout=1")
        #expect(ServerCore.keepAlive(headTimeoutSeconds: 0) == nil)
    }

    @Test func oneAddressCannotTakeEveryConnection() async throws {
        let limit = 4
        try await withServer(HTTPServerConfiguration(threads: 2, perAddressConnectionLimit: limit)) { server, _ in
            let port = server.port
            let (held, refused, other, freed) = try await offPool { () throws -> (Int, Bool, Int, Int) in
                // `limit` kept-alive connections from 127.0.0.1, each served once.
                var clients: [RawHTTPClient] = []
                for _ in 0..<limit {
                    let client = try RawHTTPClient(port: port)
                    try client.send("GET /held HTTP/1.1\r\nHost: t\r\n\r\n")
                    _ = try client.readResponse()
                    clients.append(client)
                }
                // The next one from the same address is closed without an answer.
                let extra = try RawHTTPClient(port: port)
                try? extra.send("GET /extra HTTP/1.1\r\nHost: t\r\n\r\n")
                let refused = extra.waitForClose(milliseconds: 2000) == true
                // Another address is served meanwhile.
                let other = try RawHTTPClient(port: port, source: "127.0.0.2")
                try other.send("GET /other HTTP/1.1\r\nHost: t\r\n\r\n")
                let otherStatus = try other.readResponse().status
                // A place given back is a place for the next connection.
                clients.removeFirst()
                Thread.sleep(forTimeInterval: 0.2)
                let again = try RawHTTPClient(port: port)
                try again.send("GET /again HTTP/1.1\r\nHost: t\r\n\r\n")
                return (clients.count, refused, otherStatus, try again.readResponse().status)
            }
            #expect(held == limit - 1)
            #expect(refused)
            #expect(other == 200)
            #expect(freed == 200)
        }
    }

    @Test func hundredsOfSlowConnectionsFromOneAddressLeaveRoomForOthers() async throws {
        // 300 trickling connections from 127.0.0.2 against a limit of 100: 200 are refused at
        // once, the rest held, and 127.0.0.1 is still served at once.
        let configuration = HTTPServerConfiguration(threads: 2, perAddressConnectionLimit: 100, headTimeoutSeconds: 2)
        try await withServer(configuration) { server, _ in
            let port = server.port
            let (refused, waited, status) = try await offPool { () throws -> (Int, Duration, Int) in
                var slow: [RawHTTPClient] = []
                for _ in 0..<300 {
                    let client = try RawHTTPClient(port: port, source: "127.0.0.2", timeoutSeconds: 1)
                    try? client.send("GET /slow HTTP/1.1\r\n")
                    slow.append(client)
                }
                Thread.sleep(forTimeInterval: 0.3)
                let refused = slow.filter { $0.waitForClose(milliseconds: 0) == true }.count
                let start = ContinuousClock.now
                let client = try RawHTTPClient(port: port)
                try client.send("GET /fast HTTP/1.1\r\nHost: t\r\n\r\n")
                let status = try client.readResponse().status
                return (refused, ContinuousClock.now - start, status)
            }
            #expect(refused == 200)
            #expect(status == 200)
            #expect(waited < .milliseconds(500), "waited \(waited)")
        }
    }
}
