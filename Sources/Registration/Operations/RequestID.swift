import PWCore

/// `X-Request-Id`: the caller's when it is sane (1 to 128 of `[A-Za-z0-9._:-]`), else a fresh one.
package enum RequestID {
    package static func from(_ headers: HTTPHeaders) -> String {
        if let given = headers["X-Request-Id"], isSane(given) { return given }
        return ProcessUnique.next()
    }

    package static func isSane(_ value: String) -> Bool {
        guard !value.isEmpty, value.utf8.count <= 128 else { return false }
        return value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: ":"), UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
    }
}
