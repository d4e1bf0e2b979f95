import Foundation
import HTTPServer
import PWCore
import PWPolicy

/// A real HTTP server that behaves as Voyado's App Push API document (seed 001) says: the three
/// endpoints under a base path, `Authorization: Bearer <PublicApiKey>`, its validation and its
/// error envelope. It records what it received so that tests can assert it exactly, and can be
/// told to answer with scripted statuses or after a delay.
public final class MockVoyado: ProviderMock {
    public static let kind = ProviderKind.voyado
    public typealias Received = MockRequest
    public typealias Scripted = MockAnswer

    public let server: MockServer
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
        server = try MockServer(host: host, port: port, threads: threads, latencyMillis: latencyMillis, record: record)
        server.respond(as: self) { $0.documented($1) }
    }

    /// The base path to put in a policy.
    public var basePath: String { "http://127.0.0.1:\(port)\(basePathPrefix)" }

    public func reset() { server.reset() }

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
}
