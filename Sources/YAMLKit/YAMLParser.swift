private import CYAML

/// Reads one YAML document into a `YAMLNode` tree with libyaml's event API
/// (<https://pyyaml.org/wiki/LibYAML>, `yaml_parser_parse`).
///
/// The parser and event handles live only inside `parse`: allocated at its start and freed in
/// `defer`, so no C pointer outlives the call. Stateless and thread-safe: each call owns its own
/// libyaml parser.
public enum YAMLParser {
    /// Parses `text`.
    ///
    /// - Returns: the document's root node, or nil when the text holds no document (empty or only
    ///   comments).
    /// - Throws: `YAMLError` listing every alias, anchor and tag (refused: a policy file must read
    ///   the same to a reviewer as to the loader), a second document, or libyaml's syntax error.
    public static func parse(_ text: String) throws(YAMLError) -> YAMLNode? {
        // libyaml reads the input in place: the buffer must stay alive until parsing ends, so the
        // whole parse runs inside this scope. The trailing NUL gives an empty text a valid pointer.
        var bytes = Array(text.utf8)
        let count = bytes.count
        bytes.append(0)
        let outcome = bytes.withUnsafeBufferPointer { buffer in
            parseBuffer(buffer.baseAddress!, count: count)
        }
        switch outcome {
        case .success(let root): return root
        case .failure(let error): throw error
        }
    }

    private static func parseBuffer(_ input: UnsafePointer<UInt8>, count: Int) -> Result<YAMLNode?, YAMLError> {
        // Heap-allocated so libyaml sees one stable address for the whole parse.
        let parser = UnsafeMutablePointer<yaml_parser_t>.allocate(capacity: 1)
        defer { parser.deallocate() }
        guard yaml_parser_initialize(parser) == 1 else {
            return .failure(YAMLError(issues: [YAMLIssue(kind: .syntax, mark: Mark(line: 1, column: 1),
                                                         message: "cannot initialize the YAML parser (out of memory)")]))
        }
        defer { yaml_parser_delete(parser) }
        yaml_parser_set_input_string(parser, input, count)

        let event = UnsafeMutablePointer<yaml_event_t>.allocate(capacity: 1)
        defer { event.deallocate() }

        var builder = TreeBuilder()
        while true {
            guard yaml_parser_parse(parser, event) == 1 else {
                builder.issues.append(syntaxIssue(parser.pointee))
                break
            }
            let done = builder.consume(event.pointee)
            yaml_event_delete(event)
            if done { break }
        }
        if !builder.issues.isEmpty { return .failure(YAMLError(issues: builder.issues)) }
        return .success(builder.root)
    }

    private static func syntaxIssue(_ parser: yaml_parser_t) -> YAMLIssue {
        let problem = parser.problem.map { String(cString: $0) } ?? "unknown YAML error"
        var message = problem
        if let context = parser.context {
            let at = mark(parser.context_mark)
            message = "\(problem) (\(String(cString: context)) at line \(at.line), column \(at.column))"
        }
        return YAMLIssue(kind: .syntax, mark: mark(parser.problem_mark), message: message)
    }

    fileprivate static func mark(_ m: yaml_mark_t) -> Mark {
        Mark(line: Int(m.line) + 1, column: Int(m.column) + 1)
    }
}

/// Turns the event stream into a tree with an explicit stack of open collections.
private struct TreeBuilder {
    enum Frame {
        case sequence(Mark, [YAMLNode])
        case mapping(Mark, [YAMLNode])
    }

    var stack: [Frame] = []
    var root: YAMLNode?
    var issues: [YAMLIssue] = []
    var documents = 0

    /// Returns true when the stream ended or parsing must stop.
    mutating func consume(_ event: yaml_event_t) -> Bool {
        let at = YAMLParser.mark(event.start_mark)
        switch event.type {
        case YAML_STREAM_END_EVENT:
            return true
        case YAML_DOCUMENT_START_EVENT:
            documents += 1
            if documents > 1 {
                issues.append(YAMLIssue(kind: .multipleDocuments, mark: at,
                                        message: "a policy file holds exactly one YAML document; found a second one"))
                return true
            }
        case YAML_ALIAS_EVENT:
            let name = string(event.data.alias.anchor) ?? ""
            issues.append(YAMLIssue(kind: .alias, mark: at,
                                    message: "alias '*\(name)' is not allowed in policy files: aliases hide what a reviewer reads"))
            append(YAMLNode(.scalar("", .plain), mark: at))
        case YAML_SCALAR_EVENT:
            let scalar = event.data.scalar
            check(anchor: scalar.anchor, tag: scalar.tag, at: at)
            let text: String
            if let value = scalar.value {
                text = String(decoding: UnsafeBufferPointer(start: value, count: Int(scalar.length)), as: UTF8.self)
            } else {
                text = ""
            }
            append(YAMLNode(.scalar(text, style(scalar.style)), mark: at))
        case YAML_SEQUENCE_START_EVENT:
            check(anchor: event.data.sequence_start.anchor, tag: event.data.sequence_start.tag, at: at)
            stack.append(.sequence(at, []))
        case YAML_MAPPING_START_EVENT:
            check(anchor: event.data.mapping_start.anchor, tag: event.data.mapping_start.tag, at: at)
            stack.append(.mapping(at, []))
        case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
            guard let frame = stack.popLast() else { return false }
            switch frame {
            case .sequence(let start, let items):
                append(YAMLNode(.sequence(items), mark: start))
            case .mapping(let start, let items):
                var pairs: [YAMLNode.Pair] = []
                pairs.reserveCapacity(items.count / 2)
                var index = 0
                while index + 1 < items.count {
                    pairs.append(YAMLNode.Pair(key: items[index], value: items[index + 1]))
                    index += 2
                }
                append(YAMLNode(.mapping(pairs), mark: start))
            }
        default:
            break
        }
        return false
    }

    private mutating func append(_ node: YAMLNode) {
        guard let top = stack.popLast() else {
            root = node
            return
        }
        switch top {
        case .sequence(let mark, var items):
            items.append(node)
            stack.append(.sequence(mark, items))
        case .mapping(let mark, var items):
            items.append(node)
            stack.append(.mapping(mark, items))
        }
    }

    private mutating func check(anchor: UnsafeMutablePointer<yaml_char_t>?, tag: UnsafeMutablePointer<yaml_char_t>?, at: Mark) {
        if let name = string(anchor) {
            issues.append(YAMLIssue(kind: .anchor, mark: at,
                                    message: "anchor '&\(name)' is not allowed in policy files: anchors and aliases hide what a reviewer reads"))
        }
        if let tag = string(tag) {
            issues.append(YAMLIssue(kind: .tag, mark: at,
                                    message: "tag '\(tag)' is not allowed in policy files: each key's type is fixed by the policy format"))
        }
    }

    private func string(_ pointer: UnsafeMutablePointer<yaml_char_t>?) -> String? {
        guard let pointer else { return nil }
        return String(cString: pointer)
    }

    private func style(_ style: yaml_scalar_style_t) -> ScalarStyle {
        switch style {
        case YAML_SINGLE_QUOTED_SCALAR_STYLE: return .singleQuoted
        case YAML_DOUBLE_QUOTED_SCALAR_STYLE: return .doubleQuoted
        case YAML_LITERAL_SCALAR_STYLE: return .literal
        case YAML_FOLDED_SCALAR_STYLE: return .folded
        default: return .plain
        }
    }
}
