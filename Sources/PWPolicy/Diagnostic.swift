/// One problem in a policy file, located for an editor: `file:line:column: path: message`.
public struct Diagnostic: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    /// 1-based.
    public var line: Int
    /// 1-based, in characters.
    public var column: Int
    /// Where in the policy the problem is, like `apps.shop.upstreams[1].api_key`; empty for problems
    /// of the file itself (YAML syntax, aliases).
    public var path: String
    public var message: String

    public init(file: String, line: Int, column: Int, path: String, message: String) {
        self.file = file
        self.line = line
        self.column = column
        self.path = path
        self.message = message
    }

    public var description: String {
        path.isEmpty ? "\(file):\(line):\(column): \(message)" : "\(file):\(line):\(column): \(path): \(message)"
    }
}

/// Every problem found in a policy file, in file order. The loader keeps going after an error so
/// one `policy check` run shows them all.
public struct PolicyDiagnostics: Error, Sendable, Equatable, CustomStringConvertible {
    public var diagnostics: [Diagnostic]

    public init(_ diagnostics: [Diagnostic]) { self.diagnostics = diagnostics }

    /// One diagnostic per line.
    public var description: String { diagnostics.map(\.description).joined(separator: "\n") }
}
