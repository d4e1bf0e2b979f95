/// A position in the YAML text, 1-based (libyaml's marks are 0-based; converted on the way out).
/// Columns count characters, not bytes.
public struct Mark: Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    public var description: String { "\(line):\(column)" }
}

/// How a scalar was written. Kept so a reader can tell a quoted `"123"` from a plain `123`, and a
/// plain `null` from a quoted `"null"`.
public enum ScalarStyle: Sendable, Hashable {
    case plain, singleQuoted, doubleQuoted, literal, folded
}

/// One node of a YAML document, exactly as written: no tag resolution, no merging, mapping keys
/// in order and duplicates kept (the policy loader reports them).
public struct YAMLNode: Sendable, Equatable {
    public struct Pair: Sendable, Equatable {
        public var key: YAMLNode
        public var value: YAMLNode
        public init(key: YAMLNode, value: YAMLNode) {
            self.key = key
            self.value = value
        }
    }

    public enum Kind: Sendable, Equatable {
        case scalar(String, ScalarStyle)
        case sequence([YAMLNode])
        case mapping([Pair])
    }

    public var kind: Kind
    /// Where the node starts.
    public var mark: Mark

    public init(_ kind: Kind, mark: Mark) {
        self.kind = kind
        self.mark = mark
    }

    /// The scalar's text, or nil for a sequence or mapping.
    public var scalar: String? {
        if case .scalar(let text, _) = kind { return text }
        return nil
    }

    /// A plain scalar YAML 1.2's core schema reads as null: empty, `~`, `null`, `Null`, `NULL`.
    public var isNull: Bool {
        guard case .scalar(let text, .plain) = kind else { return false }
        return text.isEmpty || text == "~" || text == "null" || text == "Null" || text == "NULL"
    }
}
