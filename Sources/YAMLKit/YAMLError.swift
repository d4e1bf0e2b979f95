/// One reason a YAML text was refused.
public struct YAMLIssue: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// libyaml could not parse the text; the message is libyaml's problem text.
        case syntax
        /// `*name`: a reviewer reading the file would have to chase the anchor to know the value.
        case alias
        /// `&name`: only useful with aliases, refused with them.
        case anchor
        /// An explicit tag (`!!str`, `!custom`): values are typed by the schema, not the file.
        case tag
        /// A second `---` document: a policy file is one document.
        case multipleDocuments
    }

    public var kind: Kind
    public var mark: Mark
    public var message: String

    public init(kind: Kind, mark: Mark, message: String) {
        self.kind = kind
        self.mark = mark
        self.message = message
    }

    public var description: String { "\(mark): \(message)" }
}

/// Why `YAMLParser.parse` refused a text. A syntax error stops parsing, so it is always the last
/// issue; refusals (aliases, anchors, tags) before it are all reported.
public struct YAMLError: Error, Sendable, Equatable, CustomStringConvertible {
    public var issues: [YAMLIssue]

    public init(issues: [YAMLIssue]) { self.issues = issues }

    public var description: String { issues.map(\.description).joined(separator: "\n") }
}
