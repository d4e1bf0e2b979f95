import PWCore
import PWCrypto
import PWPolicy

/// A logout token (OpenID Connect Back-Channel Logout 1.0) that passed every check of its
/// section 2.6 but the replay check, which needs the store: the caller keeps `jti` until
/// `rememberUntil`.
public struct LogoutToken: Sendable, Equatable {
    /// `sub`, when the token carries it.
    public var subject: String?
    /// `sid`, when the token carries it: the session at the identity provider.
    public var sessionID: String?
    /// The contact the token names by the session's `contact_claim` (with the default `sub`, its
    /// `sub`), when it carries that claim.
    public var contactID: String?
    public var jti: String
    /// Seconds since the epoch until which `jti` must be refused again: past it, the token's `iat`
    /// is out of the window this verifier accepts.
    public var rememberUntil: Double
}

extension SessionVerifier {
    /// The member of `events` that makes a JWT a logout token.
    public static let logoutEvent = "http://schemas.openid.net/event/backchannel-logout"
    /// How long a `jti` is kept at least, from the token's `iat`.
    public static let jtiMemorySeconds: Double = 600
    /// Longest `sid` or `jti` accepted, in bytes.
    public static let maxLogoutIDBytes = 256

    /// Verifies a logout token with this app's session keys and algorithms: structure, header
    /// (typed `logout+jwt` or `JWT`, or untyped), signature, then the claims. The verified
    /// sessions are not consulted: every logout token is verified whole.
    public func verifyLogout(token: String) -> Result<LogoutToken, AuthFailure> {
        var token = token
        return token.withUTF8 { bytes -> Result<LogoutToken, AuthFailure> in
            guard bytes.count <= Self.maxTokenBytes else { return .failure(AuthFailure("token longer than \(Self.maxTokenBytes) bytes")) }
            return signedClaims(bytes, headers: logoutHeaders).flatMap(checkLogout)
        }
    }

    /// Section 2.6, steps 3 to 8 (the replay check is the caller's): `iss` and `aud` as the
    /// session's, `iat` within the leeway of now, `exp` (when present) not passed, a `jti`, the
    /// back-channel logout event, `sid` or `sub`, no `nonce`.
    func checkLogout(_ claims: JSONObject) -> Result<LogoutToken, AuthFailure> {
        func fail(_ reason: String) -> Result<LogoutToken, AuthFailure> { .failure(AuthFailure(reason)) }
        // The policy loader requires both with back-channel logout; a token must name them anyway.
        guard claims["iss"]?.stringValue != nil else { return fail("missing iss") }
        guard claims["aud"] != nil else { return fail("missing aud") }
        if let failure = issuerAndAudience(claims) { return .failure(failure) }

        let now = clock.now()
        let leeway = Double(policy.leewaySeconds)
        let issuedAt: Double
        switch NumericDate(claims["iat"]) {
        case .absent: return fail("missing iat")
        case .invalid: return fail("iat is not a number")
        case .value(let iat):
            guard iat <= now + leeway else { return fail("issued in the future (iat)") }
            guard iat >= now - leeway else { return fail("issued too long ago (iat beyond the leeway)") }
            issuedAt = iat
        }
        switch NumericDate(claims["exp"]) {
        case .absent: break
        case .invalid: return fail("exp is not a number")
        case .value(let exp): guard now < exp + leeway else { return fail("expired") }
        }
        guard claims["nonce"] == nil else { return fail("a logout token must not carry nonce") }
        guard case .object(let events)? = claims["events"] else { return fail("missing events object") }
        guard case .object? = events[Self.logoutEvent] else { return fail("events has no back-channel logout member holding an object") }
        guard let jti = claims["jti"]?.stringValue, Self.logoutID(jti) else { return fail("missing or malformed jti") }

        var sessionID: String?
        if let value = claims["sid"] {
            guard let sid = Self.sessionID(value) else { return fail("malformed sid") }
            sessionID = sid
        }
        var subject: String?
        if let value = claims["sub"] {
            guard let sub = value.stringValue, !sub.isEmpty else { return fail("sub is not a non-empty string") }
            subject = sub
        }
        guard sessionID != nil || subject != nil else { return fail("neither sid nor sub") }
        var contactID: String?
        if let value = claims[policy.contactClaim] {
            switch Self.contactID(value, named: "contact claim \(policy.contactClaim)") {
            case .success(let contact): contactID = contact
            case .failure(let failure): return .failure(failure)
            }
        }
        // Past iat + leeway the token is refused by its iat; until then its jti must stay known.
        let rememberUntil = issuedAt + max(Self.jtiMemorySeconds, leeway)
        return .success(LogoutToken(subject: subject, sessionID: sessionID, contactID: contactID, jti: jti, rememberUntil: rememberUntil))
    }

    /// A session id as kept: a string of 1 to `maxLogoutIDBytes` bytes with no control or
    /// invisible formatting character; anything else is no session id.
    static func sessionID(_ value: JSONValue) -> String? {
        guard let text = value.stringValue, logoutID(text) else { return nil }
        return text
    }

    private static func logoutID(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= maxLogoutIDBytes && TextRules.firstForbidden(in: text) == nil
    }
}
