import FuzzSupport
import PWCore

/// `JSONValue.parse` on arbitrary bytes. Beyond "never traps", an accepted document must be
/// valid UTF-8, nest at most `maxDepth` deep, hold no object with two equal keys, and survive
/// `encoded()` and a second parse unchanged (and encode to the same bytes again).
@_cdecl("fuzz_json_main")
func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzOne)
}

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = fuzzBytes(data, size)
    let value: JSONValue
    do {
        value = try JSONValue.parse(bytes)
    } catch {
        guard error.offset >= 0, error.offset <= bytes.count else { violated("error offset \(error.offset) outside 0...\(bytes.count)") }
        return 0
    }
    guard String(validating: bytes, as: UTF8.self) != nil else { violated("accepted invalid UTF-8") }
    check(value, depth: 0)
    let encoded = value.encoded()
    let again: JSONValue
    do { again = try JSONValue.parse(encoded) } catch { violated("own encoding does not parse: \(error.message) at \(error.offset)") }
    guard again == value else { violated("encode/parse round trip changed the value") }
    guard again.encoded() == encoded else { violated("second encoding differs") }
    return 0
}

func check(_ value: JSONValue, depth: Int) {
    switch value {
    case .array(let elements):
        guard depth + 1 <= JSONValue.maxDepth else { violated("accepted nesting deeper than \(JSONValue.maxDepth)") }
        for element in elements { check(element, depth: depth + 1) }
    case .object(let object):
        guard depth + 1 <= JSONValue.maxDepth else { violated("accepted nesting deeper than \(JSONValue.maxDepth)") }
        guard Set(object.keys).count == object.members.count else { violated("accepted an object with a repeated key") }
        for member in object.members { check(member.value, depth: depth + 1) }
    case .number(let text):
        guard !text.isEmpty, Double(text) != nil else { violated("number \(text) is not a number") }
    case .null, .bool, .string:
        break
    }
}
