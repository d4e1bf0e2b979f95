import HTTPClient
import Loops
import PWCore

/// The seam between PushWarden and the network: production sends with libcurl, `dry_run` logs
/// instead, tests may substitute their own.
public protocol UpstreamTransport: Sendable {
    /// - Parameter loop: the request's loop, whose own connections carry the call; nil off the loops.
    func send(_ request: HTTPClientRequest, on loop: EventLoop?) async throws(HTTPClientError) -> HTTPClientResponse
}

extension HTTPClient: UpstreamTransport {
    public func send(_ request: HTTPClientRequest, on loop: EventLoop?) async throws(HTTPClientError) -> HTTPClientResponse {
        try await execute(request, on: loop)
    }
}

/// Sends nothing: logs the exact request it would send, with secrets and push tokens redacted,
/// and answers as the emulated provider would.
public struct DryRunTransport: UpstreamTransport {
    let logger: Logger
    let answer: @Sendable (HTTPClientRequest) -> HTTPClientResponse

    public init(logger: Logger, answer: @escaping @Sendable (HTTPClientRequest) -> HTTPClientResponse) {
        self.logger = logger
        self.answer = answer
    }

    public func send(_ request: HTTPClientRequest, on loop: EventLoop?) async throws(HTTPClientError) -> HTTPClientResponse {
        var headers: [String] = []
        for field in request.headers {
            let shown = Self.isSecretHeader(field.name) ? "<redacted>"
                : Self.namesAContact(field.name) ? Redact.contact(field.value) : field.value
            headers.append("\(field.name): \(shown)")
        }
        logger.info("dry_run: would send", [
            ("method", request.method),
            ("url", request.url),
            ("headers", headers.joined(separator: "; ")),
            ("body", Self.redactedBody(request.body)),
        ])
        return answer(request)
    }

    static func isSecretHeader(_ name: String) -> Bool {
        let lower = name.lowercased()
        return lower == "authorization" || lower.contains("key") || lower.contains("token") || lower == "cookie"
            || lower.contains("session") || lower.contains("secret")
    }

    /// Where providers carry the contact (Voyado's `contact_id`, Native Notify's `subscriberId`,
    /// Voidhash's `x-distinct-id`): shown as its short hash, as in every other log line.
    static func namesAContact(_ name: String) -> Bool {
        let lower = name.lowercased()
        return lower.contains("contact") || lower.contains("subscriber") || lower.contains("distinct") || lower == "user_id"
    }

    /// The body with every token- or key-like string value replaced by its short hash.
    static func redactedBody(_ body: [UInt8]) -> String {
        guard let json = try? JSONValue.parse(body) else { return "<\(body.count) bytes, not JSON>" }
        return redact(json).encodedString()
    }

    private static func redact(_ value: JSONValue, key: String = "") -> JSONValue {
        switch value {
        case .object(let object):
            return .object(JSONObject(object.members.map { JSONMember($0.key, redact($0.value, key: $0.key)) }))
        case .array(let elements):
            return .array(elements.map { redact($0, key: key) })
        case .string(let s):
            let lower = key.lowercased()
            if lower.contains("token") || lower.contains("key") || lower.contains("secret") || lower == "auth"
                || lower == "p256dh" || lower == "endpoint" {
                return .string(Redact.token(s))
            }
            if namesAContact(key) { return .string(Redact.contact(s)) }
            return value
        default:
            return value
        }
    }
}
