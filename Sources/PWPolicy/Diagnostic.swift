/// One problem in a policy file, located for an editor: `file:line:column: path: message`, or
/// `file:line:column: path: warning: message` for something that does not stop a start.
public struct Diagnostic: Sendable, Equatable, CustomStringConvertible {
    public enum Severity: Sendable, Equatable {
        /// The policy cannot be served.
        case error
        /// Worth a reviewer's eye; the policy is still served (a skipped JWKS key, say).
        case warning
    }

    public var file: String
    /// 1-based.
    public var line: Int
    /// 1-based, in characters.
    public var column: Int
    /// Where in the policy the problem is, like `apps.shop.upstreams[1].api_key`; empty for problems
    /// of the file itself (YAML syntax, aliases).
    public var path: String
    public var message: String
    public var severity: Severity

    public init(file: String, line: Int, column: Int, path: String, message: String, severity: Severity = .error) {
        self.file = file
        self.line = line
        self.column = column
        self.path = path
        self.message = message
        self.severity = severity
    }

    public var description: String {
        let text = severity == .warning ? "warning: \(message)" : message
        return path.isEmpty ? "\(file):\(line):\(column): \(text)" : "\(file):\(line):\(column): \(path): \(text)"
    }
}

/// Where a value sits in the policy file (1-based line and column), for diagnostics found after
/// loading, such as the contents of a `jwks_file`.
public struct PolicyLocation: Sendable, Hashable {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
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
