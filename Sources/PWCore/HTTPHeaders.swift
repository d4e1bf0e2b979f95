/// HTTP header fields in arrival order, looked up case-insensitively. Shared by the server and
/// client wrappers so that neither leaks its C library's representation.
public struct HTTPHeaders: Sendable, Equatable, Sequence, ExpressibleByDictionaryLiteral {
    public struct Field: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    public private(set) var fields: [Field]

    public init(_ fields: [Field] = []) { self.fields = fields }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.fields = elements.map { Field($0.0, $0.1) }
    }

    /// The first value for `name` (case-insensitive), or nil.
    public subscript(name: String) -> String? {
        fields.first { Self.equalsIgnoringCase($0.name, name) }?.value
    }

    public func values(_ name: String) -> [String] {
        fields.filter { Self.equalsIgnoringCase($0.name, name) }.map(\.value)
    }

    public mutating func add(_ name: String, _ value: String) { fields.append(Field(name, value)) }

    /// Room for `count` fields without growing: a request head's fields arrive one by one.
    public mutating func reserveCapacity(_ count: Int) { fields.reserveCapacity(count) }

    /// Replaces every field named `name` with one field.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        fields.append(Field(name, value))
    }

    public mutating func remove(_ name: String) {
        fields.removeAll { Self.equalsIgnoringCase($0.name, name) }
    }

    public var count: Int { fields.count }

    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// ASCII case-insensitive comparison, without allocating.
    public static func equalsIgnoringCase(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        var left = a
        var right = b
        return left.withUTF8 { x in
            right.withUTF8 { y in
                for i in 0..<x.count where lowered(x[i]) != lowered(y[i]) { return false }
                return true
            }
        }
    }

    @inline(__always)
    private static func lowered(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
    }
}
