import PWCore
import PWPolicy

/// Reads one JSON object against a fixed list of fields, so that every value's JSON type is
/// checked before any rule or store sees it.
///
/// Construction walks the members once, in document order, and refuses the first member that is
/// either unknown (`unknown_field`, unless the policy drops unknown fields) or of the wrong JSON type
/// (`typeErrorCode`). `null` for any known field means "absent": an optional field is then simply
/// not set and a required one is refused by the caller as missing.
struct ObjectReader {
    enum Kind {
        case string, object, array

        var requirement: String {
            switch self {
            case .string: return "a string"
            case .object: return "an object"
            case .array: return "an array"
            }
        }

        func matches(_ value: JSONValue) -> Bool {
            switch (self, value) {
            case (.string, .string), (.object, .object), (.array, .array): return true
            default: return false
            }
        }
    }

    let object: JSONObject
    /// Prefix for field paths in refusals: `""` at the top level, `"events[3]."` inside an event.
    let prefix: String

    init(_ object: JSONObject, prefix: String = "", fields: [String: Kind], unknownFields: ClientPolicy.UnknownFields,
         typeErrorCode: ErrorCode) throws(ContractError) {
        self.object = object
        self.prefix = prefix
        for member in object.members {
            guard let kind = fields[member.key] else {
                if unknownFields == .reject {
                    let path = prefix + Text.displayKey(member.key)
                    throw ContractError(.unknownField, "unknown field \(path)", field: path)
                }
                continue
            }
            if case .null = member.value { continue }
            guard kind.matches(member.value) else {
                let path = prefix + member.key
                throw ContractError(typeErrorCode, "\(path) must be \(kind.requirement), not \(member.value.typeName)", field: path)
            }
        }
    }

    func path(_ name: String) -> String { prefix + name }

    /// The string value, or nil when absent or `null` (types were checked in `init`).
    func string(_ name: String) -> String? { object[name]?.stringValue }

    func object(_ name: String) -> JSONObject? { object[name]?.objectValue }

    func array(_ name: String) -> [JSONValue]? { object[name]?.arrayValue }
}
