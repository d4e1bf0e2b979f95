/// Base64url (RFC 4648 section 5) without padding, as JWTs and Web Push keys use it.
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                out.append(alphabet[Int((buffer >> UInt32(bits)) & 0x3F)])
            }
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(6 - bits)) & 0x3F)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes unpadded base64url; trailing `=` padding is tolerated. Returns nil on any other
    /// character or on an impossible length.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        if let result = text.utf8.withContiguousStorageIfAvailable({ decode(bytes: $0) }) { return result }
        return Array(text.utf8).withUnsafeBufferPointer { decode(bytes: $0) }
    }

    /// `decode(_:)` over raw bytes (the text's UTF-8), so a caller holding a token's bytes can
    /// decode one segment without copying it into a String or an Array first.
    public static func decode(bytes input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var end = input.count
        while end > 0, input[end - 1] == UInt8(ascii: "=") { end -= 1 }
        if end % 4 == 1 { return nil }
        let capacity = end * 3 / 4
        var valid = true
        let out = [UInt8](unsafeUninitializedCapacity: capacity) { out, count in
            var buffer: UInt32 = 0
            var bits = 0
            var written = 0
            for i in 0..<end {
                let v = sextet(input[i])
                if v == 0xFF { valid = false; break }
                buffer = buffer << 6 | UInt32(v)
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    out[written] = UInt8(truncatingIfNeeded: buffer >> UInt32(bits))
                    written += 1
                }
            }
            // Leftover bits must be zero (canonical encoding).
            if valid, bits > 0, buffer & ((1 << UInt32(bits)) - 1) != 0 { valid = false }
            count = valid ? written : 0
        }
        return valid ? out : nil
    }

    /// The 6-bit value of one base64url character, or 0xFF.
    @inline(__always)
    private static func sextet(_ c: UInt8) -> UInt8 {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return c &- UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return c &- UInt8(ascii: "a") &+ 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c &- UInt8(ascii: "0") &+ 52
        case UInt8(ascii: "-"): return 62
        case UInt8(ascii: "_"): return 63
        default: return 0xFF
        }
    }
}
