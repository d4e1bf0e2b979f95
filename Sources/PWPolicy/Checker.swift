import PWCore
import YAMLKit

/// Collects diagnostics while the loader walks a YAML tree, and reads typed values out of nodes.
/// Every reader reports its own problem and returns nil, so callers just skip what failed and go
/// on: that is how one pass reports every error. Used by one loader call on one thread.
final class Checker {
    let file: String
    private(set) var diagnostics: [Diagnostic] = []
    /// Places of values judged after loading (`Policy.locations`).
    private(set) var locations: [String: PolicyLocation] = [:]

    init(file: String) { self.file = file }

    func report(_ mark: Mark, _ path: String, _ message: String) {
        diagnostics.append(Diagnostic(file: file, line: mark.line, column: mark.column, path: path, message: message))
    }

    /// Records where the value at `path` is, for a diagnostic found after loading.
    func locate(_ mark: Mark, _ path: String) {
        locations[path] = PolicyLocation(line: mark.line, column: mark.column)
    }

    static func child(_ path: String, _ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }
    static func index(_ path: String, _ index: Int) -> String { "\(path)[\(index)]" }

    /// What a node is, in a reviewer's words. Never the value itself: a misplaced secret must not
    /// be echoed into logs and CI output.
    static func describe(_ node: YAMLNode) -> String {
        switch node.kind {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .scalar(let text, let style):
            if node.isNull { return "null" }
            if style == .plain, Values.number(Substring(text)) != nil { return "a number" }
            return "a string"
        }
    }

    func mapping(_ node: YAMLNode, _ path: String) -> [YAMLNode.Pair]? {
        guard case .mapping(let pairs) = node.kind else {
            report(node.mark, path, "expected a mapping, found \(Self.describe(node))")
            return nil
        }
        return pairs
    }

    func list(_ node: YAMLNode, _ path: String) -> [YAMLNode]? {
        guard case .sequence(let items) = node.kind else {
            report(node.mark, path, "expected a list, found \(Self.describe(node))")
            return nil
        }
        return items
    }

    /// A non-null, non-empty scalar. Plain numbers are accepted as their text.
    func string(_ node: YAMLNode, _ path: String) -> String? {
        guard case .scalar(let text, _) = node.kind, !node.isNull else {
            report(node.mark, path, "expected a string, found \(Self.describe(node))")
            return nil
        }
        guard !text.isEmpty else {
            report(node.mark, path, "must not be empty")
            return nil
        }
        return text
    }

    /// A plain decimal integer in `range`. A quoted number is refused: the policy is typed, and a
    /// reviewer should not have to wonder whether `"3"` and `3` mean the same thing.
    func int(_ node: YAMLNode, _ path: String, in range: ClosedRange<Int>) -> Int? {
        guard case .scalar(let text, let style) = node.kind, !node.isNull else {
            report(node.mark, path, "expected an integer, found \(Self.describe(node))")
            return nil
        }
        guard style == .plain else {
            report(node.mark, path, "expected an integer, found a quoted string; write numbers without quotes")
            return nil
        }
        let negative = text.hasPrefix("-")
        guard let magnitude = Values.number(negative ? text.dropFirst() : Substring(text)) else {
            report(node.mark, path, "expected an integer, found a string")
            return nil
        }
        let value = negative ? -magnitude : magnitude
        guard range.contains(value) else {
            report(node.mark, path, "must be between \(range.lowerBound) and \(range.upperBound), found \(text)")
            return nil
        }
        return value
    }

    /// One of `allowed`, compared exactly.
    func choice(_ node: YAMLNode, _ path: String, _ allowed: [String]) -> String? {
        guard let text = string(node, path) else { return nil }
        guard allowed.contains(text) else {
            report(node.mark, path, "invalid value '\(Self.clip(text))'; expected one of: \(allowed.joined(separator: ", "))")
            return nil
        }
        return text
    }

    /// A `duration` that must be whole seconds (`leeway`, `cache_ttl`), in seconds.
    func wholeSeconds(_ node: YAMLNode, _ path: String, min: Int, max: Int?) -> Int? {
        duration(node, path, min: min, max: max).flatMap { millis in
            guard millis % 1000 == 0 else {
                report(node.mark, path, "must be a whole number of seconds")
                return nil
            }
            return millis / 1000
        }
    }

    func duration(_ node: YAMLNode, _ path: String, min: Int, max: Int?) -> Int? {
        guard let text = scalarText(node, path, expected: "a duration") else { return nil }
        guard let millis = Values.durationMillis(text) else {
            report(node.mark, path, "expected a duration like 200ms, 30s, 5m, 1h or 7d, found '\(Self.clip(text))'")
            return nil
        }
        if millis < min || (max.map { millis > $0 } ?? false) {
            let bound = max.map { "between \(Values.formatMillis(min)) and \(Values.formatMillis($0))" }
                ?? "at least \(Values.formatMillis(min))"
            report(node.mark, path, "must be \(bound), found \(text)")
            return nil
        }
        return millis
    }

    func size(_ node: YAMLNode, _ path: String, min: Int, max: Int) -> Int? {
        guard let text = scalarText(node, path, expected: "a size") else { return nil }
        guard let bytes = Values.sizeBytes(text) else {
            report(node.mark, path, "expected a size like 512, 16KiB or 1MiB, found '\(Self.clip(text))'")
            return nil
        }
        guard bytes >= min && bytes <= max else {
            report(node.mark, path, "must be between \(Values.formatBytes(min)) and \(Values.formatBytes(max)), found \(text)")
            return nil
        }
        return bytes
    }

    func rate(_ node: YAMLNode, _ path: String) -> ClientPolicy.RateLimit? {
        guard let text = scalarText(node, path, expected: "a rate") else { return nil }
        guard let rate = Values.rate(text) else {
            report(node.mark, path, "expected a rate like 40/s, 20/min or 1000/h, found '\(Self.clip(text))'")
            return nil
        }
        return ClientPolicy.RateLimit(requests: rate.requests, perSeconds: rate.perSeconds)
    }

    /// `{env: NAME}` or `{file: /abs/path}`. A scalar here is most likely a pasted secret, so the
    /// message says what to write instead and never repeats the value.
    func secret(_ node: YAMLNode, _ path: String) -> SecretRef? {
        let expected = "{env: NAME} or {file: /absolute/path}"
        switch node.kind {
        case .scalar where node.isNull:
            report(node.mark, path, "expected a secret reference \(expected), found null")
            return nil
        case .scalar:
            report(node.mark, path, "a secret must never be written into the policy file; use \(expected)")
            return nil
        case .sequence:
            report(node.mark, path, "expected a secret reference \(expected), found a list")
            return nil
        case .mapping:
            let fields = Fields(self, node, path, allowed: ["env", "file"])
            let env = fields["env"]
            let file = fields["file"]
            switch (env, file) {
            case (let env?, nil):
                let at = Self.child(path, "env")
                guard let name = string(env, at) else { return nil }
                guard Self.isEnvName(name) else {
                    report(env.mark, at, "expected an environment variable name (letters, digits and _, not starting with a digit)")
                    return nil
                }
                return .env(name)
            case (nil, let file?):
                let at = Self.child(path, "file")
                guard let filePath = absolutePath(file, at) else { return nil }
                return .file(filePath)
            case (nil, nil):
                if fields.isClean { report(node.mark, path, "expected a secret reference \(expected)") }
                return nil
            case (_?, let file?):
                report(file.mark, path, "give exactly one of env or file")
                return nil
            }
        }
    }

    func absolutePath(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = string(node, path) else { return nil }
        guard text.hasPrefix("/") else {
            report(node.mark, path, "expected an absolute path (starting with /)")
            return nil
        }
        return text
    }

    private func scalarText(_ node: YAMLNode, _ path: String, expected: String) -> String? {
        guard case .scalar(let text, _) = node.kind, !node.isNull else {
            report(node.mark, path, "expected \(expected), found \(Self.describe(node))")
            return nil
        }
        return text
    }

    static func isEnvName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(first >= 0x30 && first <= 0x39) else { return false }
        return name.utf8.allSatisfy { ByteClass.isAlphanumeric($0) || $0 == 0x5F }
    }

    /// Keeps echoed values short in messages.
    static func clip(_ text: String) -> String {
        text.count <= 40 ? text : String(text.prefix(37)) + "..."
    }
}

/// A mapping checked for duplicate and unknown keys, read by key afterwards.
struct Fields {
    let checker: Checker
    let path: String
    let mark: Mark
    private var values: [String: YAMLNode] = [:]
    /// Keys in file order (first occurrences).
    private(set) var keys: [(key: String, mark: Mark)] = []
    /// False once a duplicate, unknown or non-string key was reported.
    private(set) var isClean = true
    /// False when the node was not a mapping (already reported), so missing keys are not.
    private(set) var isMapping = true

    /// - Parameter allowed: the keys this mapping may hold; nil for an open mapping (app ids).
    init(_ checker: Checker, _ node: YAMLNode, _ path: String, allowed: [String]?) {
        self.checker = checker
        self.path = path
        self.mark = node.mark
        guard let pairs = checker.mapping(node, path) else {
            isClean = false
            isMapping = false
            return
        }
        for pair in pairs {
            guard case .scalar(let key, _) = pair.key.kind, !pair.key.isNull else {
                checker.report(pair.key.mark, path, "keys must be strings, found \(Checker.describe(pair.key))")
                isClean = false
                continue
            }
            if let first = keys.first(where: { $0.key == key }) {
                checker.report(pair.key.mark, Checker.child(path, key),
                               "duplicate key '\(Checker.clip(key))' (first at line \(first.mark.line), column \(first.mark.column))")
                isClean = false
                continue
            }
            if let allowed, !allowed.contains(key) {
                checker.report(pair.key.mark, path, "unknown key '\(Checker.clip(key))'; allowed keys: \(allowed.joined(separator: ", "))")
                isClean = false
                continue
            }
            keys.append((key, pair.key.mark))
            values[key] = pair.value
        }
    }

    subscript(key: String) -> YAMLNode? { values[key] }

    func required(_ key: String) -> YAMLNode? {
        guard let node = values[key] else {
            if isMapping { checker.report(mark, path, "missing required key '\(key)'") }
            return nil
        }
        return node
    }

    func at(_ key: String) -> String { Checker.child(path, key) }
}
