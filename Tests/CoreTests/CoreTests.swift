import PWCore
import Testing

@Suite struct JSONTests {
    @Test(arguments: [
        "{", "[1,]", "{\"a\":1,}", "{'a':1}", "01", "1.", "-", "\"\\x\"", "\"\u{01}\"", "nul", "{\"a\" 1}",
        "[1] 2", "\"\\ud800\"", "{\"a\":1,\"a\":2}",
    ])
    func refusesMalformed(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
    }

    @Test func parsesAndKeepsOrderAndTypes() throws {
        let value = try JSONValue.parse(#" {"b": [1, -2.5e3, true, null], "a": "x\n\u00e9\ud83d\ude00"} "#)
        let object = try #require(value.objectValue)
        #expect(object.keys == ["b", "a"])
        #expect(object["a"] == .string("x\né😀"))
        #expect(object["b"] == .array([.number("1"), .number("-2.5e3"), .bool(true), .null]))
        #expect(value.encodedString() == #"{"b":[1,-2.5e3,true,null],"a":"x\né😀"}"#)
    }

    @Test func refusesDeepNesting() {
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(deep) }
    }

    @Test func refusesInvalidUTF8() {
        #expect(throws: JSONParseError.self) { try JSONValue.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func escapesControlCharactersWhenEncoding() {
        #expect(JSONValue.string("a\"b\\c\u{01}").encodedString() == #""a\"b\\c\u0001""#)
    }
}

@Suite struct EnvelopeTests {
    @Test func envelopeHasTheContractShape() throws {
        let error = ContractError(.invalidPlatform, "platform must be one of ios, android", field: "platform")
        let json = try JSONValue.parse(error.envelope(requestID: "r1"))
        #expect(json.encodedString() == #"{"error":{"code":"invalid_platform","message":"platform must be one of ios, android","field":"platform","request_id":"r1"}}"#)
        #expect(error.status == 400)
    }

    @Test(arguments: ErrorCode.allCases)
    func everyCodeHasAContractStatus(_ code: ErrorCode) {
        #expect([400, 401, 403, 404, 405, 413, 415, 422, 429, 500, 502, 503].contains(code.status))
    }
}

@Suite struct Base64URLTests {
    @Test func roundTrips() {
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    @Test func refusesNonAlphabet() {
        #expect(Base64URL.decode("ab+/") == nil)
        #expect(Base64URL.decode("a") == nil)
        #expect(Base64URL.decode("ab c") == nil)
    }
}

@Suite struct HeadersTests {
    @Test func lookupIsCaseInsensitive() {
        var headers: HTTPHeaders = ["Content-Type": "application/json"]
        #expect(headers["content-type"] == "application/json")
        headers.set("CONTENT-TYPE", "text/plain")
        #expect(headers.count == 1)
        #expect(headers["Content-Type"] == "text/plain")
    }
}
