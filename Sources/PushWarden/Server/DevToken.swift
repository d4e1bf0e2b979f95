import PWCore
import PWPolicy
import Registration
import SessionAuth

/// Mints session tokens for local trials (`pushwarden dev-token`), only for apps whose sessions
/// use an HMAC secret: a production app verifying RS256/ES256 keys has no signing key here.
public enum DevToken {
    public static func mint(session: SessionPolicy, contactID: String, ttlSeconds: Int,
                            secrets: some SecretResolving = SecretResolver(), clock: some WallClock = SystemClock()) throws(ConfigurationError) -> String {
        guard case .hmacSecret(let ref) = session.keys, session.algorithms.contains(.hs256) else {
            throw ConfigurationError("dev-token works only for apps whose session uses hmac_secret with HS256")
        }
        let secret: [UInt8]
        do {
            secret = try secrets.resolve(ref)
        } catch {
            throw ConfigurationError(error.description)
        }
        let now = Int(clock.now())
        var claims = JSONObject([
            JSONMember(session.contactClaim, .string(contactID)),
            JSONMember("iat", .number(String(now))),
            JSONMember("exp", .number(String(now + ttlSeconds))),
        ])
        if session.contactClaim != "sub" { claims["sub"] = .string(contactID) }
        if let issuer = session.issuer { claims["iss"] = .string(issuer) }
        if let audience = session.audience { claims["aud"] = .string(audience) }
        return JWTMinter.mintHS256(claims: claims, secret: secret)
    }
}
