/// `host[:port]` as URLs, listen addresses and Redis URLs write it: an IPv6 host in brackets
/// (`[::1]:8080`), a port of one to five ASCII digits. The one parser for every place PushWarden
/// reads an authority; callers add their own rules on the host (an IP literal, a public name) and
/// the port's range.
public struct Authority: Sendable, Equatable {
    /// Without brackets, as written (not lowercased).
    public var host: Substring
    /// Whether the host was written in brackets (an IPv6 literal).
    public var bracketed: Bool
    /// 0...65535 when given.
    public var port: Int?

    public enum Problem: Error, Sendable, Equatable {
        case unclosedBracket
        case textAfterBracket
        /// An unbracketed host with a colon in it: a bare IPv6 address or two ports.
        case colonInHost
        case emptyHost
        case badPort
    }

    public static func parse(_ text: Substring) -> Result<Authority, Problem> {
        var host: Substring
        var portText: Substring?
        let bracketed = text.first == "["
        if bracketed {
            guard let close = text.firstIndex(of: "]") else { return .failure(.unclosedBracket) }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.first == ":" else { return .failure(.textAfterBracket) }
                portText = after.dropFirst()
            }
        } else if let colon = text.firstIndex(of: ":") {
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if portText?.contains(":") == true { return .failure(.colonInHost) }
        } else {
            host = text
        }
        guard !host.isEmpty else { return .failure(.emptyHost) }
        var port: Int?
        if let portText {
            guard (1...5).contains(portText.utf8.count), portText.utf8.allSatisfy(ByteClass.isDigit),
                  let value = Int(portText), value <= 65_535 else { return .failure(.badPort) }
            port = value
        }
        return .success(Authority(host: host, bracketed: bracketed, port: port))
    }

    public static func parse(_ text: String) -> Result<Authority, Problem> { parse(Substring(text)) }

    /// `host` or `host:port`, brackets restored for an IPv6 host.
    public static func format(host: String, port: Int?) -> String {
        let shown = host.contains(":") ? "[\(host)]" : host
        return port.map { "\(shown):\($0)" } ?? shown
    }
}

/// The byte classes the parsers share (RFC 5234 and RFC 9110 names).
public enum ByteClass {
    /// `0-9`.
    @inline(__always) public static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }
    /// `A-Z a-z 0-9`.
    @inline(__always) public static func isAlphanumeric(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A)
    }
    /// Visible ASCII, `!` to `~` (VCHAR).
    @inline(__always) public static func isVisible(_ byte: UInt8) -> Bool { byte >= 0x21 && byte <= 0x7E }
    /// Printable ASCII: visible or a space.
    @inline(__always) public static func isPrintable(_ byte: UInt8) -> Bool { byte >= 0x20 && byte <= 0x7E }
    /// An RFC 9110 `tchar`: what a header name, a cookie name or a method is made of.
    @inline(__always) public static func isToken(_ byte: UInt8) -> Bool {
        if byte < 64 { return tokenBits.low & (1 << UInt64(byte)) != 0 }
        if byte < 128 { return tokenBits.high & (1 << UInt64(byte - 64)) != 0 }
        return false
    }

    /// One bit per ASCII byte: a table lookup instead of a chain of comparisons.
    private static let tokenBits: (low: UInt64, high: UInt64) = {
        var low: UInt64 = 0
        var high: UInt64 = 0
        for b in "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8 {
            if b < 64 { low |= 1 << UInt64(b) } else { high |= 1 << UInt64(b - 64) }
        }
        return (low, high)
    }()
}
