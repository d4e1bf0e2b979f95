internal import COpenSSL
import Synchronization

/// A public key for verifying RS256 and ES256 signatures.
///
/// Only keys fit for session verification exist: RSA with a modulus of 2048 to 16384 bits and a
/// small odd exponent, or EC on P-256 whose point passes OpenSSL's public-key check (on the
/// curve, not the point at infinity).
///
/// - Important: thread-safe. The `EVP_PKEY` is owned by this object, never mutated after `init`
///   and freed in `deinit`. OpenSSL 3 allows concurrent use of one `EVP_PKEY` for verification as
///   long as each call has its own `EVP_MD_CTX`, which every `verify…` call creates and frees.
public final class PublicKey: @unchecked Sendable {
    public enum Kind: String, Sendable, Equatable {
        case rsa
        case ecP256
    }

    /// The public values, unsigned big-endian: what a JWK carries.
    public enum Components: Sendable, Equatable {
        case rsa(modulus: [UInt8], exponent: [UInt8])
        /// Affine coordinates, 32 bytes each.
        case ecP256(x: [UInt8], y: [UInt8])
    }

    /// Owned `EVP_PKEY *`; freed in `deinit`.
    let pkey: OpaquePointer
    public let kind: Kind

    /// Takes ownership of `pkey`, freeing it if it is not a key PushWarden accepts.
    init(taking pkey: OpaquePointer) throws(CryptoError) {
        do {
            kind = try Self.validate(pkey)
        } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
    }

    deinit { EVP_PKEY_free(pkey) }

    /// From a DER SubjectPublicKeyInfo.
    public convenience init(subjectPublicKeyInfo der: [UInt8]) throws(CryptoError) {
        try self.init(taking: Self.decode(der, failure: "not a DER SubjectPublicKeyInfo"))
    }

    /// `d2i_PUBKEY` over exactly `der`: trailing bytes mean the input was not one key.
    private static func decode(_ der: [UInt8], failure: String) throws(CryptoError) -> OpaquePointer {
        let decoded: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let key = d2i_PUBKEY(nil, &cursor, buffer.count)
            if let key, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                EVP_PKEY_free(key)
                return nil
            }
            return key
        }
        guard let decoded else { throw CryptoError.openSSL(failure) }
        return decoded
    }

    /// From a PEM `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo) block.
    public convenience init(pem: String) throws(CryptoError) {
        let decoded = try OpenSSL.withReadOnlyBIO(Array(pem.utf8)) { bio throws(CryptoError) in
            PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let decoded else { throw CryptoError.openSSL("not a PEM public key") }
        try self.init(taking: decoded)
    }

    /// An RSA key from its modulus and public exponent (unsigned big-endian, as in a JWK).
    public convenience init(rsaModulus modulus: [UInt8], exponent: [UInt8]) throws(CryptoError) {
        guard modulus.contains(where: { $0 != 0 }), exponent.contains(where: { $0 != 0 }) else {
            throw CryptoError("RSA modulus or exponent is zero")
        }
        try self.init(taking: Self.decode(DER.rsaSubjectPublicKeyInfo(modulus: modulus, exponent: exponent),
                                          failure: "RSA modulus and exponent do not form a key"))
    }

    /// A P-256 key from its affine coordinates (exactly 32 bytes each, as in a JWK).
    public convenience init(p256X x: [UInt8], y: [UInt8]) throws(CryptoError) {
        guard x.count == 32, y.count == 32 else { throw CryptoError("P-256 coordinates must be 32 bytes each") }
        try self.init(taking: Self.decode(DER.p256SubjectPublicKeyInfo(x: x, y: y),
                                          failure: "EC point is not a valid P-256 public key"))
    }

    private static func validate(_ pkey: OpaquePointer) throws(CryptoError) -> Kind {
        defer { ERR_clear_error() }
        switch EVP_PKEY_get_base_id(pkey) {
        case EVP_PKEY_RSA:
            let bits = Int(EVP_PKEY_get_bits(pkey))
            guard bits >= 2048 else { throw CryptoError("RSA modulus of \(bits) bits is too small (minimum 2048)") }
            guard bits <= 16384 else { throw CryptoError("RSA modulus of \(bits) bits is too large (maximum 16384)") }
            guard let e = OpenSSL.bigNumberParameter(pkey, "e"), let last = e.last else {
                throw CryptoError("RSA public exponent unreadable")
            }
            guard e.count <= 8, last & 1 == 1, e != [1] else { throw CryptoError("RSA public exponent is not a small odd number above 1") }
            return .rsa
        case EVP_PKEY_EC:
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else {
                throw CryptoError("EC key without a named curve")
            }
            let curve = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard curve == "prime256v1" || curve == "P-256" else { throw CryptoError("EC curve \(curve) is not P-256") }
            guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else { throw CryptoError.openSSL("EVP_PKEY_CTX_new_from_pkey failed") }
            defer { EVP_PKEY_CTX_free(ctx) }
            guard EVP_PKEY_public_check(ctx) == 1 else { throw CryptoError.openSSL("EC point is not a valid P-256 public key") }
            return .ecP256
        default:
            throw CryptoError("unsupported key type (only RSA and EC P-256)")
        }
    }

    /// The key's size in bits (the modulus for RSA, 256 for P-256).
    public var bits: Int { Int(EVP_PKEY_get_bits(pkey)) }

    public var components: Components {
        switch kind {
        case .rsa:
            return .rsa(modulus: OpenSSL.bigNumberParameter(pkey, "n") ?? [],
                        exponent: OpenSSL.bigNumberParameter(pkey, "e") ?? [])
        case .ecP256:
            return .ecP256(x: OpenSSL.bigNumberParameter(pkey, "qx", width: 32) ?? [],
                           y: OpenSSL.bigNumberParameter(pkey, "qy", width: 32) ?? [])
        }
    }

    /// DER SubjectPublicKeyInfo.
    public var subjectPublicKeyInfo: [UInt8] {
        // Cannot fail for a key that passed validation short of memory exhaustion.
        (try? OpenSSL.subjectPublicKeyInfo(pkey)) ?? []
    }

    /// PEM `-----BEGIN PUBLIC KEY-----` text.
    public var pem: String {
        let bytes = (try? OpenSSL.collectingBIO("PEM_write_bio_PUBKEY") { PEM_write_bio_PUBKEY($0, pkey) }) ?? []
        return String(decoding: bytes, as: UTF8.self)
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 (JWS RS256). False for a non-RSA key or any error.
    public func verifyRS256(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard kind == .rsa else { return false }
        return verify(signature, message)
    }

    /// ECDSA P-256 with SHA-256 (JWS ES256). `signature` is JOSE's raw form: r and s as 32-byte
    /// big-endian halves (RFC 7518, section 3.4). Any other length, a DER signature included, is
    /// refused.
    public func verifyES256(signature: [UInt8], message: some Collection<UInt8>) -> Bool {
        guard kind == .ecP256, signature.count == 64 else { return false }
        let r = signature[0..<32]
        let s = signature[32..<64]
        guard r.contains(where: { $0 != 0 }), s.contains(where: { $0 != 0 }) else { return false }
        return verify(DER.ecdsaSignature(r: r, s: s), message)
    }

    /// SHA-256 of `message`, then the signature checked over that digest with a verify context
    /// set up once for this key (`EVP_PKEY_verify_init` with SHA-256 as the signature digest: for
    /// RSA, PKCS #1 v1.5 over its DigestInfo; for EC, ECDSA over the digest), taken from the idle
    /// ones so that no two threads share one: setting one up per call is a visible share of a
    /// verification.
    private func verify(_ signature: [UInt8], _ message: some Collection<UInt8>) -> Bool {
        let context = verifyContexts.withLock { $0.popLast() } ?? VerifyContext(for: pkey)
        guard let context else {
            ERR_clear_error()
            return false
        }
        let ok = withContiguousBytes(message) { input in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: SHA256.byteCount) { digest in
                sha256(input, into: digest.baseAddress!)
                return signature.withUnsafeBufferPointer { sig in
                    EVP_PKEY_verify(context.pointer, sig.baseAddress, sig.count, digest.baseAddress, SHA256.byteCount) == 1
                }
            }
        }
        if ok {
            verifyContexts.withLock { if $0.count < Self.idleContexts { $0.append(context) } }
        } else {
            // A refused signature may leave errors behind; the context is not kept.
            ERR_clear_error()
        }
        return ok
    }

    /// Verify contexts kept per key: one for each thread that verifies at once, and a few spare.
    private static let idleContexts = 8
    private let verifyContexts = Mutex<[VerifyContext]>([])
}

/// One `EVP_PKEY_CTX` set up for verifying with SHA-256, owned: freed in `deinit`.
///
/// - Important: not for concurrent use; `PublicKey` hands each one to one caller at a time,
///   which makes the `@unchecked Sendable` hand-over between threads sound. OpenSSL allows
///   `EVP_PKEY_verify` to be called again on a context after `EVP_PKEY_verify_init`.
private final class VerifyContext: @unchecked Sendable {
    let pointer: OpaquePointer

    init?(for pkey: OpaquePointer) {
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else { return nil }
        guard EVP_PKEY_verify_init(ctx) == 1, EVP_PKEY_CTX_set_signature_md(ctx, fetched.sha256) == 1 else {
            EVP_PKEY_CTX_free(ctx)
            return nil
        }
        pointer = ctx
    }

    deinit { EVP_PKEY_CTX_free(pointer) }
}
