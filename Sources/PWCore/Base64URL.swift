/// Base64url (RFC 4648 section 5) without padding, as JWTs and Web Push keys use it.
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    /// Each byte's 6-bit value, or 0xFF for a byte outside the alphabet.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

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
        // A table, not a chain of range tests: random base64 characters defeat branch prediction.
        return decodeTable.withUnsafeBufferPointer { table in
            func sextet(_ c: UInt8) -> UInt8 { table[Int(c)] }
            var valid = true
            let out = [UInt8](unsafeUninitializedCapacity: capacity) { out, count in
                // Whole groups of four characters (three bytes); an invalid character sets bit 7.
                var written = 0
                var i = 0
                var seen: UInt8 = 0
                while i + 4 <= end {
                    let a = sextet(input[i]), b = sextet(input[i + 1]), c = sextet(input[i + 2]), d = sextet(input[i + 3])
                    seen |= a | b | c | d
                    let group = UInt32(a & 0x3F) << 18 | UInt32(b & 0x3F) << 12 | UInt32(c & 0x3F) << 6 | UInt32(d & 0x3F)
                    out[written] = UInt8(truncatingIfNeeded: group >> 16)
                    out[written + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    out[written + 2] = UInt8(truncatingIfNeeded: group)
                    written += 3
                    i += 4
                }
                // A tail of two or three characters: one or two bytes, and the unused low bits must be
                // zero (canonical encoding).
                let tail = end - i
                if tail >= 2 {
                    let a = sextet(input[i]), b = sextet(input[i + 1]), c = tail == 3 ? sextet(input[i + 2]) : 0
                    seen |= a | b | c
                    let group = UInt32(a & 0x3F) << 18 | UInt32(b & 0x3F) << 12 | UInt32(c & 0x3F) << 6
                    out[written] = UInt8(truncatingIfNeeded: group >> 16)
                    written += 1
                    if tail == 3 {
                        out[written] = UInt8(truncatingIfNeeded: group >> 8)
                        written += 1
                        if c & 0x03 != 0 { valid = false }
                    } else if b & 0x0F != 0 {
                        valid = false
                    }
                }
                if seen & 0x80 != 0 { valid = false }
                count = valid ? written : 0
            }
            return valid ? out : nil
        }
    }
}
