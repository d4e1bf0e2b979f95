import HTTPServer
import Loops
import PWCore
import Synchronization

/// One request a mock upstream received, kept so that tests can assert it exactly.
public struct MockRequest: Sendable, Equatable {
    public var method: String
    public var path: String
    public var query: String
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(method: String, path: String, query: String = "", headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }

    init(_ request: HTTPRequest) {
        self.init(method: request.head.method, path: request.head.path, query: request.head.query,
                  headers: request.head.headers, body: request.body)
    }

    public var json: JSONValue? { try? JSONValue.parse(body) }
    public var object: JSONObject? { json?.objectValue }
    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// A scripted answer, used once, before the document's normal behaviour resumes.
public struct MockAnswer: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, headers: HTTPHeaders = [:], body: String = "") {
        self.status = status
        self.headers = headers
        self.body = Array(body.utf8)
    }
}

/// The machinery every mock upstream shares: a real loopback HTTP server that optionally waits a
/// fixed latency, records each request, answers from the script queue first and otherwise with the
/// behaviour its mock installed through `respond(with:)`. Until one is installed it answers 503.
///
/// The server holds its exchange strongly and the exchange does not hold the server, so there is no
/// cycle; a mock's behaviour closure should capture its mock weakly, because the mock owns this
/// server. Stopping happens in `stop()` or, failing that, when the `HTTPServer` is released.
/// Thread-safe.
public final class MockServer: Sendable {
    private let server: HTTPServer
    private let exchange: Exchange

    /// - Parameters:
    ///   - latencyMillis: every answer waits this long (the connection holds no thread meanwhile).
    ///   - record: keep every request (off for benchmarks).
    public init(host: String = "127.0.0.1", port: Int = 0, threads: Int = 2, latencyMillis: Int = 0, record: Bool = true) throws {
        exchange = Exchange(record: record)
        server = try HTTPServer(configuration: HTTPServerConfiguration(host: host, port: port, threads: threads,
                                                                         // Every client of a mock shares 127.0.0.1: the bench's nginx,
                                                                         // sidecars and floor keep 512 connections each to one mock.
                                                                         perAddressConnectionLimit: 0, name: "mock-http"),
                                handler: Handler(exchange: exchange, latencyMillis: latencyMillis))
    }

    /// Installs the document's behaviour, used whenever no scripted answer is queued.
    public func respond(with behaviour: @escaping @Sendable (HTTPRequest) -> HTTPResponse) {
        exchange.behaviour.withLock { $0 = Behaviour(respond: behaviour) }
    }

    public var port: Int { server.port }

    public var received: [MockRequest] { exchange.state.withLock { $0.received } }
    public func received(path suffix: String) -> [MockRequest] { received.filter { $0.path.hasSuffix(suffix) } }
    public func enqueue(_ answers: [MockAnswer]) { exchange.state.withLock { $0.script.append(contentsOf: answers) } }
    /// Forgets what was received and what was scripted; the installed behaviour stays.
    public func reset() { exchange.state.withLock { $0 = Exchange.State() } }

    public func stop() async { await server.shutdown(gracePeriodSeconds: 1) }

    /// The installed behaviour, boxed so the closure keeps one concrete representation.
    private struct Behaviour: Sendable {
        let respond: @Sendable (HTTPRequest) -> HTTPResponse
    }

    private final class Exchange: Sendable {
        struct State {
            var received: [MockRequest] = []
            var script: [MockAnswer] = []
        }

        let state = Mutex(State())
        let behaviour = Mutex<Behaviour?>(nil)
        let record: Bool

        init(record: Bool) { self.record = record }

        func answer(_ request: HTTPRequest) -> HTTPResponse {
            let received = record ? MockRequest(request) : nil
            let scripted: MockAnswer? = state.withLock { state in
                if let received { state.received.append(received) }
                return state.script.isEmpty ? nil : state.script.removeFirst()
            }
            if let scripted { return HTTPResponse(status: scripted.status, headers: scripted.headers, body: scripted.body) }
            guard let behaviour = behaviour.withLock({ $0 }) else { return HTTPResponse(status: 503) }
            return behaviour.respond(request)
        }
    }

    private struct Handler: HTTPHandler {
        let exchange: Exchange
        let latencyMillis: Int

        func decide(_ head: HTTPRequestHead) -> HeadDecision { .readBody(limit: 1 << 20) }
        func payloadTooLarge(_ head: HTTPRequestHead, context: (any Sendable)?) -> HTTPResponse { HTTPResponse(status: 413) }

        func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder) {
            guard latencyMillis > 0 else {
                responder.respond(exchange.answer(request))
                return
            }
            // Answered now, sent after the latency by the loop itself: no task and no timer
            // per request, so the mock costs the benchmark as little CPU as possible.
            let line = loop.attachment(for: ObjectIdentifier(DelayLine.self)) { () -> DelayLine in
                let line = DelayLine(loop: loop)
                loop.add(line)
                return line
            }
            line.append(responder, exchange.answer(request), due: EventLoop.now() + UInt64(latencyMillis) * 1_000_000)
        }
    }
}

/// Answers waiting out the mock's latency on one loop. The latency is the same for every
/// request, so due times arrive in order and a FIFO is enough. Loop-confined (checked in debug
/// builds).
private final class DelayLine: LoopParticipant {
    private var waiting: [(due: UInt64, responder: HTTPResponder, response: HTTPResponse)] = []
    private var head = 0
    /// The loop holds this line as an attachment and outlives it.
    private unowned let loop: EventLoop

    init(loop: EventLoop) { self.loop = loop }

    func append(_ responder: HTTPResponder, _ response: HTTPResponse, due: UInt64) {
        loop.assertOnLoop("DelayLine")
        waiting.append((due, responder, response))
    }

    func turnEnded(now: UInt64) {
        loop.assertOnLoop("DelayLine")
        while head < waiting.count, waiting[head].due <= now {
            waiting[head].responder.respond(waiting[head].response)
            head += 1
        }
        if head == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024 && head * 2 > waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
    }

    var nextDeadline: UInt64? { head < waiting.count ? waiting[head].due : nil }
}
