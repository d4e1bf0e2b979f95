import PWCore
import PWCrypto

// JWK (RFC 7517/7518) lives here rather than in PWCrypto because PWCrypto depends on COpenSSL
// only and has no JSON type; the API is the same as if it were declared there.

extension PublicKey {
    /// A verification key from a JWK: `kty` `RSA` (`n`, `e`) or `kty` `EC` with `crv` `P-256`
    /// (`x`, `y`). Members are unpadded base64url; other members (`use`, `alg`, `kid`) are the
    /// caller's to judge.
    ///
    /// - Throws: `CryptoError` for a missing or malformed member, an RSA modulus under 2048 bits,
    ///   or an EC point that is not on P-256.
    public convenience init(jwk: JSONObject) throws(CryptoError) {
        guard let kty = jwk["kty"]?.stringValue else { throw CryptoError("JWK has no kty string") }
        switch kty {
        case "RSA":
            let n = try Self.member(jwk, "n")
            let e = try Self.member(jwk, "e")
            try self.init(rsaModulus: n, exponent: e)
        case "EC":
            guard let crv = jwk["crv"]?.stringValue else { throw CryptoError("EC JWK has no crv string") }
            guard crv == "P-256" else { throw CryptoError("EC JWK curve \(crv) is not P-256") }
            let x = try Self.member(jwk, "x")
            let y = try Self.member(jwk, "y")
            try self.init(p256X: x, y: y)
        default:
            throw CryptoError("JWK kty \(kty) is not RSA or EC")
        }
    }

    private static func member(_ jwk: JSONObject, _ name: String) throws(CryptoError) -> [UInt8] {
        guard let text = jwk[name]?.stringValue else { throw CryptoError("JWK member \(name) is missing or not a string") }
        guard !text.utf8.contains(UInt8(ascii: "=")), let bytes = Base64URL.decode(text), !bytes.isEmpty else {
            throw CryptoError("JWK member \(name) is not unpadded base64url")
        }
        return bytes
    }

    /// This key as a JWK with `use` `sig` and the one algorithm PushWarden uses it for.
    public func jwk(kid: String? = nil) -> JSONObject {
        var members: [JSONMember]
        switch components {
        case .rsa(let modulus, let exponent):
            members = [
                JSONMember("kty", "RSA"),
                JSONMember("n", .string(Base64URL.encode(modulus))),
                JSONMember("e", .string(Base64URL.encode(exponent))),
                JSONMember("alg", "RS256"),
            ]
        case .ecP256(let x, let y):
            members = [
                JSONMember("kty", "EC"),
                JSONMember("crv", "P-256"),
                JSONMember("x", .string(Base64URL.encode(x))),
                JSONMember("y", .string(Base64URL.encode(y))),
                JSONMember("alg", "ES256"),
            ]
        }
        members.append(JSONMember("use", "sig"))
        if let kid { members.append(JSONMember("kid", .string(kid))) }
        return JSONObject(members)
    }
}

extension PrivateKey {
    /// The public half as a JWK, for a JWKS file that a verifier loads.
    public func publicKeyJWK(kid: String? = nil) -> JSONObject { publicKey.jwk(kid: kid) }
}
