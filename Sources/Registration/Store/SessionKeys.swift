import PWCore

/// The keys a back-channel logout shares across replicas, each under its own hash tag and named by
/// `KeyDigest` (never the raw session id or token id).
extension KeyDigest {
    /// `pw:v2:{s:<digest>}:sid`: which contact registered under a session at the identity
    /// provider (the contact's digest), for a logout token that names only its `sid`.
    public func session(_ sessionID: String, app: String) -> String { "pw:v2:{s:" + hex(app, "sid", sessionID) + "}:sid" }

    /// `pw:v2:{s:<digest>}:out`: present once a back-channel logout ended the session; a
    /// registration under it is refused.
    public func loggedOutSession(_ sessionID: String, app: String) -> String { "pw:v2:{s:" + hex(app, "sid", sessionID) + "}:out" }

    /// `pw:v2:{j:<digest>}:jti`: a logout token already used, kept until its `iat` is out of the
    /// accepted window.
    public func logoutToken(_ jti: String, app: String) -> String { "pw:v2:{j:" + hex(app, "jti", jti) + "}:jti" }
}
