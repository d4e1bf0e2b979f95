import Foundation
import Glibc
import Loops
import PushWardenTestSupport
import PWCore
import Synchronization
import Testing
@testable import HTTPServer

/// Echoes what it was given in headers and body. Routes:
/// - `/respond`: answered from `decide` (204) without reading the body.
/// - `/slow?ms=N`: sleeps N ms in `handle`, limit 1 KiB.
/// - `/inline`: answered in `start`, on the loop, naming the loop (`X-Loop`).
/// - `/twice`: answered twice in `start` (201, then 500): the first answer must win.
/// - anything else: echo, body limit 64 bytes.
final class EchoHandler: AsyncHTTPHandler {
    /// Paths whose `handle` ran, in order.
    let handled = Mutex<[String]>([])

    func decide(_ head: HTTPRequestHead) -> HeadDecision {
        switch head.path {
        case "/respond":
            return .respond(HTTPResponse(status: 204, headers: ["X-Decided": "yes"]))
        case "/slow":
            return .readBody(limit: 1024)
        default:
            return .readBody(limit: 64)
        }
    }

    func payloadTooLarge(_ head: HTTPRequestHead, context: (any Sendable)?) -> HTTPResponse {
        HTTPResponse(status: 413, headers: ["Content-Type": "text/plain"], body: Array("too large".utf8))
    }

    /// Names the refusal (`X-Refused`) and echoes `X-Test`, so tests see what reached the handler.
    func refuse(_ head: HTTPRequestHead, _ refusal: HTTPRefusal) -> HTTPResponse {
        var headers: HTTPHeaders = ["Content-Type": "text/plain", "X-Refused": refusal.reason.rawValue]
        if let test = head.headers["x-test"] { headers.add("X-Echo-Test", test) }
        return HTTPResponse(status: refusal.status, headers: headers, body: Array(refusal.message.utf8))
    }

    func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder) {
        switch request.head.path {
        case "/inline":
            responder.respond(HTTPResponse(status: 200, headers: ["X-Loop": loop.name, "X-On-Loop": loop.isCurrent ? "yes" : "no"]))
        case "/twice":
            responder.respond(HTTPResponse(status: 201))
            responder.respond(HTTPResponse(status: 500))
        default:
            Task { responder.respond(await handle(request)) }
        }
    }

    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        handled.withLock { $0.append(request.head.path) }
        if request.head.path == "/slow" {
            let ms = request.head.query.split(separator: "=").last.flatMap { Int($0) } ?? 200
            try? await Task.sleep(for: .milliseconds(ms))
        }
        var headers: HTTPHeaders = [
            "X-Method": request.head.method,
            "X-Path": request.head.path,
            "X-Query": request.head.query,
            "X-Remote": request.head.remoteAddress,
        ]
        if let test = request.head.headers["x-test"] { headers.add("X-Echo-Test", test) }
        return HTTPResponse(status: 200, headers: headers, body: request.body)
    }

    var handledPaths: [String] { handled.withLock { $0 } }
}

/// Starts a server, runs `body`, then checks every request was released and shuts down.
func withServer(
    _ configuration: HTTPServerConfiguration = HTTPServerConfiguration(threads: 2),
    _ body: (HTTPServer, EchoHandler) async throws -> Void
) async throws {
    let handler = EchoHandler()
    let server = try HTTPServer(configuration: configuration, handler: handler)
    do {
        try await body(server, handler)
    } catch {
        await server.shutdown(gracePeriodSeconds: 0)
        throw error
    }
    // Every request's context must be released exactly once (MHD's completion notice).
    // A bound, not a speed test: generous so a loaded machine does not fail it.
    let deadline = ContinuousClock.now + .seconds(10)
    while server.activeRequestCount > 0 && ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(10))
    }
    #expect(server.activeRequestCount == 0)
    await server.shutdown(gracePeriodSeconds: 1)
}

@Suite struct HTTPServerTests {
    @Test func bindsPortZeroAndReportsTheBoundPort() async throws {
        try await withServer { server, _ in
            #expect(server.port > 0 && server.port <= 65_535)
            let response = try await fetch("GET /x HTTP/1.1\r\nHost: t\r\n\r\n", port: server.port)
            #expect(response.status == 200)
        }
    }

    @Test func answersOnTheLoopThatReadTheRequest() async throws {
        try await withServer { server, _ in
            let (first, second, third) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("GET /inline HTTP/1.1\r\nHost: t\r\n\r\n")
                let first = try client.readResponse()
                try client.send("POST /twice HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
                let second = try client.readResponse()
                try client.send("GET /after HTTP/1.1\r\nHost: t\r\n\r\n")
                return (first, second, try client.readResponse())
            }
            #expect(first.status == 200 && first.header("X-On-Loop") == "yes")
            #expect(first.header("X-Loop")?.hasPrefix("pw-http-") == true)
            #expect(second.status == 201)
            #expect(third.status == 200 && third.header("X-Path") == "/after")
        }
    }

    @Test func spreadsConnectionsOverEveryLoop() async throws {
        try await withServer(HTTPServerConfiguration(threads: 2)) { server, _ in
            // 32 connections all on one of two loops would happen with probability 2^-31.
            let loops = try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<32 {
                    group.addTask {
                        try await fetch("GET /inline HTTP/1.1\r\nHost: t\r\n\r\n", port: server.port).header("X-Loop") ?? "?"
                    }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            #expect(loops == ["pw-http-0", "pw-http-1"])
        }
    }

    @Test func echoesGetWithRawPathQueryAndHeaders() async throws {
        try await withServer { server, _ in
            let response = try await fetch(
                "GET /a/b%20c?x=1&y=%2F&flag HTTP/1.1\r\nHost: t\r\nX-Test: hello world\r\n\r\n", port: server.port)
            #expect(response.status == 200)
            #expect(response.header("X-Method") == "GET")
            #expect(response.header("X-Path") == "/a/b%20c")
            #expect(response.header("X-Query") == "x=1&y=%2F&flag")
            #expect(response.header("X-Echo-Test") == "hello world")
            #expect(response.header("X-Remote") == "127.0.0.1")
            #expect(response.body.isEmpty)
        }
    }

    @Test func echoesPostBody() async throws {
        try await withServer { server, _ in
            let body = #"{"push_token":"abc"}"#
            let response = try await fetch(
                "POST /v1/apps/shop/installations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                    + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)", port: server.port)
            #expect(response.status == 200)
            #expect(response.header("X-Method") == "POST")
            #expect(response.header("X-Path") == "/v1/apps/shop/installations")
            #expect(response.header("X-Query") == nil)  // MHD drops empty header values
            #expect(response.text == body)
        }
    }

    @Test func keepsTheConnectionAliveAcrossRequests() async throws {
        try await withServer { server, handler in
            let (first, second, closed) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("POST /one HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
                let first = try client.readResponse()
                try client.send("GET /two?q=2 HTTP/1.1\r\nHost: t\r\n\r\n")
                let second = try client.readResponse()
                try client.send("GET /three HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                _ = try client.readResponse()
                return (first, second, client.isClosedByServer())
            }
            #expect(first.status == 200 && first.text == "abc")
            #expect(first.header("Connection")?.lowercased() != "close")
            #expect(second.status == 200 && second.header("X-Path") == "/two" && second.header("X-Query") == "q=2")
            #expect(closed)
            #expect(handler.handledPaths == ["/one", "/two", "/three"])
        }
    }

    @Test func refusesADeclaredOversizedBodyBeforeReadingIt() async throws {
        try await withServer { server, handler in
            // Only the head is sent: the 413 must come without waiting for the body.
            let (response, closed) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n")
                let response = try client.readResponse()
                return (response, client.isClosedByServer())
            }
            #expect(response.status == 413)
            #expect(response.text == "too large")
            #expect(response.header("Connection")?.lowercased() == "close")
            #expect(closed)
            #expect(handler.handledPaths.isEmpty)
        }
    }

    @Test func refusesAChunkedBodyThatGrowsPastTheLimit() async throws {
        try await withServer { server, handler in
            let chunk = String(repeating: "a", count: 40)
            let (response, closed) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
                try client.send("28\r\n\(chunk)\r\n28\r\n\(chunk)\r\n28\r\n\(chunk)\r\n0\r\n\r\n")
                let response = try client.readResponse()
                return (response, client.isClosedByServer())
            }
            #expect(response.status == 413)
            #expect(response.header("Connection")?.lowercased() == "close")
            #expect(closed)
            #expect(handler.handledPaths.isEmpty)
        }
    }

    @Test func closesAnEndlessChunkedBodyWithoutReadingItAll() async throws {
        try await withServer { server, handler in
            // MHD cannot answer mid-upload, so an over-limit chunked body is drained for at
            // most 1 MiB more; a longer one gets the connection closed.
            let chunk = String(repeating: "b", count: 0x10000)
            let closed = try await offPool { () -> Bool in
                let client = try RawHTTPClient(port: server.port)
                try client.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in 0..<40 {  // 2.5 MiB, never terminated
                    do { try client.send("10000\r\n\(chunk)\r\n") } catch { break }
                }
                return client.isClosedByServer()
            }
            #expect(closed)
            #expect(handler.handledPaths.isEmpty)
        }
    }

    @Test func acceptsAChunkedBodyWithinTheLimit() async throws {
        try await withServer { server, _ in
            let response = try await fetch(
                "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                port: server.port)
            #expect(response.status == 200)
            #expect(response.text == "hello world")
        }
    }

    @Test func answersARespondDecisionWithoutReadingTheBody() async throws {
        try await withServer { server, handler in
            let response = try await fetch(
                "POST /respond HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n", port: server.port)
            #expect(response.status == 204)
            #expect(response.header("X-Decided") == "yes")
            #expect(handler.handledPaths.isEmpty)
            // A body-less request answered from `decide` keeps the connection usable.
            let (first, second) = try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("GET /respond HTTP/1.1\r\nHost: t\r\n\r\n")
                let first = try client.readResponse()
                try client.send("GET /after HTTP/1.1\r\nHost: t\r\n\r\n")
                return (first, try client.readResponse())
            }
            #expect(first.status == 204)
            #expect(second.status == 200 && second.header("X-Path") == "/after")
        }
    }

    @Test func suspendedHandlersHoldNoServerThread() async throws {
        try await withServer(HTTPServerConfiguration(threads: 2)) { server, handler in
            let start = ContinuousClock.now
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<100 {
                    group.addTask {
                        try await fetch("GET /slow?ms=200 HTTP/1.1\r\nHost: t\r\n\r\n", port: server.port).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            let elapsed = ContinuousClock.now - start
            #expect(statuses.count == 100)
            #expect(statuses.allSatisfy { $0 == 200 })
            #expect(handler.handledPaths.count == 100)
            #expect(elapsed < .seconds(3), "100 × 200 ms handlers took \(elapsed)")
        }
    }

    @Test func rejectsAnOversizedHeaderBlockAndKeepsServing() async throws {
        try await withServer { server, handler in
            let huge = String(repeating: "v", count: 64 * 1024)
            let status = try await offPool { () -> Int? in
                let client = try RawHTTPClient(port: server.port)
                try? client.send("GET /big HTTP/1.1\r\nHost: t\r\nX-Big: \(huge)\r\n\r\n")
                return try? client.readResponse().status
            }
            // MHD answers 431 (or closes the connection); the handler never sees it.
            if let status { #expect([400, 413, 431].contains(status)) }
            #expect(handler.handledPaths.isEmpty)
            let after = try await fetch("GET /after HTTP/1.1\r\nHost: t\r\n\r\n", port: server.port)
            #expect(after.status == 200)
        }
    }

    @Test func answersMalformedRequestsWith400() async throws {
        try await withServer { server, handler in
            let response = try await fetch("GET /x HTTP/1.1\r\n\r\n", port: server.port)  // no Host
            #expect(response.status == 400)
            #expect(handler.handledPaths.isEmpty)
        }
    }

    @Test func releasesRequestsWhoseClientGoesAway() async throws {
        // A client that hangs up in the middle of its head is noticed by libmicrohttpd only when
        // the connection times out, so the bound here is the connection timeout: one second.
        try await withServer(HTTPServerConfiguration(threads: 2, connectionTimeoutSeconds: 1)) { server, handler in
            // Disconnect mid-head, and while the handler is running; `withServer` then checks
            // that both requests were released.
            try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("GET /half HTTP/1.1\r\nHost: t\r\n")
            }
            try await offPool {
                let client = try RawHTTPClient(port: server.port)
                try client.send("GET /slow?ms=100 HTTP/1.1\r\nHost: t\r\n\r\n")
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(handler.handledPaths == ["/slow"])
        }
    }

    @Test func bindsIPv6Loopback() async throws {
        try await withServer(HTTPServerConfiguration(host: "::1", threads: 2)) { server, _ in
            let response = try await fetch("GET /six HTTP/1.1\r\nHost: t\r\n\r\n", host: "::1", port: server.port)
            #expect(response.status == 200)
            #expect(response.header("X-Remote") == "::1")
        }
    }

    @Test func refusesAHostThatIsNotAnIPLiteral() {
        #expect(throws: HTTPServerError.self) {
            _ = try HTTPServer(configuration: HTTPServerConfiguration(host: "localhost"), handler: EchoHandler())
        }
    }

    @Test func refusesAPortInUse() throws {
        let first = try HTTPServer(configuration: HTTPServerConfiguration(threads: 1), handler: EchoHandler())
        #expect(throws: HTTPServerError.self) {
            _ = try HTTPServer(configuration: HTTPServerConfiguration(port: first.port, threads: 1), handler: EchoHandler())
        }
    }

    @Test func shutdownFinishesInFlightRequestsThenRefusesConnections() async throws {
        let handler = EchoHandler()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(threads: 2), handler: handler)
        let port = server.port
        let inFlight = Task {
            try await fetch("GET /slow?ms=500 HTTP/1.1\r\nHost: t\r\n\r\n", port: port)
        }
        // Wait until the request is inside the handler.
        let deadline = ContinuousClock.now + .seconds(2)
        while handler.handledPaths.isEmpty && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(handler.handledPaths == ["/slow"])
        let start = ContinuousClock.now
        await server.shutdown(gracePeriodSeconds: 5)
        let took = ContinuousClock.now - start
        let response = try await inFlight.value
        #expect(response.status == 200)
        #expect(response.header("Connection")?.lowercased() == "close")
        #expect(took < .seconds(2), "shutdown waited \(took)")
        #expect(server.activeRequestCount == 0)
        let refused = try await offPool { () -> Int32 in
            do {
                _ = try RawHTTPClient(port: port)
                return 0
            } catch let failure as RawHTTPClient.Failure {
                return failure.errnoValue
            }
        }
        #expect(refused == ECONNREFUSED)
        await server.shutdown(gracePeriodSeconds: 1)  // idempotent
    }

    @Test func shutdownCutsOffHandlersThatOutliveTheGracePeriod() async throws {
        let handler = EchoHandler()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(threads: 2), handler: handler)
        let port = server.port
        let inFlight = Task {
            try? await fetch("GET /slow?ms=3000 HTTP/1.1\r\nHost: t\r\n\r\n", port: port)
        }
        let deadline = ContinuousClock.now + .seconds(2)
        while handler.handledPaths.isEmpty && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        let start = ContinuousClock.now
        await server.shutdown(gracePeriodSeconds: 0.2)
        #expect(ContinuousClock.now - start < .seconds(2))
        // The client gets a 503 or a closed connection, never the late 200.
        let response = await inFlight.value
        #expect(response?.status != 200)
    }
}
