import Foundation
import HTTPServer
import PWCore
import Synchronization

/// A real HTTP server playing an app backend's RFC 7662 introspection endpoint: it checks that
/// each call is a `POST` of exactly `token=<percent-encoded token>` as
/// `application/x-www-form-urlencoded` with the expected client credential (a wrong one is
/// `401`, a malformed body `400`), counts the calls by token, and answers as `behaviour` says.
///
/// The contact of an active token is the middle part of a token of the form `x.CONTACT.y`
/// (`tok.alice.1f2e` is `alice`), otherwise the whole token. Slowness is set per server
/// (`latencyMillis`); "down" is a port where nothing listens (`MockIntrospection.closedURL()`).
/// Thread-safe.
public final class MockIntrospection: Sendable {
    /// The credential PushWarden must present.
    public enum Credential: Sendable {
        case bearer(String)
        case basic(user: String, password: String)

        var header: String {
            switch self {
            case .bearer(let token): return "Bearer \(token)"
            case .basic(let user, let password): return "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
            }
        }
    }

    /// How an introspection whose credential and form are right is answered.
    public enum Behaviour: Sendable, Equatable {
        /// `{"active": true, "<field>": "<contact>", "sub": ...}`.
        case active
        /// `active` with `exp` (Unix seconds).
        case activeUntil(exp: Int)
        /// `{"active": false}`.
        case inactive
        /// `{"active": true}` without the contact field.
        case noContact
        /// `active` with the contact field holding this JSON number text (`12345`, `1.5`).
        case numberContact(String)
        /// This status with a small JSON body (a 5xx, a 4xx).
        case status(Int)
    }

    public let server: MockServer
    public let credential: Credential
    public let contactField: String
    private let mode = Mutex<Behaviour>(.active)
    private let tokens = Mutex<[String]>([])

    public init(credential: Credential = .bearer("introspect-test-credential"), contactField: String = "contact_id",
                latencyMillis: Int = 0, record: Bool = true, port: Int = 0, threads: Int = 2) throws {
        self.credential = credential
        self.contactField = contactField
        server = try MockServer(port: port, threads: threads, latencyMillis: latencyMillis, record: record)
        let expected = credential.header
        server.respond(as: self) { mock, request in mock.answer(request, expectedAuthorization: expected) }
    }

    public var url: String { "http://127.0.0.1:\(server.port)/internal/introspect" }
    public var port: Int { server.port }

    /// Changes how later calls are answered.
    public func behave(_ behaviour: Behaviour) { mode.withLock { $0 = behaviour } }

    /// Calls that passed the credential and form checks, in order, by token.
    public var introspected: [String] { tokens.withLock { $0 } }
    /// Every call received, well-formed or not.
    public var calls: Int { server.received.count }

    public func stop() async { await server.stop() }

    /// A loopback URL where nothing listens: an endpoint that is down.
    public static func closedURL() -> String { "http://127.0.0.1:\(Loopback.unusedPort() ?? 1)/internal/introspect" }

    /// The contact the mock vouches for `token`.
    public static func contact(of token: String) -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 3 && !parts[1].isEmpty ? String(parts[1]) : token
    }

    private func answer(_ request: HTTPRequest, expectedAuthorization: String) -> HTTPResponse {
        guard request.head.method == "POST", request.head.query.isEmpty else { return Self.json(405, #"{"error":"invalid_request"}"#) }
        guard request.head.headers["Authorization"] == expectedAuthorization else { return Self.json(401, #"{"error":"invalid_client"}"#) }
        guard let type = request.head.headers["Content-Type"], type.lowercased().hasPrefix("application/x-www-form-urlencoded"),
              let token = Self.formToken(request.body) else {
            return Self.json(400, #"{"error":"invalid_request"}"#)
        }
        tokens.withLock { $0.append(token) }
        let contact = JSONValue.string(Self.contact(of: token)).encodedString()
        switch mode.withLock({ $0 }) {
        case .active: return Self.json(200, #"{"active":true,"\#(contactField)":\#(contact),"sub":"user","scope":"push"}"#)
        case .activeUntil(let exp): return Self.json(200, #"{"active":true,"\#(contactField)":\#(contact),"exp":\#(exp)}"#)
        case .inactive: return Self.json(200, #"{"active":false}"#)
        case .noContact: return Self.json(200, #"{"active":true,"sub":"user"}"#)
        case .numberContact(let text): return Self.json(200, #"{"active":true,"\#(contactField)":\#(text)}"#)
        case .status(let status): return Self.json(status, #"{"error":"server_error"}"#)
        }
    }

    /// The token of a body that is exactly `token=<value>`, percent-decoded (`+` is a space).
    static func formToken(_ body: [UInt8]) -> String? {
        let text = String(decoding: body, as: UTF8.self)
        guard text.hasPrefix("token="), !text.contains("&") else { return nil }
        let value = text.dropFirst("token=".count).replacingOccurrences(of: "+", with: " ")
        guard let decoded = value.removingPercentEncoding, !decoded.isEmpty else { return nil }
        return decoded
    }

    static func json(_ status: Int, _ body: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: ["Content-Type": "application/json"], body: Array(body.utf8))
    }
}
