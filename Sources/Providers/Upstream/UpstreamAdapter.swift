import ClientAPI
import HTTPClient
import PWCore
import PWPolicy

/// What PushWarden asks of an upstream.
public enum UpstreamOperation: String, Sendable {
    case register, unregister, events
}

/// How a provider's answer is read: each provider says which statuses mean done, refused or
/// "try again" in its own document.
public enum UpstreamVerdict: Sendable, Equatable {
    case accepted
    /// The provider refused the content; `code` is its own error code, as it sent it, when it
    /// sent one. It is raw provider text: `UpstreamCaller` passes it through
    /// `UpstreamErrorCode.shown` before a client or a log line sees it.
    case rejected(code: String?)
    /// The provider refused the sidecar's own credential.
    case authFailed
    /// The provider refused the end user's own credential that PushWarden forwarded (Fluxer's
    /// user session): the client's problem, answered 401 (`forbidden` false) or 403, never 502.
    /// `code` is raw provider text, as for `rejected`.
    case callerRefused(forbidden: Bool, code: String?)
    /// The identity PushWarden kept for the previous token no longer names a registration the
    /// provider will act on for this caller (Voidhash's 404 on refresh): forget it and register
    /// afresh.
    case staleIdentity
    /// Worth another attempt; `afterSeconds` from `Retry-After` when sent.
    case retry(afterSeconds: Int?)
}

/// What the client's request brings besides the validated body.
public struct CallContext: Sendable {
    /// The session's contact: the only identity PushWarden trusts.
    public var contactID: String
    /// The client's request headers, for providers that take the user's own credential (Fluxer).
    /// Adapters read only the header their policy names.
    public var clientHeaders: HTTPHeaders

    public init(contactID: String, clientHeaders: HTTPHeaders = [:]) {
        self.contactID = contactID
        self.clientHeaders = clientHeaders
    }
}

/// What a provider handed back for a registration that the device would otherwise have to keep
/// (Voidhash's `pushDeviceTokenId`, Native Notify's `deviceId`), kept server-side per push token.
public struct UpstreamIdentity: Sendable, Equatable {
    public var values: [String: String]
    public init(_ values: [String: String]) { self.values = values }
    public subscript(key: String) -> String? { values[key] }
}

/// One provider's API, as its document describes it. Each provider lives in its own file under
/// `Providers/`; nothing provider-specific appears in the request path.
///
/// Adapters only check, build requests and read answers; sending, retrying, deduping and keeping
/// identities are shared.
public protocol UpstreamAdapter: Sendable {
    /// The upstream's name from the policy.
    var name: String { get }
    /// The provider this adapter speaks to; what it does with calls is its `traits`.
    var kind: ProviderKind { get }
    /// The non-secret settings that shape requests, so that a policy change forwards again.
    var settingsDigest: String { get }
    /// The end user's own credential this call would carry (Fluxer's session), for the
    /// registration's fingerprint only: the same registration under another user's session is
    /// forwarded again. Never stored, never logged; nil for providers that take none.
    func forwardedCredential(_ context: CallContext) -> String?
    /// The error codes the provider's own document lists in its error tables: the only codes of
    /// the provider's that reach a client's `upstream_code` or a log line as they are (see
    /// `UpstreamErrorCode`). No default: each provider declares its own, in its own file.
    static var documentedErrorCodes: Set<String> { get }

    /// Whether the provider takes this kind of installation at all (an APNs-only provider skips
    /// web push): false answers `skipped`, with no call.
    func accepts(_ installation: Installation) -> Bool
    /// The provider's documented rules that the contract does not already enforce; a refusal here
    /// answers the client before any upstream call.
    func validate(_ installation: Installation, context: CallContext) throws(ContractError)
    /// - Parameters:
    ///   - identity: what this provider handed back earlier for `installation.pushToken`.
    ///   - previous: the same for `installation.previousPushToken`, after a rotation.
    func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                         previous: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest
    /// What to keep once the provider accepted a registration (nil: nothing).
    func identity(after response: HTTPClientResponse, installation: Installation, current: UpstreamIdentity?,
                  previous: UpstreamIdentity?) -> UpstreamIdentity?
    /// The removal call for a token, or nil when there is nothing this provider could remove
    /// (it needs an identity PushWarden never received).
    func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) throws(ContractError) -> HTTPClientRequest?
    /// What a successful rotation does with the old token: by default it is removed. Providers
    /// whose register call already moved the registration (a refresh, `previous_token`) return nil.
    func retireRequest(previousToken: String, installation: Installation, context: CallContext,
                       identity: UpstreamIdentity?) -> HTTPClientRequest?
    /// When a registration changed what the token is registered as (the identity kept for it is
    /// not the one it had: another Native Notify device, another Fluxer platform or environment),
    /// the call that removes the registration left behind, best effort; nil when none is left.
    func supersededRequest(pushToken: String, replaced: UpstreamIdentity, by kept: UpstreamIdentity,
                           context: CallContext) -> HTTPClientRequest?
    /// The call that reports `events`; nil (the default) for a provider that takes none. Whether an
    /// upstream is sent events at all is its provider's `traits.takesEvents`, which `policy explain`
    /// shows too; the factory refuses to start when the adapter cannot build the call.
    func eventsRequest(_ events: [EngagementEvent], context: CallContext) -> HTTPClientRequest?
    func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict
    /// The answer the provider gives to a request it accepts, for `dry_run`.
    func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse
}

extension UpstreamAdapter {
    /// The provider's name (`voyado`, ...), for logs.
    public var provider: String { kind.rawValue }
    /// Whether the provider hands back an identity that later calls need (`identity(after:)`).
    /// Only then does a registration read or write the identity store.
    public var keepsIdentity: Bool { kind.traits.keepsIdentity }
    /// Whether every call carries the end user's own credential from the client's request
    /// (Fluxer): such calls cannot be made later from the outbox, since PushWarden never stores
    /// that credential.
    public var needsCallerCredential: Bool { kind.traits.needsCallerCredential }
    public var settingsDigest: String { "" }
    public func forwardedCredential(_ context: CallContext) -> String? { nil }

    public func validate(_ installation: Installation, context: CallContext) throws(ContractError) {}

    public func identity(after response: HTTPClientResponse, installation: Installation, current: UpstreamIdentity?,
                         previous: UpstreamIdentity?) -> UpstreamIdentity? { nil }

    public func retireRequest(previousToken: String, installation: Installation, context: CallContext,
                              identity: UpstreamIdentity?) -> HTTPClientRequest? {
        try? unregisterRequest(pushToken: previousToken, context: context, identity: identity)
    }

    public func supersededRequest(pushToken: String, replaced: UpstreamIdentity, by kept: UpstreamIdentity,
                                  context: CallContext) -> HTTPClientRequest? { nil }

    public func eventsRequest(_ events: [EngagementEvent], context: CallContext) -> HTTPClientRequest? { nil }

    /// The value of a `Retry-After` header given in seconds (RFC 9110 §10.2.3: digits only), HTTP
    /// dates ignored, saturated at `RetryAfter.providerCeilingSeconds` so no later arithmetic on it
    /// can overflow: a longer wait than that is "give up now" all the same.
    public func retryAfterSeconds(_ response: HTTPClientResponse) -> Int? {
        response.headers["Retry-After"].flatMap { RetryAfter.seconds(fromHeader: $0) }
    }

    /// The usual reading of an answer: 2xx done, 401/403 our credential, 408/425/429/5xx retry,
    /// anything else a refusal carrying the body's raw `code` when it had one.
    public func standardVerdict(_ response: HTTPClientResponse, code: (HTTPClientResponse) -> String? = { _ in nil }) -> UpstreamVerdict {
        switch response.status {
        case 200..<300: return .accepted
        case 401, 403: return .authFailed
        case 408, 425, 429, 500...599: return .retry(afterSeconds: retryAfterSeconds(response))
        default: return .rejected(code: code(response))
        }
    }

    /// What a client and the logs may see of this provider's raw error code.
    public func shownErrorCode(_ raw: String) -> String {
        UpstreamErrorCode.shown(raw, documented: Self.documentedErrorCodes)
    }
}

/// What of a provider's error code may be shown: its `upstream_code` in a client's answer and the
/// `upstream_code` of the log line.
///
/// A provider may echo its input in its code (a push token, a Web Push key or auth secret), and
/// no shape filter tells those from codes: a 64-hex APNs token or a base64url secret passes any
/// character class. So only the codes the provider's document lists pass as they are; anything
/// else is `unknown:` and the first 8 hex digits of its SHA-256 (the short hash the logs use for
/// tokens), enough to match an answer to the provider's own logs without revealing it.
public enum UpstreamErrorCode {
    public static func shown(_ raw: String, documented: Set<String>) -> String {
        documented.contains(raw) ? raw : "unknown:" + Redact.shortHash(raw)
    }

    /// The code of a refusal that carried none: PushWarden's own text, never the provider's.
    public static func status(_ status: Int) -> String { "http_\(status)" }
}

/// The bounds on waits that come from outside: a provider's `Retry-After` is saturated before any
/// arithmetic, and the one PushWarden hands its own client is capped.
public enum RetryAfter {
    /// A provider's wait is taken up to a day; beyond any request's budget either way.
    public static let providerCeilingSeconds = 86_400
    /// The longest `Retry-After` PushWarden sends a client: an hour, whatever a provider asked.
    public static let clientCeilingSeconds = 3_600

    /// Digits only, optional surrounding spaces; more than the ceiling saturates to it.
    public static func seconds(fromHeader raw: String) -> Int? {
        let digits = raw.trimmingSpaces()
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        var value = 0
        for byte in digits.utf8 {
            value = value * 10 + Int(byte - 0x30)
            if value >= providerCeilingSeconds { return providerCeilingSeconds }
        }
        return value
    }

    /// What the client is told: at least a second, at most `clientCeilingSeconds`.
    public static func forClient(_ seconds: Int) -> Int {
        min(max(1, seconds), clientCeilingSeconds)
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

/// JSON request helpers every provider uses.
public enum UpstreamJSON {
    /// A JSON request with the given headers plus `Content-Type` and `Accept`.
    public static func request(_ method: String, _ url: String, headers: HTTPHeaders, body: JSONValue?) -> HTTPClientRequest {
        var all = headers
        if body != nil { all.add("Content-Type", "application/json") }
        all.add("Accept", "application/json")
        return HTTPClientRequest(method: method, url: url, headers: all, body: body?.encoded() ?? [])
    }

    /// `{"error": {"code": "..."}}` → the code, when short and present. Raw provider text: it is
    /// shown only through `UpstreamErrorCode.shown`.
    public static func errorCode(_ body: [UInt8]) -> String? {
        guard let code = (try? JSONValue.parse(body))?.objectValue?["error"]?.objectValue?["code"]?.stringValue,
              !code.isEmpty, code.count <= 64 else { return nil }
        return code
    }
}
