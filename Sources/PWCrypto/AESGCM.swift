internal import COpenSSL

/// The AES-256-GCM cipher, fetched once from OpenSSL's default provider (like `FetchedAlgorithms`):
/// `EVP_CIPHER` objects are immutable and reference counted, so one is shared by every thread.
private final class FetchedCipher: @unchecked Sendable {
    /// Owned: `EVP_CIPHER *` from `EVP_CIPHER_fetch`, never freed (process lifetime).
    let aes256GCM: OpaquePointer

    init() {
        guard let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) else {
            fatalError("OpenSSL cannot provide AES-256-GCM: \(drainOpenSSLErrors())")
        }
        aes256GCM = cipher
    }
}

private let fetchedCipher = FetchedCipher()

/// A 256-bit AES key in one buffer of its own (not a copy-on-write array that may leave copies
/// behind), wiped when the last reference goes.
///
/// - Important: thread-safe. It owns its 32-byte buffer: written once in `init`, never mutated
///   afterwards, cleansed (`OPENSSL_cleanse`) and freed in `deinit`.
public final class AES256GCMKey: @unchecked Sendable {
    public static let byteCount = 32
    /// Owned; allocated in `init`, cleansed and deallocated in `deinit`.
    private let storage: UnsafeMutableBufferPointer<UInt8>

    /// - Throws: when `bytes` is not exactly 32 bytes.
    public init(_ bytes: [UInt8]) throws(CryptoError) {
        guard bytes.count == Self.byteCount else {
            throw CryptoError("an AES-256 key is \(Self.byteCount) bytes, not \(bytes.count)")
        }
        storage = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: Self.byteCount)
        _ = storage.initialize(from: bytes)
    }

    deinit {
        OPENSSL_cleanse(storage.baseAddress, Self.byteCount)
        storage.deallocate()
    }

    /// The key bytes for the duration of `body`, which must not keep the pointer.
    fileprivate func withPointer<R>(_ body: (UnsafePointer<UInt8>) -> R) -> R {
        body(UnsafePointer(storage.baseAddress!))
    }
}

/// AES-256-GCM (NIST SP 800-38D) with a 96-bit nonce and a 128-bit tag, via OpenSSL's EVP
/// interface (`man 3 EVP_EncryptInit`, section "GCM and OCB Modes").
///
/// Every call creates and frees its own `EVP_CIPHER_CTX` (`defer`), so no context is shared and
/// the functions are thread-safe.
public enum AES256GCM {
    public static let nonceByteCount = 12
    public static let tagByteCount = 16

    /// A sealed message: the nonce it was sealed with, the ciphertext (as long as the plaintext)
    /// and the tag that authenticates both with the associated data.
    public struct Sealed: Sendable, Equatable {
        public var nonce: [UInt8]
        public var ciphertext: [UInt8]
        public var tag: [UInt8]

        public init(nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8]) {
            self.nonce = nonce
            self.ciphertext = ciphertext
            self.tag = tag
        }

        /// `nonce | ciphertext | tag`, the usual wire form.
        public var combined: [UInt8] { nonce + ciphertext + tag }

        /// Splits `nonce | ciphertext | tag`; nil when too short to hold a nonce and a tag.
        public init?(combined bytes: [UInt8]) {
            guard bytes.count >= AES256GCM.nonceByteCount + AES256GCM.tagByteCount else { return nil }
            nonce = Array(bytes[..<AES256GCM.nonceByteCount])
            ciphertext = Array(bytes[AES256GCM.nonceByteCount..<(bytes.count - AES256GCM.tagByteCount)])
            tag = Array(bytes[(bytes.count - AES256GCM.tagByteCount)...])
        }
    }

    /// Seals `plaintext` under a fresh random nonce (`SecureRandom`), authenticating
    /// `associatedData` too (it is not encrypted and not part of the result).
    ///
    /// - Important: traps if OpenSSL fails (it only does when memory runs out): like
    ///   `SecureRandom`, there is no safe way on.
    public static func seal(_ plaintext: some Collection<UInt8>, key: AES256GCMKey,
                            authenticating associatedData: some Collection<UInt8>) -> Sealed {
        seal(plaintext, key: key, nonce: SecureRandom.bytes(nonceByteCount), authenticating: associatedData)
    }

    /// `seal` with a given nonce: for known-answer tests only. A nonce used twice under one key
    /// gives away the XOR of the two plaintexts and lets anyone forge tags.
    static func seal(_ plaintext: some Collection<UInt8>, key: AES256GCMKey, nonce: [UInt8],
                     authenticating associatedData: some Collection<UInt8>) -> Sealed {
        precondition(nonce.count == nonceByteCount, "AES-256-GCM takes a 12-byte nonce")
        guard let ctx = EVP_CIPHER_CTX_new() else { fatalError("EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        let result: Sealed? = withContiguousBytes(plaintext) { input in
            withContiguousBytes(associatedData) { aad in
                guard input.count < Int(Int32.max), aad.count < Int(Int32.max) else { return nil }
                let started = key.withPointer { keyBytes in
                    nonce.withUnsafeBufferPointer { EVP_EncryptInit_ex2(ctx, fetchedCipher.aes256GCM, keyBytes, $0.baseAddress, nil) == 1 }
                }
                guard started else { return nil }
                var length: Int32 = 0
                if aad.count > 0 {
                    guard EVP_EncryptUpdate(ctx, nil, &length, aad.baseAddress, Int32(aad.count)) == 1 else { return nil }
                }
                var failed = false
                let ciphertext = [UInt8](unsafeUninitializedCapacity: max(input.count, 1)) { out, count in
                    count = 0
                    var written: Int32 = 0
                    if input.count > 0 {
                        guard EVP_EncryptUpdate(ctx, out.baseAddress, &written, input.baseAddress, Int32(input.count)) == 1 else {
                            failed = true
                            return
                        }
                    }
                    var tail: Int32 = 0
                    guard EVP_EncryptFinal_ex(ctx, out.baseAddress! + Int(written), &tail) == 1 else {
                        failed = true
                        return
                    }
                    count = Int(written + tail)
                }
                guard !failed, ciphertext.count == input.count else { return nil }
                var tag = [UInt8](repeating: 0, count: tagByteCount)
                guard tag.withUnsafeMutableBytes({
                    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, Int32(tagByteCount), $0.baseAddress) == 1
                }) else { return nil }
                return Sealed(nonce: nonce, ciphertext: ciphertext, tag: tag)
            }
        }
        guard let result else { fatalError("AES-256-GCM seal failed: \(drainOpenSSLErrors())") }
        return result
    }

    /// The plaintext of `sealed`, or nil when the tag does not match (a different key, altered
    /// bytes or different associated data) or the parts have the wrong lengths. Nothing of a
    /// failed open is returned.
    public static func open(_ sealed: Sealed, key: AES256GCMKey, authenticating associatedData: some Collection<UInt8>) -> [UInt8]? {
        guard sealed.nonce.count == nonceByteCount, sealed.tag.count == tagByteCount, sealed.ciphertext.count < Int(Int32.max),
              let ctx = EVP_CIPHER_CTX_new() else { return nil }
        defer {
            EVP_CIPHER_CTX_free(ctx)
            ERR_clear_error()
        }
        return withContiguousBytes(associatedData) { aad -> [UInt8]? in
            guard aad.count < Int(Int32.max) else { return nil }
            let started = key.withPointer { keyBytes in
                sealed.nonce.withUnsafeBufferPointer { EVP_DecryptInit_ex2(ctx, fetchedCipher.aes256GCM, keyBytes, $0.baseAddress, nil) == 1 }
            }
            guard started else { return nil }
            var length: Int32 = 0
            if aad.count > 0 {
                guard EVP_DecryptUpdate(ctx, nil, &length, aad.baseAddress, Int32(aad.count)) == 1 else { return nil }
            }
            var tag = sealed.tag
            guard tag.withUnsafeMutableBytes({
                EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, Int32(tagByteCount), $0.baseAddress) == 1
            }) else { return nil }
            var authentic = false
            var plaintext = [UInt8](unsafeUninitializedCapacity: max(sealed.ciphertext.count, 1)) { out, count in
                count = 0
                var written: Int32 = 0
                let input = sealed.ciphertext
                if !input.isEmpty {
                    let ok = input.withUnsafeBufferPointer {
                        EVP_DecryptUpdate(ctx, out.baseAddress, &written, $0.baseAddress, Int32($0.count)) == 1
                    }
                    guard ok else { return }
                }
                var tail: Int32 = 0
                // The tag is checked here; before it matches, what was written is not to be trusted.
                authentic = EVP_DecryptFinal_ex(ctx, out.baseAddress! + Int(written), &tail) == 1
                count = Int(written + tail)
            }
            guard authentic, plaintext.count == sealed.ciphertext.count else {
                plaintext.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
                return nil
            }
            return plaintext
        }
    }
}
