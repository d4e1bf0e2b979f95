import Testing
import YAMLKit

@Suite struct YAMLParserTests {
    @Test func keepsStylesOrderDuplicatesAndMarks() throws {
        let root = try #require(try YAMLParser.parse("""
        a: 123
        b: "123"
        c: ~
        d: 'null'
        a: [x, {y: z}]

        """))
        guard case .mapping(let pairs) = root.kind else {
            Issue.record("expected a mapping")
            return
        }
        #expect(pairs.map { $0.key.scalar } == ["a", "b", "c", "d", "a"])
        #expect(pairs[0].value.kind == .scalar("123", .plain))
        #expect(pairs[1].value.kind == .scalar("123", .doubleQuoted))
        #expect(pairs[2].value.isNull)
        #expect(!pairs[3].value.isNull)
        #expect(pairs[3].value.kind == .scalar("null", .singleQuoted))
        #expect(root.mark == Mark(line: 1, column: 1))
        #expect(pairs[1].value.mark == Mark(line: 2, column: 4))
        #expect(pairs[4].key.mark == Mark(line: 5, column: 1))
        guard case .sequence(let items) = pairs[4].value.kind else {
            Issue.record("expected a sequence")
            return
        }
        #expect(items[0].kind == .scalar("x", .plain))
        #expect(items[1].mark == Mark(line: 5, column: 8))
        #expect(items[1].kind == .mapping([YAMLNode.Pair(key: YAMLNode(.scalar("y", .plain), mark: Mark(line: 5, column: 9)),
                                                         value: YAMLNode(.scalar("z", .plain), mark: Mark(line: 5, column: 12)))]))
    }

    @Test func emptyTextHasNoDocument() throws {
        #expect(try YAMLParser.parse("") == nil)
        #expect(try YAMLParser.parse("# only a comment\n") == nil)
    }

    @Test func columnsCountCharactersNotBytes() throws {
        let root = try #require(try YAMLParser.parse("ö: ü\n"))
        guard case .mapping(let pairs) = root.kind else {
            Issue.record("expected a mapping")
            return
        }
        #expect(pairs[0].value.mark == Mark(line: 1, column: 4))
        #expect(pairs[0].value.scalar == "ü")
    }

    @Test func refusesAliasesAnchorsAndTagsTogether() {
        #expect(throws: YAMLError(issues: [
            YAMLIssue(kind: .anchor, mark: Mark(line: 1, column: 4),
                      message: "anchor '&x' is not allowed in policy files: anchors and aliases hide what a reviewer reads"),
            YAMLIssue(kind: .alias, mark: Mark(line: 2, column: 4),
                      message: "alias '*x' is not allowed in policy files: aliases hide what a reviewer reads"),
            YAMLIssue(kind: .tag, mark: Mark(line: 3, column: 4),
                      message: "tag '!custom' is not allowed in policy files: each key's type is fixed by the policy format"),
        ])) {
            try YAMLParser.parse("a: &x 1\nb: *x\nc: !custom 2\n")
        }
    }

    @Test func syntaxErrorCarriesLibyamlProblemAndPosition() {
        #expect(throws: YAMLError(issues: [
            YAMLIssue(kind: .syntax, mark: Mark(line: 2, column: 3),
                      message: "mapping values are not allowed in this context"),
        ])) {
            try YAMLParser.parse("a: b\n c: d\n")
        }
    }

    @Test func refusesASecondDocument() {
        #expect(throws: YAMLError(issues: [
            YAMLIssue(kind: .multipleDocuments, mark: Mark(line: 3, column: 1),
                      message: "a policy file holds exactly one YAML document; found a second one"),
        ])) {
            try YAMLParser.parse("---\na: 1\n---\nb: 2\n")
        }
    }
}
