import PWCore

/// Checks a Web Push / UnifiedPush endpoint URL before PushWarden stores it or lets an upstream
/// (or, later, its own egress) call it: the URL is client input that names a host, so it is a
/// server-side request forgery vector.
///
/// The check parses the URL itself, on purpose more strictly than a browser's URL parser, so that
/// no spelling means one host to this check and another to the HTTP client that later fetches it:
/// - only `https://` (scheme case-insensitive), visible ASCII only, no backslash, no userinfo
///   (`@`), no percent-encoding in the host, no fragment, at most 1000 characters;
/// - an IPv4 host is read the way `inet_aton` and the WHATWG URL parser read it (decimal
///   `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`, short forms `127.1`), and also with leading
///   zeros read as decimal; if either reading is not publicly routable the URL is refused, and a
///   public address in anything but canonical dotted-decimal is refused as malformed;
/// - IPv6 literals (in brackets) are allowed only inside global unicast `2000::/3`, minus the
///   documentation, benchmarking, Teredo/ORCHID and similar special ranges; NAT64 `64:ff9b::/96`
///   and 6to4 `2002::/16` are judged by the IPv4 address they embed; every IPv4-mapped or
///   IPv4-compatible spelling (`::ffff:127.0.0.1`, `::ffff:7f00:1`, `::7f00:1`) is refused;
/// - names: `localhost` and `*.localhost` (with or without a trailing dot), single-label hosts,
///   and special-use or commonly private suffixes (`.local`, `.internal`, `.home.arpa`, `.test`,
///   ...) are refused.
///
/// - Important: DNS is not resolved here. A public name that resolves to a private address (DNS
///   rebinding, `127.0.0.1.nip.io`) is out of scope for this check; the egress path that connects
///   to the endpoint must re-check the address it actually connects to.
public enum EndpointURL {
    /// Longest endpoint URL accepted (docs/api.md).
    public static let maxLength = 1000

    /// - Parameter field: the field name used in the refusal (`push_token`, `previous_push_token`).
    /// - Throws: `invalid_web_push` for anything that is not a well-formed https URL,
    ///   `url_not_publicly_routable` for a host that is loopback, private, link-local, reserved or
    ///   a local name.
    public static func validate(_ url: String, field: String) throws(ContractError) {
        func malformed(_ why: String) -> ContractError {
            ContractError(.invalidWebPush, "\(field) must be an https endpoint URL: \(why)", field: field)
        }
        let bytes = Array(url.utf8)
        guard bytes.count <= maxLength else { throw malformed("at most \(maxLength) characters") }
        guard bytes.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E && $0 != UInt8(ascii: "\\") }) else {
            throw malformed("only visible ASCII characters, no spaces or backslashes")
        }
        let scheme = Array("https://".utf8)
        guard bytes.count > scheme.count,
              Text.asciiLowercased(String(decoding: bytes[0..<scheme.count], as: UTF8.self)) == "https://" else {
            throw malformed("the scheme must be https")
        }
        guard !bytes.contains(UInt8(ascii: "#")) else { throw malformed("no fragment") }
        let rest = bytes[scheme.count...]
        let authorityEnd = rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? rest.endIndex
        let authority = Array(rest[rest.startIndex..<authorityEnd])
        guard !authority.isEmpty else { throw malformed("missing host") }
        guard !authority.contains(UInt8(ascii: "@")) else { throw malformed("no user information") }
        guard !authority.contains(UInt8(ascii: "%")) else { throw malformed("no percent-encoding in the host") }

        // The shared authority parser, then this field's stricter rules on the host.
        let parsed: Authority
        switch Authority.parse(String(decoding: authority, as: UTF8.self)) {
        case .success(let value): parsed = value
        case .failure(.unclosedBracket): throw malformed("unclosed IPv6 literal")
        case .failure(.textAfterBracket): throw malformed("unexpected characters after the IPv6 literal")
        case .failure(.badPort): throw malformed("invalid port")
        case .failure(.emptyHost): throw malformed("missing host")
        case .failure(.colonInHost): throw malformed("invalid host")
        }
        guard parsed.port != 0 else { throw malformed("invalid port") }
        guard parsed.bracketed || !parsed.host.contains(where: { $0 == "[" || $0 == "]" }) else { throw malformed("invalid host") }

        let verdict: HostVerdict
        if parsed.bracketed {
            guard let address = IPv6Address(String(parsed.host)) else { throw malformed("invalid IPv6 address") }
            verdict = address.isPubliclyRoutable ? .publicAddress : .notRoutable
        } else {
            verdict = classifyName(Text.asciiLowercased(String(parsed.host)))
        }
        switch verdict {
        case .publicAddress, .publicName:
            return
        case .malformed(let why):
            throw malformed(why)
        case .notRoutable:
            throw ContractError(.urlNotPubliclyRoutable,
                                "\(field) must point at a publicly routable host, not a loopback, private, link-local, reserved or local address",
                                field: field)
        }
    }

    /// Whether a numeric address (`93.184.215.14`, `2606:2800:21f::1`, no brackets) is publicly
    /// routable by the same rules as endpoint hosts. Meant for the egress path, which must re-check
    /// the address it actually connects to after DNS resolution. Anything unparsable is `false`.
    public static func isPubliclyRoutable(address: String) -> Bool {
        if address.contains(":") {
            return IPv6Address(address)?.isPubliclyRoutable ?? false
        }
        let parts = address.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard IPv4Address.isCanonical(parts), let v4 = IPv4Address.parse(parts: parts, leadingZeroIsOctal: false) else {
            return false
        }
        return v4.isPubliclyRoutable
    }

    enum HostVerdict: Equatable {
        case publicName, publicAddress, notRoutable
        case malformed(String)
    }

    /// Suffixes (and whole names) that never name a public service: RFC 6761/6762/8375/9476
    /// special-use names, ICANN's `.internal`, and TLDs widely used for private networks.
    static let localSuffixes: [String] = [
        "localhost", "local", "internal", "localdomain", "home.arpa", "test", "invalid", "example",
        "onion", "alt", "lan", "intranet", "corp", "home", "private", "in-addr.arpa", "ip6.arpa",
    ]

    /// Classifies a lower-cased, non-bracketed host.
    static func classifyName(_ host: String) -> HostVerdict {
        var name = host
        if name.hasSuffix(".") { name.removeLast() }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        guard !name.isEmpty, labels.allSatisfy({ !$0.isEmpty }) else { return .malformed("invalid host") }
        guard name.utf8.allSatisfy({ ByteClass.isAlphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") }) else {
            return .malformed("invalid host")
        }
        // The WHATWG URL standard reads a host whose last label is a number as an IPv4 address.
        if let last = labels.last, endsInNumber(String(last)) {
            return classifyIPv4Host(labels.map(String.init))
        }
        guard labels.count >= 2 else { return .notRoutable }
        for suffix in localSuffixes where name == suffix || name.hasSuffix("." + suffix) {
            return .notRoutable
        }
        guard labels.allSatisfy({ $0.utf8.count <= 63 }), name.utf8.count <= 253 else { return .malformed("invalid host") }
        return .publicName
    }

    static func endsInNumber(_ label: String) -> Bool {
        let b = Array(label.utf8)
        if b.allSatisfy(ByteClass.isDigit) { return true }
        if b.count >= 2, b[0] == UInt8(ascii: "0"), b[1] == UInt8(ascii: "x") || b[1] == UInt8(ascii: "X") {
            return b[2...].allSatisfy(Text.isHexDigit)
        }
        return false
    }

    static func classifyIPv4Host(_ parts: [String]) -> HostVerdict {
        guard let asParsed = IPv4Address.parse(parts: parts, leadingZeroIsOctal: true) else {
            return .malformed("invalid IPv4 address")
        }
        // A reader that ignores octal would see a different address; both must be public.
        let asDecimal = IPv4Address.parse(parts: parts, leadingZeroIsOctal: false)
        if !asParsed.isPubliclyRoutable || (asDecimal.map { !$0.isPubliclyRoutable } ?? false) {
            return .notRoutable
        }
        guard IPv4Address.isCanonical(parts) else { return .malformed("write an IPv4 address in dotted-decimal form") }
        return .publicAddress
    }
}

/// An IPv4 address as a 32-bit number.
struct IPv4Address: Equatable {
    var value: UInt32

    init(_ value: UInt32) { self.value = value }

    init(_ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: UInt32) {
        value = a << 24 | b << 16 | c << 8 | d
    }

    /// Reads a host's labels the way `inet_aton` does: one to four parts, each decimal, octal
    /// (leading `0`) or hex (`0x`), the last part filling the remaining bytes.
    static func parse(parts: [String], leadingZeroIsOctal: Bool) -> IPv4Address? {
        guard (1...4).contains(parts.count) else { return nil }
        var numbers: [UInt64] = []
        for part in parts {
            guard let n = parseNumber(part, leadingZeroIsOctal: leadingZeroIsOctal) else { return nil }
            numbers.append(n)
        }
        var value: UInt64 = 0
        for n in numbers.dropLast() {
            guard n <= 255 else { return nil }
            value = value << 8 | n
        }
        let remainingBits = UInt64(8 * (5 - parts.count))
        let last = numbers[numbers.count - 1]
        guard last < (UInt64(1) << remainingBits) else { return nil }
        value = value << remainingBits | last
        return IPv4Address(UInt32(value))
    }

    private static func parseNumber(_ part: String, leadingZeroIsOctal: Bool) -> UInt64? {
        var bytes = Array(part.utf8)[...]
        guard !bytes.isEmpty else { return nil }
        var radix: UInt64 = 10
        if bytes.count >= 2, bytes[bytes.startIndex] == UInt8(ascii: "0"),
           bytes[bytes.startIndex + 1] == UInt8(ascii: "x") || bytes[bytes.startIndex + 1] == UInt8(ascii: "X") {
            radix = 16
            bytes = bytes.dropFirst(2)
        } else if leadingZeroIsOctal, bytes.count >= 2, bytes[bytes.startIndex] == UInt8(ascii: "0") {
            radix = 8
            bytes = bytes.dropFirst()
        }
        var value: UInt64 = 0
        for b in bytes {
            guard let digit = Text.hexValue(b).map(UInt64.init), digit < radix else { return nil }
            value = value * radix + digit
            if value > UInt64(UInt32.max) { return nil }
        }
        return value
    }

    /// Exactly four decimal parts without leading zeros: the one spelling every parser agrees on.
    static func isCanonical(_ parts: [String]) -> Bool {
        parts.count == 4 && parts.allSatisfy { part in
            let b = Array(part.utf8)
            return !b.isEmpty && b.count <= 3 && b.allSatisfy(ByteClass.isDigit) && (b.count == 1 || b[0] != UInt8(ascii: "0"))
                && (Int(part) ?? 256) <= 255
        }
    }

    private func within(_ base: IPv4Address, _ prefix: Int) -> Bool {
        let mask: UInt32 = prefix == 0 ? 0 : ~UInt32(0) << UInt32(32 - prefix)
        return value & mask == base.value & mask
    }

    /// False for every IANA special-purpose block that is not globally reachable, plus multicast,
    /// the reserved class E and broadcast.
    var isPubliclyRoutable: Bool {
        let blocked: [(IPv4Address, Int)] = [
            (IPv4Address(0, 0, 0, 0), 8),         // "this network", unspecified
            (IPv4Address(10, 0, 0, 0), 8),        // private
            (IPv4Address(100, 64, 0, 0), 10),     // carrier-grade NAT
            (IPv4Address(127, 0, 0, 0), 8),       // loopback
            (IPv4Address(169, 254, 0, 0), 16),    // link-local (cloud metadata lives here)
            (IPv4Address(172, 16, 0, 0), 12),     // private
            (IPv4Address(192, 0, 0, 0), 24),      // IETF protocol assignments
            (IPv4Address(192, 0, 2, 0), 24),      // documentation
            (IPv4Address(192, 31, 196, 0), 24),   // AS112
            (IPv4Address(192, 52, 193, 0), 24),   // AMT
            (IPv4Address(192, 88, 99, 0), 24),    // 6to4 relay anycast (deprecated)
            (IPv4Address(192, 168, 0, 0), 16),    // private
            (IPv4Address(192, 175, 48, 0), 24),   // direct delegation AS112
            (IPv4Address(198, 18, 0, 0), 15),     // benchmarking
            (IPv4Address(198, 51, 100, 0), 24),   // documentation
            (IPv4Address(203, 0, 113, 0), 24),    // documentation
            (IPv4Address(224, 0, 0, 0), 4),       // multicast
            (IPv4Address(240, 0, 0, 0), 4),       // reserved, and broadcast
        ]
        return !blocked.contains { within($0.0, $0.1) }
    }
}

/// An IPv6 address as eight 16-bit pieces.
struct IPv6Address: Equatable {
    var pieces: [UInt16]

    /// Parses RFC 4291 text: hex pieces, at most one `::`, optionally a dotted-decimal IPv4 tail.
    /// Zone identifiers are not accepted.
    init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 45,
              bytes.allSatisfy({ Text.isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }) else {
            return nil
        }
        guard let halves = splitOnDoubleColon(bytes) else { return nil }

        func parseHalf(_ half: String, allowIPv4Tail: Bool) -> [UInt16]? {
            if half.isEmpty { return [] }
            let groups = half.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            var out: [UInt16] = []
            for (i, group) in groups.enumerated() {
                if group.contains(".") {
                    guard allowIPv4Tail, i == groups.count - 1 else { return nil }
                    let parts = group.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
                    guard IPv4Address.isCanonical(parts),
                          let v4 = IPv4Address.parse(parts: parts, leadingZeroIsOctal: false) else { return nil }
                    out.append(UInt16(v4.value >> 16))
                    out.append(UInt16(v4.value & 0xFFFF))
                } else {
                    let g = Array(group.utf8)
                    guard (1...4).contains(g.count) else { return nil }
                    var v: UInt32 = 0
                    for b in g {
                        guard let d = Text.hexValue(b) else { return nil }
                        v = v << 4 | d
                    }
                    out.append(UInt16(v))
                }
            }
            return out
        }

        if halves.count == 1 {
            guard let all = parseHalf(halves[0], allowIPv4Tail: true), all.count == 8 else { return nil }
            pieces = all
        } else {
            guard let head = parseHalf(halves[0], allowIPv4Tail: false),
                  let tail = parseHalf(halves[1], allowIPv4Tail: true),
                  head.count + tail.count <= 7 else { return nil }
            pieces = head + [UInt16](repeating: 0, count: 8 - head.count - tail.count) + tail
        }
    }

    private func embeddedIPv4(at index: Int) -> IPv4Address {
        IPv4Address(UInt32(pieces[index]) << 16 | UInt32(pieces[index + 1]))
    }

    /// True only inside global unicast `2000::/3`, outside its special-purpose blocks. NAT64 and
    /// 6to4 addresses are judged by the IPv4 address they carry.
    var isPubliclyRoutable: Bool {
        let p = pieces
        // Well-known NAT64 prefix 64:ff9b::/96: the embedded IPv4 address decides.
        if p[0] == 0x0064, p[1] == 0xFF9B, p[2...5].allSatisfy({ $0 == 0 }) {
            return embeddedIPv4(at: 6).isPubliclyRoutable
        }
        // Everything outside 2000::/3 (::/8 with its mapped and compatible forms, 64:ff9b:1::/48,
        // 100::/64, fc00::/7, fe80::/10, fec0::/10, ff00::/8, ...) is refused.
        guard p[0] & 0xE000 == 0x2000 else { return false }
        if p[0] == 0x2001, p[1] < 0x0200 { return false }        // 2001::/23 IETF protocol assignments, Teredo, ORCHID
        if p[0] == 0x2001, p[1] == 0x0DB8 { return false }       // documentation
        if p[0] == 0x2002 {                                      // 6to4: bits 16..47 are an IPv4 address
            return embeddedIPv4(at: 1).isPubliclyRoutable
        }
        if p[0] & 0xFFF0 == 0x3FF0 { return false }              // 3fff::/20 documentation
        if p[0] == 0x2620, p[1] == 0x004F, p[2] == 0x8000 { return false } // AS112-v6
        return true
    }
}

/// Splits IPv6 text on its one `::`, returning nil for a lone leading or trailing `:` or more than
/// one `::` (including `:::`).
private func splitOnDoubleColon(_ b: [UInt8]) -> [String]? {
    var positions: [Int] = []
    var i = 0
    while i + 1 < b.count {
        if b[i] == UInt8(ascii: ":") && b[i + 1] == UInt8(ascii: ":") {
            positions.append(i)
            i += 2
            if i < b.count, b[i] == UInt8(ascii: ":") { return nil }
        } else {
            i += 1
        }
    }
    guard positions.count <= 1 else { return nil }
    if let p = positions.first {
        return [String(decoding: b[0..<p], as: UTF8.self), String(decoding: b[(p + 2)...], as: UTF8.self)]
    }
    guard b.first != UInt8(ascii: ":"), b.last != UInt8(ascii: ":") else { return nil }
    return [String(decoding: b, as: UTF8.self)]
}
