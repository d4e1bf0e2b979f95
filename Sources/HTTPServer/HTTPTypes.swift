import Loops
import PWCore

/// What the server knows about a request once its head (request line and header block) is in.
public struct HTTPRequestHead: Sendable {
    public var method: String
    /// The request-target's path exactly as sent: not percent-decoded, without the query.
    public var path: String
    /// The raw query after `?`, not decoded; empty when there is none.
    public var query: String
    public var headers: HTTPHeaders
    /// The peer's IP address (IPv4 dotted or IPv6 text form), without the port.
    public var remoteAddress: String

    public init(method: String, path: String, query: String = "", headers: HTTPHeaders = [:], remoteAddress: String = "") {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.remoteAddress = remoteAddress
    }
}

public struct HTTPRequest: Sendable {
    public var head: HTTPRequestHead
    public var body: [UInt8]
    /// What the handler's `decide` resolved from the head (`HeadDecision.readBody(limit:context:)`),
    /// carried with the request so that nothing is resolved twice.
    public var context: (any Sendable)?

    public init(head: HTTPRequestHead, body: [UInt8] = [], context: (any Sendable)? = nil) {
        self.head = head
        self.body = body
        self.context = context
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    /// Sent as given; `Content-Length` and `Date` are set by the server. A `Connection: close`
    /// field makes the server close the connection after this response.
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(status: Int, headers: HTTPHeaders = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// The handler's verdict on a request head, taken before any body byte is read, so that
/// unknown routes, wrong methods or media types never cost the server a body read.
public enum HeadDecision: Sendable {
    /// Read the body, refusing it with `payloadTooLarge` once it is known to exceed `limit` bytes.
    /// `context` (what the handler resolved from the head: a route, an app) comes back with the
    /// request and with `payloadTooLarge`.
    case readBody(limit: Int, context: (any Sendable)? = nil)
    /// Answer now; the body (if any) is not read and the connection is closed after the answer
    /// when a body was announced.
    case respond(HTTPResponse)
}

/// The application side of `HTTPServer`. Implementations must be thread-safe: every method is
/// called concurrently from the server's loops.
public protocol HTTPHandler: Sendable {
    /// Called on the connection's loop once the request head is complete, before any body byte
    /// is read. Must not block.
    func decide(_ head: HTTPRequestHead) -> HeadDecision
    /// The 413 response for a body over the limit (sent with Connection: close); `context` is
    /// what `decide` gave with `readBody`.
    func payloadTooLarge(_ head: HTTPRequestHead, context: (any Sendable)?) -> HTTPResponse
    /// The response to a request the server refuses before `decide` (sent with Connection:
    /// close, the connection then closed): `refusal.status` with its message. `head` is what was
    /// parsed, headers included. The default is a plain-text body.
    func refuse(_ head: HTTPRequestHead, _ refusal: HTTPRefusal) -> HTTPResponse
    /// Starts handling a complete request on the loop that read it. Answer through `responder`
    /// exactly once, from any thread: before returning when the answer is at hand (the cheapest
    /// case: the connection is never suspended), or later. Must not block the loop.
    func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder)
}

extension HTTPHandler {
    public func refuse(_ head: HTTPRequestHead, _ refusal: HTTPRefusal) -> HTTPResponse {
        HTTPResponse(status: refusal.status, headers: ["Content-Type": "text/plain"], body: Array((refusal.message + "\n").utf8))
    }
}

/// A handler that answers on Swift concurrency: `start` runs `handle` in a task; the connection
/// is suspended meanwhile (holds no thread).
public protocol AsyncHTTPHandler: HTTPHandler {
    func handle(_ request: HTTPRequest) async -> HTTPResponse
}

extension AsyncHTTPHandler {
    public func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder) {
        Task { responder.respond(await handle(request)) }
    }
}

/// Where a handler sends its one answer to a request. Thread-safe; the first answer wins and
/// later ones are dropped (as is any answer to a request the server already cut off).
public final class HTTPResponder: Sendable {
    private let context: RequestContext

    init(_ context: RequestContext) { self.context = context }

    public func respond(_ response: HTTPResponse) {
        context.respond(response)
    }
}

public struct HTTPServerError: Error, Sendable, CustomStringConvertible {
    public var message: String

    public init(message: String) { self.message = message }

    public var description: String { "HTTPServerError: \(message)" }
}

/// Why the server refused a request before its handler saw it: a head that a proxy in front
/// could read differently (framing, syntax). Such a request is answered with the handler's
/// `refuse` response and the connection is closed.
public struct HTTPRefusal: Sendable, Equatable {
    public enum Reason: String, Sendable {
        /// Line endings other than CRLF, obs-fold, a bad field name or value, a bad request line.
        case malformedHead
        /// Both Content-Length and Transfer-Encoding, Content-Lengths that disagree, or `chunked`
        /// with trailing white space (which MHD would not frame as chunked).
        case conflictingFraming
        /// A Transfer-Encoding other than exactly `chunked` (answered 501).
        case unsupportedTransferEncoding
        /// No Host in an HTTP/1.1 request, or more than one.
        case badHost
    }

    public var reason: Reason
    /// 400, or 501 for an unsupported transfer coding.
    public var status: Int
    /// Says what was wrong without echoing the request; safe to show the client.
    public var message: String

    public init(_ reason: Reason, status: Int = 400, _ message: String) {
        self.reason = reason
        self.status = status
        self.message = message
    }
}
