internal import COpenSSL

/// A private key for minting RS256/ES256 tokens in tests and in `pushwarden dev-token`.
/// The sidecar itself never signs sessions.
///
/// - Important: thread-safe for the same reason as `PublicKey`: the owned `EVP_PKEY` is immutable
///   after `init` and each signing call uses its own `EVP_MD_CTX`.
public final class PrivateKey: @unchecked Sendable {
    /// Owned `EVP_PKEY *`; freed in `deinit`.
    private let pkey: OpaquePointer
    /// The matching public key, validated like any verification key.
    public let publicKey: PublicKey

    public var kind: PublicKey.Kind { publicKey.kind }

    /// Takes ownership of `pkey`, freeing it when it is not an RSA (≥ 2048 bits) or P-256 key.
    private init(taking pkey: OpaquePointer) throws(CryptoError) {
        do {
            publicKey = try PublicKey(subjectPublicKeyInfo: OpenSSL.subjectPublicKeyInfo(pkey))
        } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
    }

    deinit { EVP_PKEY_free(pkey) }

    /// From an unencrypted PEM private key (PKCS#8, or the traditional RSA / EC forms).
    public convenience init(pem: String) throws(CryptoError) {
        let decoded = try OpenSSL.withReadOnlyBIO(Array(pem.utf8)) { bio throws(CryptoError) in
            PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let decoded else { throw CryptoError.openSSL("not an unencrypted PEM private key") }
        try self.init(taking: decoded)
    }

    public static func generateP256() throws(CryptoError) -> PrivateKey {
        try generate("EC") { EVP_PKEY_CTX_set_group_name($0, "P-256") }
    }

    public static func generateRSA(bits: Int = 2048) throws(CryptoError) -> PrivateKey {
        guard (2048...16384).contains(bits) else { throw CryptoError("RSA key size must be 2048 to 16384 bits") }
        return try generate("RSA") { EVP_PKEY_CTX_set_rsa_keygen_bits($0, Int32(bits)) }
    }

    private static func generate(_ algorithm: String, _ configure: (OpaquePointer) -> Int32) throws(CryptoError) -> PrivateKey {
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, algorithm, nil) else {
            throw CryptoError.openSSL("EVP_PKEY_CTX_new_from_name(\(algorithm)) failed")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, configure(ctx) == 1, EVP_PKEY_generate(ctx, &key) == 1, let key else {
            throw CryptoError.openSSL("\(algorithm) key generation failed")
        }
        return try PrivateKey(taking: key)
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256.
    public func signRS256(message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        guard kind == .rsa else { throw CryptoError("RS256 needs an RSA key") }
        return try sign(message)
    }

    /// ECDSA P-256 with SHA-256, returned in JOSE's raw r||s form (64 bytes).
    public func signES256(message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        guard kind == .ecP256 else { throw CryptoError("ES256 needs a P-256 key") }
        let der = try sign(message)
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let sig else { throw CryptoError.openSSL("d2i_ECDSA_SIG failed") }
        defer { ECDSA_SIG_free(sig) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(sig, &r, &s)
        var raw = [UInt8](repeating: 0, count: 64)
        let ok = raw.withUnsafeMutableBufferPointer { out in
            BN_bn2binpad(r, out.baseAddress, 32) == 32 && BN_bn2binpad(s, out.baseAddress! + 32, 32) == 32
        }
        guard ok else { throw CryptoError.openSSL("ECDSA signature halves do not fit 32 bytes") }
        return raw
    }

    private func sign(_ message: some Collection<UInt8>) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(ctx) }
        let signature: [UInt8]? = withContiguousBytes(message) { input in
            guard EVP_DigestSignInit(ctx, nil, fetched.sha256, nil, pkey) == 1 else { return nil }
            var length = 0
            guard EVP_DigestSign(ctx, nil, &length, input.baseAddress, input.count) == 1 else { return nil }
            var out = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(ctx, &out, &length, input.baseAddress, input.count) == 1 else { return nil }
            out.removeSubrange(length...)
            return out
        }
        guard let signature else { throw CryptoError.openSSL("signing failed") }
        return signature
    }

    /// PEM `-----BEGIN PUBLIC KEY-----` of the matching public key.
    public var publicKeyPEM: String { publicKey.pem }

    /// Unencrypted PKCS#8 PEM. For dev tooling and tests only: it is the secret itself.
    public var pem: String {
        let bytes = (try? OpenSSL.collectingBIO("PEM_write_bio_PrivateKey") {
            PEM_write_bio_PrivateKey($0, pkey, nil, nil, 0, nil, nil)
        }) ?? []
        return String(decoding: bytes, as: UTF8.self)
    }
}
