#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWPolicy

/// Where a session token travels: the policy's header (`Bearer <token>`) or cookie, found without
/// copying the request's bytes.
extension SessionVerifier {
    /// The token of `name: Bearer <token>` in `headers`, for session types that do not verify it
    /// in place (introspection): one such header field, in the Bearer form, at most
    /// `maxTokenBytes` long. `.success(nil)` when the header is absent.
    public static func bearerToken(in headers: HTTPHeaders, header name: String) -> Result<String?, AuthFailure> {
        var found: String?
        for field in headers where HTTPHeaders.equalsIgnoringCase(field.name, name) {
            if found != nil { return .failure(AuthFailure("several \(name) headers")) }
            found = field.value
        }
        guard var value = found else { return .success(nil) }
        let token = value.withUTF8 { bytes in bearerToken(in: bytes).map { String(decoding: UnsafeBufferPointer(rebasing: bytes[$0]), as: UTF8.self) } }
        guard let token else { return .failure(AuthFailure("\(name) header is not a Bearer token")) }
        guard token.utf8.count <= maxTokenBytes else { return .failure(AuthFailure("token longer than \(maxTokenBytes) bytes")) }
        return .success(token)
    }

    /// The index of the first `byte` in `bytes` at or after `start`, or `bytes.count`.
    static func find(_ byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        guard start < bytes.count, let base = bytes.baseAddress,
              let hit = memchr(base + start, Int32(byte), bytes.count - start) else { return bytes.count }
        return base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
    }

    /// The credentials of a header value `Bearer <token>`, by the rules session tokens are read
    /// with (`bearerToken(in:)`), or nil when the value is not of that form: what the admin
    /// listener reads its token with.
    public static func bearerCredentials(_ value: String) -> [UInt8]? {
        var value = value
        return value.withUTF8 { bytes in bearerToken(in: bytes).map { Array(bytes[$0]) } }
    }

    /// Where the credentials of `Bearer <token>` (RFC 6750, section 2.1; scheme case-insensitive)
    /// lie in a header value's UTF-8, or nil when the value is not of that form.
    static func bearerToken(in b: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        func isOWS(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }
        var i = 0
        while i < b.count, isOWS(b[i]) { i += 1 }
        let schemeStart = i
        while i < b.count, !isOWS(b[i]) { i += 1 }
        guard i < b.count else { return nil }
        let scheme: StaticString = "bearer"
        guard i - schemeStart == scheme.utf8CodeUnitCount else { return nil }
        for k in 0..<scheme.utf8CodeUnitCount {
            let c = b[schemeStart + k]
            guard ((c >= 0x41 && c <= 0x5A) ? c | 0x20 : c) == scheme.utf8Start[k] else { return nil }
        }
        while i < b.count, isOWS(b[i]) { i += 1 }
        var end = b.count
        while end > i, isOWS(b[end - 1]) { end -= 1 }
        guard end > i else { return nil }
        let credentials = UnsafeBufferPointer(rebasing: b[i..<end])
        guard find(0x20, in: credentials, from: 0) == credentials.count, find(0x09, in: credentials, from: 0) == credentials.count else {
            return nil
        }
        return i..<end
    }

    /// The first non-empty value of cookie `name` across `Cookie` header fields (RFC 6265,
    /// section 5.4: `name=value` pairs separated by `;`, a value optionally in double quotes).
    /// Names compare case-sensitively.
    public static func cookie(named name: String, in fields: [String]) -> String? {
        for field in fields {
            for pair in field.split(separator: ";", omittingEmptySubsequences: true) {
                guard let equals = pair.firstIndex(of: "=") else { continue }
                guard TextRules.bytesEqual(trimOWS(pair[..<equals]), name) else { continue }
                var value = trimOWS(pair[pair.index(after: equals)...])
                if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
                if !value.isEmpty { return String(value) }
            }
        }
        return nil
    }

    private static func trimOWS(_ s: Substring) -> Substring {
        var out = s
        while let c = out.first, c == " " || c == "\t" { out = out.dropFirst() }
        while let c = out.last, c == " " || c == "\t" { out = out.dropLast() }
        return out
    }
}
