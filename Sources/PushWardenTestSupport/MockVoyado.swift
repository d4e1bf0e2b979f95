import Foundation
import HTTPServer
import PWCore
import Synchronization

/// A real HTTP server that behaves as Voyado's App Push API document (seed 001) says: the three
/// endpoints under a base path, `Authorization: Bearer <PublicApiKey>`, its validation and its
/// error envelope. It records what it received so that tests can assert it exactly, and can be
/// told to answer with scripted statuses or after a delay.
public final class MockVoyado: Sendable {
    public struct Received: Sendable, Equatable {
        public var method: String
        public var path: String
        public var headers: HTTPHeaders
        public var body: [UInt8]
        public var json: JSONValue? { try? JSONValue.parse(body) }
        public var bodyText: String { String(decoding: body, as: UTF8.self) }
    }

    /// A scripted answer, used once, before the document's normal behaviour resumes.
    public struct Scripted: Sendable {
        public var status: Int
        public var headers: HTTPHeaders
        public var body: [UInt8]
        public init(status: Int, headers: HTTPHeaders = [:], body: String = "") {
            self.status = status
            self.headers = headers
            self.body = Array(body.utf8)
        }
    }

    private struct State {
        var received: [Received] = []
        var script: [Scripted] = []
    }

    private let state = Mutex(State())
    private let server: HTTPServer
    public let apiKey: String
    public let basePathPrefix: String

    /// - Parameters:
    ///   - apiKey: the PublicApiKey the mock accepts.
    ///   - latencyMillis: every answer waits this long (the connection holds no thread meanwhile).
    ///   - record: keep every request (off for benchmarks).
    public init(apiKey: String = "voyado-test-key", basePathPrefix: String = "/api/v1/acme/abc123/default",
                latencyMillis: Int = 0, record: Bool = true, host: String = "127.0.0.1", port: Int = 0, threads: Int = 2) throws {
        self.apiKey = apiKey
        self.basePathPrefix = basePathPrefix
        let box = HandlerBox()
        server = try HTTPServer(configuration: HTTPServerConfiguration(host: host, port: port, threads: threads), handler: box)
        box.set(Handler(mock: Weak(self), latencyMillis: latencyMillis, record: record))
    }

    public var port: Int { server.port }
    /// The base path to put in a policy.
    public var basePath: String { "http://127.0.0.1:\(port)\(basePathPrefix)" }

    public var received: [Received] { state.withLock { $0.received } }
    public func received(path suffix: String) -> [Received] { received.filter { $0.path.hasSuffix(suffix) } }
    public func reset() { state.withLock { $0 = State() } }
    public func enqueue(_ answers: Scripted...) { state.withLock { $0.script.append(contentsOf: answers) } }

    public func stop() async { await server.shutdown(gracePeriodSeconds: 1) }

    fileprivate func answer(_ request: HTTPRequest, record: Bool) -> HTTPResponse {
        let received = Received(method: request.head.method, path: request.head.path, headers: request.head.headers, body: request.body)
        let scripted: Scripted? = state.withLock { state in
            if record { state.received.append(received) }
            return state.script.isEmpty ? nil : state.script.removeFirst()
        }
        if let scripted { return HTTPResponse(status: scripted.status, headers: scripted.headers, body: scripted.body) }
        return documented(request)
    }

    /// The behaviour the seed document describes.
    private func documented(_ request: HTTPRequest) -> HTTPResponse {
        guard request.head.path.hasPrefix(basePathPrefix) else {
            return Self.error(400, "invalid_path", "invalid value of base-path")
        }
        guard request.head.headers["Authorization"] == "Bearer \(apiKey)" else {
            return Self.error(401, "unauthorized", "missing or invalid Bearer token")
        }
        guard request.head.method == "POST" else { return HTTPResponse(status: 405) }
        guard let json = try? JSONValue.parse(request.body), let body = json.objectValue else {
            return Self.error(400, "invalid_json", "malformed JSON body")
        }
        let endpoint = request.head.path.dropFirst(basePathPrefix.count)
        switch endpoint {
        case "/installations":
            guard let platform = body["platform"]?.stringValue, body["push_token"]?.stringValue != nil,
                  body["contact_id"]?.stringValue != nil else {
                return Self.error(400, "invalid_request", "platform, push_token and contact_id are required")
            }
            guard platform == "ios" || platform == "android" else {
                return Self.error(400, "invalid_platform", "platform is not ios or android")
            }
            return HTTPResponse(status: 202)
        case "/installations/unregister":
            guard body["push_token"]?.stringValue != nil else { return Self.error(400, "invalid_request", "missing push_token") }
            return HTTPResponse(status: 202)
        case "/events":
            guard let events = body["events"]?.arrayValue, !events.isEmpty else {
                return Self.error(400, "invalid_request", "empty or missing events array")
            }
            for event in events {
                guard let e = event.objectValue, e["message_id"]?.stringValue != nil, e["occurred_at"]?.stringValue != nil,
                      e["contact_id"]?.stringValue != nil else {
                    return Self.error(400, "invalid_event", "an event is null or misses message_id, occurred_at or contact_id")
                }
                guard let type = e["type"]?.stringValue, ["delivered", "opened", "dismissed"].contains(type) else {
                    return Self.error(400, "invalid_event_type", "unknown event type")
                }
            }
            let answer = JSONValue.object(JSONObject([JSONMember("accepted", .number(String(events.count)))]))
            return HTTPResponse(status: 202, headers: ["Content-Type": "application/json"], body: answer.encoded())
        default:
            return Self.error(400, "invalid_path", "invalid value of base-path")
        }
    }

    static func error(_ status: Int, _ code: String, _ message: String) -> HTTPResponse {
        let body = JSONValue.object(JSONObject([JSONMember("error", .object(JSONObject([
            JSONMember("code", .string(code)), JSONMember("message", .string(message)),
            JSONMember("request_id", .string(UUID().uuidString)),
        ])))]))
        return HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: body.encoded())
    }

    private struct Handler: HTTPHandler {
        let mock: Weak<MockVoyado>
        let latencyMillis: Int
        let record: Bool

        func decide(_ head: HTTPRequestHead) -> HeadDecision { .readBody(limit: 1 << 20) }
        func payloadTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { HTTPResponse(status: 413) }
        func handle(_ request: HTTPRequest) async -> HTTPResponse {
            if latencyMillis > 0 { try? await Task.sleep(for: .milliseconds(latencyMillis)) }
            guard let mock = mock.value else { return HTTPResponse(status: 503) }
            return mock.answer(request, record: record)
        }
    }
}

/// Lets the server be created before the handler that refers back to the mock.
final class HandlerBox: HTTPHandler {
    private let inner = Mutex<(any HTTPHandler)?>(nil)
    func set(_ handler: any HTTPHandler) { inner.withLock { $0 = handler } }
    private var handler: (any HTTPHandler)? { inner.withLock { $0 } }
    func decide(_ head: HTTPRequestHead) -> HeadDecision { handler?.decide(head) ?? .respond(HTTPResponse(status: 503)) }
    func payloadTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { handler?.payloadTooLarge(head) ?? HTTPResponse(status: 413) }
    func handle(_ request: HTTPRequest) async -> HTTPResponse { await handler?.handle(request) ?? HTTPResponse(status: 503) }
}

final class Weak<T: AnyObject & Sendable>: Sendable {
    private let box: Mutex<WeakRef>
    private struct WeakRef: @unchecked Sendable { weak var value: T? }
    init(_ value: T) { box = Mutex(WeakRef(value: value)) }
    var value: T? { box.withLock { $0.value } }
}
