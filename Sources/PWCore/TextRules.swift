/// The character rules every identifier and free-text value PushWarden stores, logs or forwards
/// obeys, whoever supplied it: client fields (ClientAPI) and the contact id from a session's
/// claim (SessionAuth) share this one definition.
///
/// And how such values are compared: by their UTF-8 bytes. Swift's `String ==` (and `String`'s
/// hashing) follows Unicode canonical equivalence, so `"e\u{301}" == "\u{E9}"` and
/// `"\u{212A}" == "K"` (KELVIN SIGN) are true although the bytes differ. An upstream, a log or a
/// JOSE peer (RFC 7515, section 5.3: no normalisation, code point by code point) sees the bytes,
/// so security decisions must too.
public enum TextRules {
    /// True when `scalar` has no business in a stored or forwarded value: general categories
    /// Cc (C0 and C1 controls, DEL), Cf (format characters: the bidirectional embeddings,
    /// overrides, isolates and marks U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C; the
    /// zero-width characters U+200B-U+200D and U+2060; the byte-order mark U+FEFF; soft hyphen,
    /// tag characters and the rest), Zl and Zp (U+2028, U+2029). They either break log lines or
    /// make a log line, an admin screen or a provider's dashboard show something other than the
    /// bytes it holds.
    public static func isForbidden(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        if v < 0x80 { return v < 0x20 || v == 0x7F }
        if v <= 0x9F { return true }
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator: return true
        default: return false
        }
    }

    /// The first scalar of `s` that `isForbidden`, or nil.
    public static func firstForbidden(in s: String) -> Unicode.Scalar? {
        // ASCII text (nearly every value) is judged byte by byte; anything else by scalars.
        var text = s
        let ascii: UInt8?? = text.withUTF8 { bytes in
            for byte in bytes {
                if byte >= 0x80 { return nil }
                if byte < 0x20 || byte == 0x7F { return .some(byte) }
            }
            return .some(nil)
        }
        if let ascii { return ascii.map { Unicode.Scalar($0) } }
        return s.unicodeScalars.first(where: isForbidden)
    }

    /// Whether any scalar of `s` `isForbidden`.
    public static func hasForbiddenCharacter(_ s: String) -> Bool { firstForbidden(in: s) != nil }

    /// True when `s` is empty or holds only white space (Unicode `White_Space`: space, tab, line
    /// breaks, NO-BREAK SPACE, the U+2000 spaces, IDEOGRAPHIC SPACE and the rest): a value that
    /// names nothing a reader could see.
    public static func isBlank(_ s: String) -> Bool {
        s.unicodeScalars.allSatisfy { $0.properties.isWhitespace }
    }

    /// Byte-for-byte equality of the UTF-8 of `a` and `b`: no canonical equivalence.
    public static func bytesEqual(_ a: String, _ b: String) -> Bool {
        var left = a
        var right = b
        return left.withUTF8 { x in right.withUTF8 { y in x.count == y.count && x.elementsEqual(y) } }
    }

    /// `bytesEqual` for any string views (a `Substring` of a header, say).
    public static func bytesEqual(_ a: some StringProtocol, _ b: some StringProtocol) -> Bool {
        a.utf8.count == b.utf8.count && a.utf8.elementsEqual(b.utf8)
    }

    /// A scalar as `U+XXXX`, for messages that must name an invisible character.
    public static func codePoint(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
}
