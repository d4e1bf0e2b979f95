internal import COpenSSL

/// A failure inside PWCrypto. The message is for operators' logs: it may carry OpenSSL's error
/// queue text, so it is never shown to a client.
public struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }

    /// `context` followed by every entry of this thread's OpenSSL error queue. The queue is left
    /// empty, so a later call never reports a stale error.
    static func openSSL(_ context: String) -> CryptoError {
        let queue = drainOpenSSLErrors()
        return CryptoError(queue.isEmpty ? context : "\(context): \(queue)")
    }
}

/// Empties this thread's OpenSSL error queue and returns its entries joined by "; ".
/// OpenSSL's queue is thread-local, so this never sees another thread's errors.
func drainOpenSSLErrors() -> String {
    var parts: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        if parts.count < 8 {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            parts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }
    return parts.joined(separator: "; ")
}
