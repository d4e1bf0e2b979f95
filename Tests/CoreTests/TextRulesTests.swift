import PWCore
import Testing

@Suite struct TextRulesTests {
    @Test func forbiddenCharacters() {
        let forbidden: [Unicode.Scalar] = [
            "\u{0}", "\u{1F}", "\u{7F}", "\u{80}", "\u{85}", "\u{9F}", "\u{AD}", "\u{61C}", "\u{200B}", "\u{200C}", "\u{200D}", "\u{200E}",
            "\u{200F}", "\u{2028}", "\u{2029}", "\u{202A}", "\u{202B}", "\u{202C}", "\u{202D}", "\u{202E}", "\u{2060}", "\u{2066}",
            "\u{2067}", "\u{2068}", "\u{2069}", "\u{FEFF}", "\u{E0041}",
        ]
        for scalar in forbidden {
            #expect(TextRules.isForbidden(scalar), "\(TextRules.codePoint(scalar))")
            #expect(TextRules.firstForbidden(in: "ok\(scalar)x") == scalar, "\(TextRules.codePoint(scalar))")
            #expect(TextRules.hasForbiddenCharacter("é\(scalar)"), "\(TextRules.codePoint(scalar))")
        }
        for text in ["alice", "a b", "é", "e\u{301}", "李", "👍", "Ω", "\u{A0}", "~"] {
            #expect(!TextRules.hasForbiddenCharacter(text), "\(text)")
        }
    }

    @Test func blank() {
        for text in ["", " ", "\t\n", "\u{A0}", "\u{2003}\u{3000}", "\u{1680}"] { #expect(TextRules.isBlank(text), "\(Array(text.unicodeScalars))") }
        for text in ["a", " a ", "\u{200B}", "."] { #expect(!TextRules.isBlank(text), "\(Array(text.unicodeScalars))") }
    }

    @Test func bytesEqualIgnoresCanonicalEquivalence() {
        #expect("\u{E9}" == "e\u{301}")
        #expect(!TextRules.bytesEqual("\u{E9}", "e\u{301}"))
        #expect(!TextRules.bytesEqual("\u{212A}", "K"))
        #expect(!TextRules.bytesEqual(Substring("\u{37E}"), Substring(";")))
        #expect(TextRules.bytesEqual("e\u{301}", "e\u{301}"))
        #expect(TextRules.bytesEqual("", ""))
        #expect(TextRules.bytesEqual(Substring("xKy").dropFirst().dropLast(), "K"))
        #expect(TextRules.codePoint("\u{A}") == "U+000A")
        #expect(TextRules.codePoint("\u{E0041}") == "U+E0041")
    }
}
