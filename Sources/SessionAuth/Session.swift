import PWCore

/// An authenticated app session: who the request acts for.
public struct Session: Sendable, Equatable {
    /// The server-side contact id, from the policy's `contact_claim`.
    public var contactID: String
    /// The token's `sub`, when it is a string.
    public var subject: String?
    /// The token's `exp` (seconds since the Unix epoch).
    public var expiresAt: Double?
    /// The session at the identity provider (the claim `backchannel_logout.sid_claim` names), kept
    /// with each registration so a back-channel logout finds it; nil without that policy or claim.
    public var sessionID: String?

    public init(contactID: String, subject: String? = nil, expiresAt: Double? = nil, sessionID: String? = nil) {
        self.contactID = contactID
        self.subject = subject
        self.expiresAt = expiresAt
        self.sessionID = sessionID
    }
}

/// Why a session was refused.
///
/// - Important: `reason` is for the operator's log only ("signature mismatch", "expired",
///   "unknown kid"). A client always gets the same `401 unauthorized` (`contractError`), so a
///   refusal teaches an attacker nothing. Reasons never contain the token, nor any value the
///   client chose (a `kid`, an unknown `alg`, a claim): those appear as `SessionVerifier.echo`
///   shows them, a short hash.
public struct AuthFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    /// The reason without the client's value in it ("unknown kid"): what log bounds key on, so
    /// that a client varying the value cannot earn a line per value.
    public var kind: String

    public init(_ reason: String, kind: String? = nil) {
        self.reason = reason
        self.kind = kind ?? reason
    }

    public var description: String { reason }

    /// What the client sees, whatever the reason.
    public var contractError: ContractError { ContractError(.unauthorized, "missing or invalid session") }
}

/// A session configuration that cannot work: unreadable JWKS, duplicate `kid`, weak HMAC secret,
/// algorithms without keys. The sidecar refuses to start on it.
public struct SessionConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }
}
