import PWCore

/// Why the backend's sender says a token is dead: the only reasons that are evidence of it
/// (FCM `UNREGISTERED`, APNs `410`, Web Push `404`/`410`, Expo `DeviceNotRegistered` and the like).
public enum DeadReason: String, Sendable, CaseIterable {
    case unregistered, expired, invalid
}

/// One report of a dead token, as the server-to-server API took it.
public struct DeadTokenReport: Sendable {
    public let pushToken: String
    public let reason: DeadReason
    /// When the sender saw the token die (ms since the epoch), if it said.
    public let observedMillis: Int64?

    public init(pushToken: String, reason: DeadReason, observedMillis: Int64?) {
        self.pushToken = pushToken
        self.reason = reason
        self.observedMillis = observedMillis
    }
}

/// The body of `POST /v1/apps/{app}/tokens/dead`: `{"reports": [{"push_token", "reason",
/// "observed_at"?}]}`. The envelope is judged whole (a bad one refuses the request); each report
/// on its own, so one bad report is refused with its index and the others go on.
public enum DeadTokenRequest {
    public static let maxReports = 1000
    /// The longest token taken: a Web Push endpoint URL's bound, the longest token shape.
    public static let maxTokenBytes = EndpointURL.maxLength

    /// Each report, or why it is refused (with its `field`, `reports[3].reason`).
    public static func parse(_ body: [UInt8]) throws(ContractError) -> [Result<DeadTokenReport, ContractError>] {
        let object = try RequestValidator.parseObject(body)
        for key in object.keys where key != "reports" {
            throw ContractError(.unknownField, "unknown field \(Self.quoted(key)); the body holds reports only", field: "reports")
        }
        guard let value = object["reports"] else {
            throw ContractError(.invalidRequest, "reports is required", field: "reports")
        }
        guard let items = value.arrayValue else {
            throw ContractError(.invalidRequest, "reports must be an array, found \(value.typeName)", field: "reports")
        }
        guard items.count <= maxReports else {
            throw ContractError(.invalidRequest, "at most \(maxReports) reports per request, found \(items.count)", field: "reports")
        }
        return items.enumerated().map { index, item in
            Result { () throws(ContractError) in try report(item, at: "reports[\(index)]") }
        }
    }

    static func report(_ item: JSONValue, at path: String) throws(ContractError) -> DeadTokenReport {
        guard let object = item.objectValue else {
            throw ContractError(.invalidRequest, "\(path) must be an object", field: path)
        }
        for key in object.keys where !["push_token", "reason", "observed_at"].contains(key) {
            throw ContractError(.unknownField, "\(path) has an unknown field \(quoted(key))", field: path)
        }
        let tokenPath = path + ".push_token"
        guard let token = object["push_token"]?.stringValue else {
            throw ContractError(.invalidRequest, "\(tokenPath) is required and must be a string", field: tokenPath)
        }
        guard !token.isEmpty, token.utf8.count <= maxTokenBytes, !TextRules.hasForbiddenCharacter(token), !TextRules.isBlank(token) else {
            throw ContractError(.invalidTokenFormat, "\(tokenPath) must be a push token of 1 to \(maxTokenBytes) bytes with no control characters",
                                field: tokenPath)
        }
        let reasonPath = path + ".reason"
        guard let reason = object["reason"]?.stringValue.flatMap(DeadReason.init(rawValue:)) else {
            throw ContractError(.invalidReason, "\(reasonPath) must be one of unregistered, expired, invalid; other failures are no evidence that a token is dead",
                                field: reasonPath)
        }
        var observed: Int64?
        if let value = object["observed_at"], value != .null {
            let observedPath = path + ".observed_at"
            guard let millis = observedMillis(value) else {
                throw ContractError(.invalidRequest, "\(observedPath) must be an RFC 3339 timestamp (2026-07-01T10:00:00Z) or epoch milliseconds",
                                    field: observedPath)
            }
            observed = millis
        }
        return DeadTokenReport(pushToken: token, reason: reason, observedMillis: observed)
    }

    /// An RFC 3339 timestamp with its offset, or a whole number of milliseconds since the epoch,
    /// within the years RFC 3339 can write.
    static func observedMillis(_ value: JSONValue) -> Int64? {
        switch value {
        case .number(let text):
            guard let millis = Int64(text), RFC3339.representableMillis.contains(millis) else { return nil }
            return millis
        case .string(let text):
            return Timestamp.epochMillis(text)
        default:
            return nil
        }
    }

    /// A client's field name in a message, clipped and with its controls escaped.
    private static func quoted(_ key: String) -> String {
        let clipped = key.unicodeScalars.prefix(64).map { TextRules.isForbidden($0) ? "?" : String($0) }.joined()
        return "'" + clipped + "'"
    }
}

extension Timestamp {
    /// The instant an RFC 3339 timestamp names, in ms since the epoch (fractions past the
    /// millisecond dropped); nil when `isValid` refuses it.
    static func epochMillis(_ text: String) -> Int64? {
        guard isValid(text) else { return nil }
        let b = Array(text.utf8)
        func number(_ start: Int, _ count: Int) -> Int64 {
            var value: Int64 = 0
            for i in start..<(start + count) { value = value * 10 + Int64(b[i] - 0x30) }
            return value
        }
        let year = number(0, 4), month = number(5, 2), day = number(8, 2)
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        var millis = ((days * 24 + number(11, 2)) * 60 + number(14, 2)) * 60_000 + number(17, 2) * 1000
        var i = 19
        if b[i] == UInt8(ascii: ".") {
            i += 1
            var fraction: Int64 = 0, digits = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                if digits < 3 { fraction = fraction * 10 + Int64(b[i] - 0x30) }
                digits += 1
                i += 1
            }
            if digits < 3 { for _ in digits..<3 { fraction *= 10 } }
            millis += fraction
        }
        if b[i] != UInt8(ascii: "Z") {
            let offset = (number(i + 1, 2) * 60 + number(i + 4, 2)) * 60_000
            millis += b[i] == UInt8(ascii: "+") ? -offset : offset
        }
        return millis
    }
}
