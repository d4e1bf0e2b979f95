import PWCore
import PWCrypto

/// Mints compact JWS tokens: for `pushwarden dev-token` and for tests. The sidecar never mints.
public enum JWTMinter {
    public static func mintHS256(claims: JSONObject, secret: [UInt8], kid: String? = nil) -> String {
        let input = signingInput(alg: "HS256", kid: kid, claims: claims)
        return input + "." + Base64URL.encode(HMACSHA256.mac(key: secret, message: input.utf8))
    }

    public static func mintRS256(claims: JSONObject, key: PrivateKey, kid: String? = nil) throws(CryptoError) -> String {
        let input = signingInput(alg: "RS256", kid: kid, claims: claims)
        return input + "." + Base64URL.encode(try key.signRS256(message: input.utf8))
    }

    public static func mintES256(claims: JSONObject, key: PrivateKey, kid: String? = nil) throws(CryptoError) -> String {
        let input = signingInput(alg: "ES256", kid: kid, claims: claims)
        return input + "." + Base64URL.encode(try key.signES256(message: input.utf8))
    }

    /// `base64url(header) "." base64url(claims)`: the bytes a JWS signature covers.
    public static func signingInput(header: JSONObject, claims: JSONObject) -> String {
        Base64URL.encode(JSONValue.object(header).encoded()) + "." + Base64URL.encode(JSONValue.object(claims).encoded())
    }

    private static func signingInput(alg: String, kid: String?, claims: JSONObject) -> String {
        var header = JSONObject([JSONMember("alg", .string(alg)), JSONMember("typ", "JWT")])
        if let kid { header["kid"] = .string(kid) }
        return signingInput(header: header, claims: claims)
    }
}
