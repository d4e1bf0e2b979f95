internal import COpenSSL

/// Ed25519 (RFC 8032) keys for signing policy files: `pushwarden policy sign` signs a file's
/// bytes, `policy verify` and `serve --policy-key` check the signature. Keys are PEM, as
/// `openssl genpkey -algorithm ed25519` writes them (PKCS#8 private, SubjectPublicKeyInfo public).
///
/// Signing and verifying are one-shot `EVP_DigestSign` / `EVP_DigestVerify` calls with no digest
/// (Ed25519 hashes the message itself), the same operation `openssl pkeyutl -sign -rawin` runs.
///
/// - Important: thread-safe. Each type owns its `EVP_PKEY`, never mutates it after `init` and
///   frees it in `deinit`; every call makes and frees its own `EVP_MD_CTX`.
public final class Ed25519PublicKey: @unchecked Sendable {
    /// Owned `EVP_PKEY *`; freed in `deinit`.
    private let pkey: OpaquePointer

    /// Takes ownership of `pkey`, freeing it when it is not an Ed25519 key.
    fileprivate init(taking pkey: OpaquePointer) throws(CryptoError) {
        guard EVP_PKEY_is_a(pkey, "ED25519") == 1 else {
            EVP_PKEY_free(pkey)
            throw CryptoError("not an Ed25519 key")
        }
        self.pkey = pkey
    }

    deinit { EVP_PKEY_free(pkey) }

    /// From a PEM public key (`-----BEGIN PUBLIC KEY-----`).
    public convenience init(pem: [UInt8]) throws(CryptoError) {
        let decoded = try OpenSSL.withReadOnlyBIO(pem) { bio throws(CryptoError) in PEM_read_bio_PUBKEY(bio, nil, nil, nil) }
        guard let decoded else { throw CryptoError.openSSL("not a PEM public key") }
        try self.init(taking: decoded)
    }

    /// Whether `signature` (64 bytes) is this key's Ed25519 signature over `message`.
    public func verify(signature: [UInt8], message: [UInt8]) -> Bool {
        guard signature.count == 64, let ctx = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(ctx)
            ERR_clear_error()
        }
        guard EVP_DigestVerifyInit_ex(ctx, nil, nil, nil, nil, pkey, nil) == 1 else { return false }
        return signature.withUnsafeBufferPointer { sig in
            message.withUnsafeBufferPointer { msg in
                EVP_DigestVerify(ctx, sig.baseAddress, sig.count, msg.baseAddress, msg.count) == 1
            }
        }
    }
}

/// An Ed25519 private key (see `Ed25519PublicKey`).
public final class Ed25519PrivateKey: @unchecked Sendable {
    /// Owned `EVP_PKEY *`; freed in `deinit`.
    private let pkey: OpaquePointer
    public let publicKey: Ed25519PublicKey

    private init(taking pkey: OpaquePointer) throws(CryptoError) {
        guard EVP_PKEY_is_a(pkey, "ED25519") == 1 else {
            EVP_PKEY_free(pkey)
            throw CryptoError("not an Ed25519 key")
        }
        let spki: [UInt8]
        do { spki = try OpenSSL.subjectPublicKeyInfo(pkey) } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        let decoded: OpaquePointer? = spki.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let decoded else {
            EVP_PKEY_free(pkey)
            throw CryptoError.openSSL("d2i_PUBKEY failed")
        }
        do { publicKey = try Ed25519PublicKey(taking: decoded) } catch {
            EVP_PKEY_free(pkey)
            throw error
        }
        self.pkey = pkey
    }

    deinit { EVP_PKEY_free(pkey) }

    /// From an unencrypted PEM private key (`-----BEGIN PRIVATE KEY-----`).
    public convenience init(pem: [UInt8]) throws(CryptoError) {
        let decoded = try OpenSSL.withReadOnlyBIO(pem) { bio throws(CryptoError) in PEM_read_bio_PrivateKey(bio, nil, nil, nil) }
        guard let decoded else { throw CryptoError.openSSL("not an unencrypted PEM private key") }
        try self.init(taking: decoded)
    }

    public static func generate() throws(CryptoError) -> Ed25519PrivateKey {
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "ED25519", nil) else {
            throw CryptoError.openSSL("EVP_PKEY_CTX_new_from_name(ED25519) failed")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_generate(ctx, &key) == 1, let key else {
            throw CryptoError.openSSL("Ed25519 key generation failed")
        }
        return try Ed25519PrivateKey(taking: key)
    }

    /// The 64-byte Ed25519 signature over `message`.
    public func sign(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw CryptoError.openSSL("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit_ex(ctx, nil, nil, nil, nil, pkey, nil) == 1 else {
            throw CryptoError.openSSL("EVP_DigestSignInit_ex failed")
        }
        var length = 64
        var signature = [UInt8](repeating: 0, count: 64)
        let ok = signature.withUnsafeMutableBufferPointer { sig in
            message.withUnsafeBufferPointer { msg in
                EVP_DigestSign(ctx, sig.baseAddress, &length, msg.baseAddress, msg.count) == 1
            }
        }
        guard ok, length == 64 else { throw CryptoError.openSSL("EVP_DigestSign failed") }
        return signature
    }

    /// PEM of the public key, as `openssl pkey -pubout` writes it.
    public func publicKeyPEM() throws(CryptoError) -> [UInt8] {
        try OpenSSL.collectingBIO("PEM_write_bio_PUBKEY") { PEM_write_bio_PUBKEY($0, pkey) }
    }

    /// PEM of the private key (PKCS#8), as `openssl genpkey` writes it.
    public func pem() throws(CryptoError) -> [UInt8] {
        try OpenSSL.collectingBIO("PEM_write_bio_PrivateKey") { PEM_write_bio_PrivateKey($0, pkey, nil, nil, 0, nil, nil) }
    }
}
