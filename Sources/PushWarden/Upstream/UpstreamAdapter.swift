import ClientAPI
import HTTPClient
import PWCore

/// What PushWarden asks of an upstream.
public enum UpstreamOperation: String, Sendable {
    case register, unregister, events
}

/// How a provider's answer is read: each provider says which statuses mean done, refused or
/// "try again" in its own document.
public enum UpstreamVerdict: Sendable, Equatable {
    case accepted
    /// The provider refused the content; `code` is its own error code when it sent one.
    case rejected(code: String?)
    /// The provider refused the sidecar's own credential.
    case authFailed
    /// Worth another attempt; `afterSeconds` from `Retry-After` when sent.
    case retry(afterSeconds: Int?)
}

/// One provider's API, as its document describes it. Each provider lives in its own file under
/// `Providers/`; nothing provider-specific appears in the request path.
///
/// Adapters only build requests and read answers; sending, retrying and deduping are shared.
public protocol UpstreamAdapter: Sendable {
    /// The upstream's name from the policy.
    var name: String { get }
    /// The provider's name (`voyado`, ...), for logs and `policy explain`.
    var provider: String { get }
    /// Whether the provider takes engagement events.
    var acceptsEvents: Bool { get }

    /// Whether the provider takes this kind of installation at all (an APNs-only provider
    /// skips web push).
    func accepts(_ installation: Installation) -> Bool
    func registerRequest(_ installation: Installation, contactID: String) -> HTTPClientRequest
    func unregisterRequest(pushToken: String) -> HTTPClientRequest
    func eventsRequest(_ events: [EngagementEvent], contactID: String) -> HTTPClientRequest
    func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict
    /// The answer the provider gives to a request it accepts, for `dry_run`.
    func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse
}

extension UpstreamAdapter {
    /// The value of a `Retry-After` header given in seconds; HTTP dates are ignored.
    public func retryAfterSeconds(_ response: HTTPClientResponse) -> Int? {
        guard let raw = response.headers["Retry-After"], let seconds = Int(raw.trimmingSpaces()), seconds >= 0 else { return nil }
        return seconds
    }
}

extension String {
    func trimmingSpaces() -> Substring {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return s
    }
}
