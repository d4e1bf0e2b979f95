import PWCore

/// Why one operation at one upstream did not succeed. Inside PushWarden failures are this enum;
/// only the edge renders one as the contract's error (`contractError`), so no internal signal
/// ever travels as text a client also sees.
public enum UpstreamFailure: Error, Sendable, Equatable {
    /// Refused before any call: the provider's own documented rules, or a request that could not
    /// be built (the user's own credential missing, say).
    case refusedBeforeCall(ContractError)
    /// The provider refused the content with `status`; `code` is what may be shown of its code
    /// (documented, else hashed: `UpstreamErrorCode`).
    case rejected(upstream: String, status: Int, code: String)
    /// The provider refused PushWarden's own credential: an operator problem.
    case credentialRefused(upstream: String, status: Int)
    /// The provider refused the end user's own credential that PushWarden forwarded (Fluxer).
    case callerRefused(upstream: String, forbidden: Bool, code: String?)
    /// The identity kept for the previous token names no registration the provider will act on
    /// for this caller (Voidhash's 404 on refresh): register afresh without it.
    case staleIdentity(upstream: String)
    /// Unreachable or failing after every attempt the budget allowed; `retryAfterSeconds` is
    /// what the client is told.
    case unavailable(upstream: String, retryAfterSeconds: Int)

    /// The contract's error for the client's answer.
    public var contractError: ContractError {
        switch self {
        case .refusedBeforeCall(let error):
            return error
        case .rejected(let upstream, _, let code):
            return ContractError(.upstreamRejected, "\(upstream) refused the request", upstreamCode: code)
        case .credentialRefused:
            return ContractError(.upstreamAuthFailed, "the push provider refused this service's credential")
        case .callerRefused(_, let forbidden, let code):
            return ContractError(forbidden ? .forbidden : .unauthorized,
                                 forbidden ? "the push provider refused this user's session" : "the push provider did not accept this user's session",
                                 upstreamCode: code)
        case .staleIdentity(let upstream):
            return ContractError(.upstreamRejected, "\(upstream) no longer knows the previous registration")
        case .unavailable(let upstream, let retryAfter):
            return ContractError(.upstreamUnavailable, "\(upstream) is unavailable; try again later", retryAfter: retryAfter)
        }
    }

    /// The failure's contract code, for logs and metrics.
    public var code: ErrorCode { contractError.code }
}
