internal import COpenSSL
import Synchronization

/// Algorithm objects fetched once from OpenSSL's default provider.
///
/// Fetching by name takes a lock and a store lookup; doing it once keeps the per-request path
/// to the digest itself. `EVP_MD` objects are immutable and reference counted, so sharing one
/// across threads is safe (OpenSSL 3 "Thread safety" in `man 7 openssl-threads`).
final class FetchedAlgorithms: @unchecked Sendable {
    /// Owned: `EVP_MD *` from `EVP_MD_fetch`, never freed (process lifetime).
    let sha256: OpaquePointer

    init() {
        guard let md = EVP_MD_fetch(nil, "SHA256", nil) else {
            fatalError("OpenSSL cannot provide SHA-256: \(drainOpenSSLErrors())")
        }
        sha256 = md
    }
}

let fetched = FetchedAlgorithms()

/// One `EVP_MD_CTX`, owned: created in `init`, freed (and cleansed) in `deinit`.
///
/// - Important: not for concurrent use; `DigestContexts` hands each one to one caller at a time,
///   which is what makes the `@unchecked Sendable` hand-over between threads sound.
final class DigestContext: @unchecked Sendable {
    let pointer: OpaquePointer

    init() {
        guard let ctx = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        pointer = ctx
    }

    deinit { EVP_MD_CTX_free(pointer) }
}

/// Digest contexts kept for reuse. Every SHA-256 and HMAC on the request path would otherwise
/// allocate and free a context (and OpenSSL's provider state behind it), which costs more than
/// hashing a short message. Thread-safe: a context is taken out under the lock and put back after
/// use, so no two threads ever share one; at most `capacity` idle contexts are kept.
enum DigestContexts {
    private static let idle = Mutex<[DigestContext]>([])
    private static let capacity = 64

    /// Runs `body` with a context that no other thread uses meanwhile. `body` must leave no
    /// pointer to it behind; it may leave the context in any state (each use starts with
    /// `EVP_DigestInit_ex`).
    static func with<R>(_ body: (OpaquePointer) -> R) -> R {
        let context = idle.withLock { $0.popLast() } ?? DigestContext()
        defer { idle.withLock { if $0.count < capacity { $0.append(context) } } }
        return body(context.pointer)
    }
}

/// SHA-256 of `input` into `out` (32 bytes) with a reused context.
func sha256(_ input: UnsafeBufferPointer<UInt8>, into out: UnsafeMutablePointer<UInt8>) {
    DigestContexts.with { ctx in
        var length: UInt32 = 0
        guard EVP_DigestInit_ex(ctx, fetched.sha256, nil) == 1,
              EVP_DigestUpdate(ctx, input.baseAddress, input.count) == 1,
              EVP_DigestFinal_ex(ctx, out, &length) == 1, length == UInt32(SHA256.byteCount) else {
            fatalError("SHA-256 failed: \(drainOpenSSLErrors())")
        }
    }
}

/// Calls `body` with a contiguous view of `bytes`, copying only when the collection has no
/// contiguous storage.
@inline(__always)
func withContiguousBytes<R>(_ bytes: some Collection<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
    if let result = bytes.withContiguousStorageIfAvailable(body) { return result }
    return Array(bytes).withUnsafeBufferPointer(body)
}

/// SHA-256 (FIPS 180-4) via OpenSSL. Thread-safe.
public enum SHA256 {
    public static let byteCount = 32

    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        withContiguousBytes(bytes) { input in
            [UInt8](unsafeUninitializedCapacity: byteCount) { out, count in
                sha256(input, into: out.baseAddress!)
                count = byteCount
            }
        }
    }

    /// The digest as four words: a compact key for a table keyed by a secret's hash.
    public struct Words: Hashable, Sendable {
        public let w0, w1, w2, w3: UInt64
    }

    public static func words(_ input: UnsafeBufferPointer<UInt8>) -> Words {
        withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 4) { words in
            sha256(input, into: UnsafeMutableRawPointer(words.baseAddress!).assumingMemoryBound(to: UInt8.self))
            return Words(w0: words[0], w1: words[1], w2: words[2], w3: words[3])
        }
    }

    /// The digest as lowercase hex, e.g. for log-safe token fingerprints.
    public static func hexHash(_ bytes: some Collection<UInt8>) -> String {
        withContiguousBytes(bytes) { input in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: byteCount) { digest in
                sha256(input, into: digest.baseAddress!)
                return Hex.encode(buffer: UnsafeBufferPointer(digest))
            }
        }
    }
}

extension SHA256 {
    /// The digest of `first`, `second` and `third` (when given) joined by single zero bytes, its
    /// first `hexDigits` hex digits written between `prefix` and `suffix`: a store key named by a
    /// digest of what it holds, built in one allocation (the parts are hashed where they lie).
    public static func hexHash(joining first: String, _ second: String, _ third: String? = nil, hexDigits: Int = 2 * byteCount,
                               prefix: StaticString = "", suffix: StaticString = "") -> String {
        precondition(hexDigits >= 0 && hexDigits <= 2 * byteCount && hexDigits % 2 == 0)
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: byteCount) { digest in
            DigestContexts.with { ctx in
                var length: UInt32 = 0
                var separator: UInt8 = 0
                var ok = EVP_DigestInit_ex(ctx, fetched.sha256, nil) == 1
                func update(_ part: String) {
                    var part = part
                    part.withUTF8 { bytes in ok = ok && EVP_DigestUpdate(ctx, bytes.baseAddress, bytes.count) == 1 }
                }
                update(first)
                ok = ok && EVP_DigestUpdate(ctx, &separator, 1) == 1
                update(second)
                if let third {
                    ok = ok && EVP_DigestUpdate(ctx, &separator, 1) == 1
                    update(third)
                }
                guard ok, EVP_DigestFinal_ex(ctx, digest.baseAddress!, &length) == 1, length == UInt32(byteCount) else {
                    fatalError("SHA-256 failed: \(drainOpenSSLErrors())")
                }
            }
            return Hex.encode(buffer: UnsafeBufferPointer(rebasing: digest.prefix(hexDigits / 2)), prefix: prefix, suffix: suffix)
        }
    }

    /// The first `hexDigits` hex digits of the digest of `bytes` (one allocation: the string).
    public static func hexHash(_ bytes: some Collection<UInt8>, hexDigits: Int) -> String {
        precondition(hexDigits >= 0 && hexDigits <= 2 * byteCount && hexDigits % 2 == 0)
        return withContiguousBytes(bytes) { input in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: byteCount) { digest in
                sha256(input, into: digest.baseAddress!)
                return Hex.encode(buffer: UnsafeBufferPointer(rebasing: digest.prefix(hexDigits / 2)))
            }
        }
    }
}

public enum Hex {
    /// Lowercase hex of `bytes`.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        withContiguousBytes(bytes) { encode(buffer: $0) }
    }

    static func encode(buffer bytes: UnsafeBufferPointer<UInt8>, prefix: StaticString = "", suffix: StaticString = "") -> String {
        let count = prefix.utf8CodeUnitCount + bytes.count * 2 + suffix.utf8CodeUnitCount
        return String(unsafeUninitializedCapacity: count) { out in
            var at = 0
            for byte in UnsafeBufferPointer(start: prefix.utf8Start, count: prefix.utf8CodeUnitCount) {
                out[at] = byte
                at += 1
            }
            for b in bytes {
                out[at] = digit(b >> 4)
                out[at + 1] = digit(b & 0x0F)
                at += 2
            }
            for byte in UnsafeBufferPointer(start: suffix.utf8Start, count: suffix.utf8CodeUnitCount) {
                out[at] = byte
                at += 1
            }
            return at
        }
    }

    @inline(__always)
    private static func digit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 &+ nibble : 0x61 &+ (nibble &- 10)
    }
}

/// HMAC-SHA-256 (RFC 2104) built on OpenSSL's SHA-256. Thread-safe.
///
/// It runs on every HS256 session check, so it avoids OpenSSL's `EVP_MAC` path, which fetches
/// the digest by name on each `EVP_MAC_init` and allocates a context per inner hash. Here a call
/// borrows one reused `EVP_MD_CTX` (for the inner and the outer hash) from `DigestContexts` and
/// allocates only the 32-byte result; the padded key blocks live on the stack and are zeroed.
public enum HMACSHA256 {
    public static let byteCount = 32
    private static let blockSize = 64

    public static func mac(key: [UInt8], message: some Collection<UInt8>) -> [UInt8] {
        // Keys longer than one block are hashed first (RFC 2104, section 2).
        let shortKey = key.count > blockSize ? SHA256.hash(key) : key
        return withContiguousBytes(message) { input in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: blockSize * 2 + byteCount) { scratch in
                let ipad = UnsafeMutableBufferPointer(rebasing: scratch[0..<blockSize])
                let opad = UnsafeMutableBufferPointer(rebasing: scratch[blockSize..<blockSize * 2])
                let inner = UnsafeMutableBufferPointer(rebasing: scratch[blockSize * 2..<blockSize * 2 + byteCount])
                for i in 0..<blockSize {
                    let k: UInt8 = i < shortKey.count ? shortKey[i] : 0
                    ipad[i] = k ^ 0x36
                    opad[i] = k ^ 0x5C
                }
                defer { scratch.update(repeating: 0) }

                return DigestContexts.with { ctx in
                    var length: UInt32 = 0
                    guard EVP_DigestInit_ex(ctx, fetched.sha256, nil) == 1,
                          EVP_DigestUpdate(ctx, ipad.baseAddress, blockSize) == 1,
                          EVP_DigestUpdate(ctx, input.baseAddress, input.count) == 1,
                          EVP_DigestFinal_ex(ctx, inner.baseAddress, &length) == 1 else {
                        fatalError("HMAC-SHA-256 inner hash failed: \(drainOpenSSLErrors())")
                    }
                    return [UInt8](unsafeUninitializedCapacity: byteCount) { out, count in
                        guard EVP_DigestInit_ex(ctx, fetched.sha256, nil) == 1,
                              EVP_DigestUpdate(ctx, opad.baseAddress, blockSize) == 1,
                              EVP_DigestUpdate(ctx, inner.baseAddress, byteCount) == 1,
                              EVP_DigestFinal_ex(ctx, out.baseAddress, &length) == 1 else {
                            fatalError("HMAC-SHA-256 outer hash failed: \(drainOpenSSLErrors())")
                        }
                        count = byteCount
                    }
                }
            }
        }
    }
}

/// Cryptographically secure random bytes from OpenSSL's DRBG. Thread-safe.
public enum SecureRandom {
    /// - Important: traps if OpenSSL cannot produce random bytes: there is no safe fallback, and
    ///   returning predictable bytes would be worse than stopping.
    public static func bytes(_ count: Int) -> [UInt8] {
        precondition(count >= 0 && count <= Int(Int32.max))
        return [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            if count > 0, RAND_bytes(out.baseAddress, Int32(count)) != 1 {
                fatalError("RAND_bytes failed: \(drainOpenSSLErrors())")
            }
            initialized = count
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths (`CRYPTO_memcmp`), so a
/// MAC check leaks nothing about how many leading bytes matched. Lengths are not secret.
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { pa in
        b.withUnsafeBytes { pb in CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 }
    }
}

/// SHA-1, only where a protocol names it as an identifier (Redis addresses cached Lua scripts by
/// their SHA-1); never for security. Thread-safe.
public enum SHA1 {
    public static func hexHash(_ bytes: some Collection<UInt8>) -> String {
        withContiguousBytes(bytes) { input in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digest in
                var length: UInt32 = 0
                guard EVP_Digest(input.baseAddress, input.count, digest.baseAddress, &length, EVP_sha1(), nil) == 1, length == 20 else {
                    fatalError("SHA-1 failed: \(drainOpenSSLErrors())")
                }
                return Hex.encode(buffer: UnsafeBufferPointer(digest))
            }
        }
    }
}
