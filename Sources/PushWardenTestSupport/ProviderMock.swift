import HTTPServer
import PWPolicy

/// A mock push provider: a `MockServer` answering as the provider's own API document says,
/// recording what it received and playing scripted answers first. What every mock offers on top
/// of its server lives here; each mock adds its document's behaviour and state.
public protocol ProviderMock: AnyObject, Sendable {
    /// The provider whose document the mock follows: one mock per `ProviderKind`.
    static var kind: ProviderKind { get }
    /// The server behind the mock (records requests, plays scripted answers).
    var server: MockServer { get }
}

extension ProviderMock {
    public var port: Int { server.port }
    /// The origin to put in a policy (`base_url`).
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    public var received: [MockRequest] { server.received }
    /// The requests whose path ends with `suffix`.
    public func received(path suffix: String) -> [MockRequest] { server.received(path: suffix) }
    /// Answers to give, in order, before the documented behaviour.
    public func enqueue(_ answers: MockAnswer...) { server.enqueue(answers) }
    public func stop() async { await server.stop() }
}

extension MockServer {
    /// Answers every request with `documented` applied to `owner` while `owner` lives (503 once it
    /// is gone), without the server keeping its owner alive.
    public func respond<Owner: AnyObject & Sendable>(as owner: Owner,
                                                     _ documented: @escaping @Sendable (Owner, HTTPRequest) -> HTTPResponse) {
        respond { [weak owner] request in owner.map { documented($0, request) } ?? HTTPResponse(status: 503) }
    }
}
