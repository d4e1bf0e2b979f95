internal import COpenSSL

/// Small with-scopes over OpenSSL handles. Each handle is created and freed inside one call, so
/// none escapes.
enum OpenSSL {
    /// Runs `body` with a read-only memory BIO over `bytes`. The BIO borrows `bytes` only for the
    /// duration of the call.
    static func withReadOnlyBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) throws(CryptoError) -> R) throws(CryptoError) -> R {
        guard bytes.count < Int(Int32.max) else { throw CryptoError("input too large") }
        // `withUnsafeBytes` rethrows untyped errors, so the typed error travels in a Result.
        let result: Result<R, CryptoError> = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else {
                return .failure(CryptoError.openSSL("BIO_new_mem_buf failed"))
            }
            defer { BIO_free(bio) }
            do throws(CryptoError) {
                let value = try body(bio)
                return .success(value)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Runs `write` against a fresh memory BIO and returns what it wrote.
    static func collectingBIO(_ what: String, _ write: (OpaquePointer) -> Int32) throws(CryptoError) -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError.openSSL("BIO_new failed") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw CryptoError.openSSL("\(what) failed") }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = chunk.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
            if n <= 0 { break }
            out.append(contentsOf: chunk[0..<Int(n)])
        }
        ERR_clear_error()
        return out
    }

    /// A BIGNUM parameter of `pkey` as unsigned big-endian bytes, left-padded to `width` when given.
    static func bigNumberParameter(_ pkey: OpaquePointer, _ name: String, width: Int? = nil) -> [UInt8]? {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pkey, name, &bn) == 1, let bn else {
            ERR_clear_error()
            return nil
        }
        defer { BN_free(bn) }
        let natural = (Int(BN_num_bits(bn)) + 7) / 8
        let size = width ?? natural
        guard natural <= size else { return nil }
        return [UInt8](unsafeUninitializedCapacity: size) { out, count in
            count = BN_bn2binpad(bn, out.baseAddress, Int32(size)) == Int32(size) ? size : 0
        }
    }

    /// DER SubjectPublicKeyInfo of `pkey` (`i2d_PUBKEY`).
    static func subjectPublicKeyInfo(_ pkey: OpaquePointer) throws(CryptoError) -> [UInt8] {
        let length = Int(i2d_PUBKEY(pkey, nil))
        guard length > 0 else { throw CryptoError.openSSL("i2d_PUBKEY failed") }
        var failed = false
        let der = [UInt8](unsafeUninitializedCapacity: length) { out, count in
            var cursor: UnsafeMutablePointer<UInt8>? = out.baseAddress
            failed = i2d_PUBKEY(pkey, &cursor) != Int32(length)
            count = failed ? 0 : length
        }
        if failed { throw CryptoError.openSSL("i2d_PUBKEY failed") }
        return der
    }
}
