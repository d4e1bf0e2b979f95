import Loops
import PWCore
import SessionAuth

/// How one app authenticates a request's session, as its policy's `session.type` says.
///
/// `check` runs on the request's loop and decides at once whenever it can: always for a JWT,
/// and for an introspected token whose answer is cached. Only an introspection cache miss
/// is a `lookUp`, which calls the endpoint and continues the request when the answer arrives.
package enum SessionAuthenticator: Sendable {
    case jwt(SessionVerifier)
    case introspect(Introspector)

    package func check(_ headers: HTTPHeaders) -> SessionCheck {
        switch self {
        case .jwt(let verifier):
            return .decided(verifier.authenticate(headers).mapError(SessionRefusal.refused))
        case .introspect(let introspector):
            return introspector.check(headers)
        }
    }
}

/// Why a request has no session.
package enum SessionRefusal: Error, Sendable {
    /// No valid session: `401 unauthorized`.
    case refused(AuthFailure)
    /// The introspection endpoint could not answer and nothing cached could: `503 auth_unavailable`.
    case unavailable(reason: String)
}

/// A session check's result: decided now, or after a call to the introspection endpoint.
package enum SessionCheck: Sendable {
    case decided(Result<Session, SessionRefusal>)
    case lookUp(IntrospectionLookup)
}

/// An introspection cache miss for one token, ready to be looked up.
package struct IntrospectionLookup: Sendable {
    let introspector: Introspector
    let token: String
    let key: IntrospectionCache.Key

    /// Calls `done` on `loop` with the session: at once when the answer arrived meanwhile,
    /// else when the endpoint answers (one call however many requests wait for this token).
    package func run(on loop: EventLoop, _ done: @escaping @Sendable (Result<Session, SessionRefusal>) -> Void) {
        introspector.lookUp(token, key: key, on: loop, done)
    }
}

extension IntrospectionAnswer {
    /// The answer as a session check's result.
    var sessionResult: Result<Session, SessionRefusal> {
        switch self {
        case .active(let session): return .success(session)
        case .refused(let failure): return .failure(.refused(failure))
        case .unavailable(let reason): return .failure(.unavailable(reason: reason))
        }
    }
}
