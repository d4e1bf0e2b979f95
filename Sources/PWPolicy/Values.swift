import PWCore

/// Parsers for the policy's small value languages (durations, sizes, rates, URLs). Pure functions:
/// they return nil or a reason, and the loader turns that into a located diagnostic.
enum Values {
    /// `200ms`, `30s`, `5m`, `1h`, `7d` → milliseconds.
    static func durationMillis(_ text: String) -> Int? {
        let units: [(String, Int)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            let digits = text.dropLast(suffix.count)
            // "5ms" also ends in "s": only accept when the rest is all digits.
            guard let value = number(digits) else { continue }
            let (product, overflow) = value.multipliedReportingOverflow(by: factor)
            return overflow ? nil : product
        }
        return nil
    }

    /// `512`, `512B`, `16KiB`, `1MiB` → bytes.
    static func sizeBytes(_ text: String) -> Int? {
        let units: [(String, Int)] = [("KiB", 1024), ("MiB", 1024 * 1024), ("B", 1)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            guard let value = number(text.dropLast(suffix.count)) else { return nil }
            let (product, overflow) = value.multipliedReportingOverflow(by: factor)
            return overflow ? nil : product
        }
        return number(Substring(text))
    }

    /// `20/min`, `40/s`, `1000/h`.
    static func rate(_ text: String) -> (requests: Int, perSeconds: Int)? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let requests = number(parts[0]), requests > 0 else { return nil }
        switch parts[1] {
        case "s": return (requests, 1)
        case "min": return (requests, 60)
        case "h": return (requests, 3600)
        default: return nil
        }
    }

    /// Decimal digits only (no sign, no spaces), at most 9 so later arithmetic cannot overflow.
    static func number(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.count <= 9, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(text)
    }

    /// Millis back into the largest exact unit, for messages and the explainer.
    static func formatMillis(_ millis: Int) -> String {
        if millis == 0 { return "0s" }
        let units: [(String, Int)] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)]
        for (suffix, factor) in units where millis >= factor && millis % factor == 0 {
            return "\(millis / factor)\(suffix)"
        }
        return "\(millis)ms"
    }

    static func formatBytes(_ bytes: Int) -> String {
        if bytes >= 1024 * 1024 && bytes % (1024 * 1024) == 0 { return "\(bytes / (1024 * 1024))MiB" }
        if bytes >= 1024 && bytes % 1024 == 0 { return "\(bytes / 1024)KiB" }
        return "\(bytes)B"
    }
}

/// The parts of an absolute http(s) URL the policy cares about. Not a general URL parser: it
/// accepts `scheme://host[:port][/path][?query][#fragment]` and refuses the rest.
struct URLParts: Equatable {
    var scheme: String
    /// Without brackets for IPv6; lowercased.
    var host: String
    var port: Int?
    var path: String
    var query: String?
    var fragment: String?

    enum Problem: Error, Equatable {
        case malformed
        case credentials
    }

    static func parse(_ text: String) -> Result<URLParts, Problem> {
        guard let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix("://") else { return .failure(.malformed) }
        let scheme = text[..<colon].lowercased()
        guard !scheme.isEmpty, scheme.utf8.allSatisfy(isSchemeByte) else { return .failure(.malformed) }
        var rest = text[colon...].dropFirst(3)
        var fragment: String?
        if let hash = rest.firstIndex(of: "#") {
            fragment = String(rest[rest.index(after: hash)...])
            rest = rest[..<hash]
        }
        var query: String?
        if let mark = rest.firstIndex(of: "?") {
            query = String(rest[rest.index(after: mark)...])
            rest = rest[..<mark]
        }
        let authorityEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let path = String(rest[authorityEnd...])
        if authority.contains("@") { return .failure(.credentials) }
        guard case .success(let parsed) = Authority.parse(authority), parsed.port != 0,
              !parsed.host.contains(where: { $0 == " " || $0 == "\t" || $0 == "%" }) else { return .failure(.malformed) }
        let host = parsed.host
        let port = parsed.port
        if path.contains(where: { $0 == " " || $0 == "\t" }) { return .failure(.malformed) }
        return .success(URLParts(scheme: scheme, host: host.lowercased(), port: port, path: path, query: query, fragment: fragment))
    }

    private static func isSchemeByte(_ byte: UInt8) -> Bool {
        (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2B || byte == 0x2D || byte == 0x2E
    }

    /// 127.0.0.0/8, ::1 or localhost: the only hosts plain http may reach, since the traffic never
    /// leaves the machine.
    var isLoopback: Bool {
        if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4 else { return false }
        for octet in octets {
            guard octet.count <= 3, let value = Values.number(octet), value <= 255 else { return false }
        }
        return octets[0] == "127"
    }

    /// `host` or `host:port`, brackets restored for IPv6.
    var hostAndPort: String { Authority.format(host: host, port: port) }
}
