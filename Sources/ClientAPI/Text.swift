import PWCore

/// Character-level checks shared by every field. Lengths count Unicode scalars, which for the
/// ASCII-only fields (tokens, ids, locale, timezone) is the byte count. Which characters no value
/// may hold is `TextRules` (PWCore), the rule the session's contact id obeys too.
enum Text {
    /// Whether the UTF-8 of `s` starts with `prefix` (lower-case ASCII), ignoring ASCII case.
    ///
    /// A necessary condition for `asciiLowercased(s).hasPrefix(prefix)`: no character other than
    /// these ASCII bytes themselves is canonically equivalent to lower-case letters, digits or
    /// ASCII punctuation, so a byte mismatch means the character-level check fails too.
    static func hasASCIIPrefixIgnoringCase(_ s: String, _ prefix: StaticString) -> Bool {
        let n = prefix.utf8CodeUnitCount
        var text = s
        return text.withUTF8 { bytes in
            guard bytes.count >= n else { return false }
            for i in 0..<n {
                let byte = bytes[i]
                guard ((byte >= 0x41 && byte <= 0x5A) ? byte + 0x20 : byte) == prefix.utf8Start[i] else { return false }
            }
            return true
        }
    }

    static func length(_ s: String) -> Int { s.unicodeScalars.count }

    /// Printable ASCII without space (0x21...0x7E).
    static func isVisibleASCII(_ s: String) -> Bool {
        all(s, in: ByteClass.isVisible)
    }

    /// Whether every UTF-8 byte of `s` passes `allowed`, read from contiguous storage (iterating
    /// `String.UTF8View` costs several times more per byte on these hot paths).
    @inline(__always)
    static func all(_ s: String, in allowed: (UInt8) -> Bool) -> Bool {
        var text = s
        return text.withUTF8 { bytes in
            for byte in bytes where !allowed(byte) { return false }
            return true
        }
    }

    static func isHexDigit(_ b: UInt8) -> Bool {
        ByteClass.isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66)
    }

    static func hexValue(_ b: UInt8) -> UInt32? {
        switch b {
        case 0x30...0x39: return UInt32(b - 0x30)
        case 0x41...0x46: return UInt32(b - 0x41 + 10)
        case 0x61...0x66: return UInt32(b - 0x61 + 10)
        default: return nil
        }
    }

    /// ASCII lower-casing; other bytes are left alone.
    static func asciiLowercased(_ s: String) -> String {
        String(decoding: s.utf8.map { ($0 >= 0x41 && $0 <= 0x5A) ? $0 + 0x20 : $0 }, as: UTF8.self)
    }

    /// A client-chosen key as it may appear in a refusal's `field`: bounded and printable, so a
    /// hostile key cannot bloat or garble the error envelope.
    static func displayKey(_ key: String) -> String {
        var out = ""
        var count = 0
        for scalar in key.unicodeScalars {
            if count == 64 { out += "…"; break }
            let v = scalar.value
            out.unicodeScalars.append((v >= 0x20 && v <= 0x7E) ? scalar : "?")
            count += 1
        }
        return out
    }
}
