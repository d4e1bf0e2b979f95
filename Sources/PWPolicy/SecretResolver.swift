#if canImport(Glibc)
import Glibc
#endif

/// Why a secret reference could not be resolved. The message names the reference, never a value.
public struct SecretError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reference: SecretRef
    public var reason: String
    public var description: String { "secret \(reference): \(reason)" }
}

/// Reads secrets from where the policy says they live. Resolution happens once, at start-up.
public protocol SecretResolving: Sendable {
    func resolve(_ ref: SecretRef) throws(SecretError) -> [UInt8]
}

/// Environment variables and files, as the policy names them. A file's single trailing newline
/// is dropped (secrets mounted by orchestrators usually have one).
public struct SecretResolver: SecretResolving {
    public init() {}

    public func resolve(_ ref: SecretRef) throws(SecretError) -> [UInt8] {
        switch ref {
        case .env(let name):
            guard let raw = getenv(name) else { throw SecretError(reference: ref, reason: "environment variable is not set") }
            let value = Array(String(cString: raw).utf8)
            guard !value.isEmpty else { throw SecretError(reference: ref, reason: "environment variable is empty") }
            return value
        case .file(let path):
            guard let bytes = readWholeFile(path) else { throw SecretError(reference: ref, reason: "file cannot be read") }
            var value = bytes
            if value.last == 0x0A { value.removeLast() }
            if value.last == 0x0D { value.removeLast() }
            guard !value.isEmpty else { throw SecretError(reference: ref, reason: "file is empty") }
            return value
        }
    }
}

/// A fixed map of secrets, for tests.
public struct StaticSecrets: SecretResolving {
    public var values: [SecretRef: [UInt8]]
    public init(_ values: [SecretRef: [UInt8]]) { self.values = values }
    public func resolve(_ ref: SecretRef) throws(SecretError) -> [UInt8] {
        guard let value = values[ref] else { throw SecretError(reference: ref, reason: "not provided") }
        return value
    }
}

/// Reads a whole file, or nil when it cannot be opened or read.
public func readWholeFile(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 { return nil }
        if n == 0 { return out }
        out.append(contentsOf: chunk[0..<n])
    }
}
