/// The error codes of the client API (docs/api.md).
///
/// Every refusal PushWarden sends carries exactly one of these, and the HTTP status is a function
/// of the code: callers never pick a status by hand.
public enum ErrorCode: String, Sendable, CaseIterable, Hashable {
    case invalidJSON = "invalid_json"
    case invalidRequest = "invalid_request"
    case invalidPlatform = "invalid_platform"
    case invalidTokenFormat = "invalid_token_format"
    case tokenPlatformMismatch = "token_platform_mismatch"
    case unsupportedTokenType = "unsupported_token_type"
    case invalidWebPush = "invalid_web_push"
    case urlNotPubliclyRoutable = "url_not_publicly_routable"
    case invalidEvent = "invalid_event"
    case invalidEventType = "invalid_event_type"
    case unknownField = "unknown_field"
    /// A dead-token report whose reason is not evidence that the token is dead (per report only).
    case invalidReason = "invalid_reason"
    case unauthorized
    case contactMismatch = "contact_mismatch"
    case forbidden
    case notFound = "not_found"
    case methodNotAllowed = "method_not_allowed"
    case payloadTooLarge = "payload_too_large"
    case unsupportedMediaType = "unsupported_media_type"
    case upstreamRejected = "upstream_rejected"
    case rateLimited = "rate_limited"
    case upstreamAuthFailed = "upstream_auth_failed"
    case upstreamUnavailable = "upstream_unavailable"
    /// The store (Redis) did not answer an operation that cannot proceed without it (the
    /// server-to-server API's list and erase): try again after `Retry-After`.
    case storeUnavailable = "store_unavailable"
    /// The app's introspection endpoint (or JWKS) could not answer and nothing cached could.
    case authUnavailable = "auth_unavailable"
    case `internal`

    /// The HTTP status the contract assigns to this code.
    public var status: Int {
        switch self {
        case .invalidJSON, .invalidRequest, .invalidPlatform, .invalidTokenFormat, .tokenPlatformMismatch,
             .unsupportedTokenType, .invalidWebPush, .urlNotPubliclyRoutable, .invalidEvent,
             .invalidEventType, .unknownField, .invalidReason:
            return 400
        case .unauthorized: return 401
        case .contactMismatch, .forbidden: return 403
        case .notFound: return 404
        case .methodNotAllowed: return 405
        case .payloadTooLarge: return 413
        case .unsupportedMediaType: return 415
        case .upstreamRejected: return 422
        case .rateLimited: return 429
        case .upstreamAuthFailed: return 502
        case .upstreamUnavailable, .storeUnavailable, .authUnavailable: return 503
        case .internal: return 500
        }
    }
}

/// A refusal as the client sees it: the contract's code, a human message, and optionally the
/// offending field (`events[3].occurred_at`), the provider's own code and a retry hint.
///
/// - Important: `message` is shown to clients. Never put a token, a key, C library error text or
///   anything that helps an attacker into it; log those separately.
public struct ContractError: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    public var field: String?
    public var upstreamCode: String?
    /// Seconds, sent as `Retry-After` with 429 and 503.
    public var retryAfter: Int?

    public init(_ code: ErrorCode, _ message: String, field: String? = nil, upstreamCode: String? = nil, retryAfter: Int? = nil) {
        self.code = code
        self.message = message
        self.field = field
        self.upstreamCode = upstreamCode
        self.retryAfter = retryAfter
    }

    public var status: Int { code.status }

    /// The contract's envelope: `{"error": {"code", "message", "field"?, "upstream_code"?, "request_id"}}`.
    public func envelope(requestID: String) -> [UInt8] {
        var members: [JSONMember] = [
            JSONMember("code", .string(code.rawValue)),
            JSONMember("message", .string(message)),
        ]
        if let field { members.append(JSONMember("field", .string(field))) }
        if let upstreamCode { members.append(JSONMember("upstream_code", .string(upstreamCode))) }
        members.append(JSONMember("request_id", .string(requestID)))
        return JSONValue.object(JSONObject([JSONMember("error", .object(JSONObject(members)))])).encoded()
    }
}
