import PWCore
import PWCrypto
import PWPolicy

/// A JWKS document (RFC 7517, section 5) judged by the one set of rules that `serve` (through
/// `SessionVerifier`) and `pushwarden policy check` (through `SessionPolicyCheck`) both apply, so
/// a file one of them refuses the other refuses too.
///
/// Refused (the whole file; `serve` does not start):
/// - a file that cannot be read, is not JSON, or is not an object with a `keys` array;
/// - an entry that is not an object, or whose `kid` is not a string;
/// - an entry meant for RS256/ES256 that is not a sound key: a member missing or not unpadded
///   base64url, an RSA modulus under 2048 (or over 16384) bits, an RSA public exponent that is
///   not a small odd number above 1, an EC point that is not on P-256 (`PublicKey` judges these);
/// - two such keys with the same `kid` (Swift string equality, so canonically equivalent kids
///   count as the same; a token's kid then selects a key by its exact bytes);
/// - no key usable with any of the policy's algorithms.
///
/// Skipped (named as a warning; never used for anything): entries holding private key material
/// (`d`), `kty` other than `RSA` and `EC` (`oct`, `OKP`), EC curves other than P-256 (P-384,
/// secp256k1), `use` other than `sig`, `key_ops` without `verify`, an `alg` that does not match
/// the key type.
public struct JWKSet: Sendable {
    public struct Key: Sendable {
        public let kid: String?
        public let key: PublicKey
    }

    /// An entry that is not used, and why.
    public struct Skipped: Sendable, Equatable, CustomStringConvertible {
        /// Its position in the `keys` array.
        public let index: Int
        public let kid: String?
        public let reason: String

        /// `keys[2] (kid "hmac-1")`, the kid JSON-quoted so no kid can forge a log or output line.
        public var name: String { JWKSet.name(index: index, kid: kid) }
        public var description: String { "\(name): \(reason)" }
    }

    /// Keys for RS256 and for ES256, in file order.
    public let rsa: [Key]
    public let ec: [Key]
    public let skipped: [Skipped]

    /// Reads the file at `path` with `reader` and judges it for a policy allowing `algorithms`.
    public static func load(path: String, algorithms: [JWTAlgorithm], reader: (String) throws -> [UInt8]) throws(JWKSError) -> JWKSet {
        let bytes: [UInt8]
        do { bytes = try reader(path) } catch {
            throw JWKSError("cannot be read (\(error))")
        }
        return try JWKSet(json: bytes, algorithms: algorithms)
    }

    /// Whose document it is, which decides what an unsound entry costs.
    public enum Origin: Sendable {
        /// An operator's file: an unsound entry refuses the whole file (`serve` does not start).
        case file
        /// An identity provider's answer at `jwks_url`: PushWarden cannot fix it, and one bad entry
        /// must not take the provider's good keys away, so an unsound entry (not an object, `kid`
        /// not a string, a malformed or weak key, a repeated `kid`) is skipped with its reason
        /// like a key of the wrong type. Not JSON, no `keys` array or no usable key still refuses it.
        case fetched
    }

    /// Parses and judges a JWKS document for a policy allowing `algorithms`.
    public init(json bytes: [UInt8], algorithms: [JWTAlgorithm], origin: Origin = .file) throws(JWKSError) {
        let document: JSONValue
        do { document = try JSONValue.parse(bytes) } catch {
            throw JWKSError("not JSON (\(error.message) at byte \(error.offset))")
        }
        guard let entries = document.objectValue?["keys"]?.arrayValue else {
            throw JWKSError("expected an object with a \"keys\" array")
        }
        var rsa: [Key] = []
        var ec: [Key] = []
        var skipped: [Skipped] = []
        var kids: Set<String> = []
        for (index, entry) in entries.enumerated() {
            /// Refuses a file; skips the entry of a fetched document.
            func unsound(_ kid: String?, _ reason: String, _ refusal: String) throws(JWKSError) {
                guard origin == .fetched else { throw JWKSError(refusal) }
                skipped.append(Skipped(index: index, kid: kid, reason: reason))
            }
            guard let jwk = entry.objectValue else {
                try unsound(nil, "not an object", "keys[\(index)] is not an object")
                continue
            }
            let kid: String?
            switch jwk["kid"] {
            case nil: kid = nil
            case .string(let s)?: kid = s
            case let other?:
                try unsound(nil, "kid is \(other.typeName), not a string", "keys[\(index)]: kid is \(other.typeName), not a string")
                continue
            }
            if let reason = Self.skipReason(jwk) {
                skipped.append(Skipped(index: index, kid: kid, reason: reason))
                continue
            }
            let name = Self.name(index: index, kid: kid)
            let key: PublicKey
            do { key = try PublicKey(jwk: jwk) } catch {
                try unsound(kid, error.message, "\(name): \(error.message)")
                continue
            }
            if let kid, !kids.insert(kid).inserted {
                try unsound(kid, "duplicate kid", "\(name): duplicate kid")
                continue
            }
            switch key.kind {
            case .rsa: rsa.append(Key(kid: kid, key: key))
            case .ecP256: ec.append(Key(kid: kid, key: key))
            }
        }
        let usable = (algorithms.contains(.rs256) ? rsa.count : 0) + (algorithms.contains(.es256) ? ec.count : 0)
        guard usable > 0 else {
            throw JWKSError("no key usable with \(algorithms.map(\.rawValue).joined(separator: ", "))")
        }
        self.rsa = rsa
        self.ec = ec
        self.skipped = skipped
    }

    /// Why a JWKS entry is not a verification key for RS256/ES256, or nil when it is one.
    static func skipReason(_ jwk: JSONObject) -> String? {
        // A verifier needs public keys only; a private one here was published by mistake.
        if jwk["d"] != nil { return "holds private key material (d); a JWKS for verification holds public keys only" }
        guard let kty = jwk["kty"]?.stringValue else { return "no kty" }
        let expectedAlg: String
        switch kty {
        case "RSA": expectedAlg = "RS256"
        case "EC":
            guard let crv = jwk["crv"]?.stringValue else { return "EC key without a crv string" }
            guard crv == "P-256" else { return "EC curve \(SessionVerifier.clip(crv)) is not P-256" }
            expectedAlg = "ES256"
        default: return "kty \(SessionVerifier.clip(kty)) is not used"
        }
        if let use = jwk["use"], use.stringValue != "sig" { return "use is not sig" }
        if let ops = jwk["key_ops"], !(ops.arrayValue?.contains(.string("verify")) ?? false) {
            return "key_ops does not include verify"
        }
        if let alg = jwk["alg"], alg.stringValue != expectedAlg {
            return "alg \(alg.stringValue.map(SessionVerifier.clip) ?? alg.typeName) does not match kty \(kty) (\(expectedAlg))"
        }
        return nil
    }

    static func name(index: Int, kid: String?) -> String {
        guard let kid else { return "keys[\(index)]" }
        return "keys[\(index)] (kid \(JSONValue.string(kid).encodedString()))"
    }
}

/// Why a JWKS file cannot be used. `message` does not name the file; callers add it.
public struct JWKSError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
