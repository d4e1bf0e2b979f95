import PWCore
import YAMLKit

/// The policy's top-level `store:` block (docs/security.md, encryption at rest): the key that seals push tokens and
/// Web Push secrets stored as values, the keys that still open values sealed before a rotation,
/// and the key that names contacts and tokens in key names. Only references are held here;
/// `StoreKeys.resolve` reads the values.
///
/// ```yaml
/// store:
///   encryption_key: {env: PUSHWARDEN_STORE_KEY}
///   previous_encryption_keys: [{file: /run/secrets/store-key-2026-06}]
///   digest_key: {file: /run/secrets/store-digest-key}
/// ```
public struct StorePolicy: Sendable, Equatable {
    /// Seals every new value and opens the ones it sealed.
    public var encryptionKey: SecretRef
    /// Open values sealed under them; never seal.
    public var previousEncryptionKeys: [SecretRef]
    /// Refuse a stored value that is not sealed (a Redis writer's plant) instead of reading it as
    /// one written before encryption was turned on.
    public var requireSealed: Bool
    /// Keys the digests that name contacts and push tokens in key names (HMAC-SHA-256), so a dump
    /// cannot be matched against a list of contact ids. Never rotated: every name depends on it.
    public var digestKey: SecretRef?

    public init(encryptionKey: SecretRef, previousEncryptionKeys: [SecretRef] = [], requireSealed: Bool = false,
                digestKey: SecretRef? = nil) {
        self.encryptionKey = encryptionKey
        self.previousEncryptionKeys = previousEncryptionKeys
        self.requireSealed = requireSealed
        self.digestKey = digestKey
    }

    /// Policy paths of the references, for diagnostics (`store.encryption_key`,
    /// `store.previous_encryption_keys[0]`).
    public static let encryptionKeyPath = "store.encryption_key"
    public static func previousKeyPath(_ index: Int) -> String { "store.previous_encryption_keys[\(index)]" }
    public static let digestKeyPath = "store.digest_key"
}

/// The key values behind a `StorePolicy`, each exactly 32 bytes.
///
/// - Important: holds secrets: never log or print it (its description names the references only).
public struct StoreKeys: Sendable, CustomStringConvertible {
    public static let byteCount = 32
    /// Fewest distinct byte values a digest key may hold: 32 random bytes hold about 30, a typed
    /// or patterned value far fewer.
    public static let minimumDistinctDigestKeyBytes = 16

    public var current: [UInt8]
    public var previous: [[UInt8]]
    /// `store.digest_key`, when set.
    public var digest: [UInt8]?

    public init(current: [UInt8], previous: [[UInt8]] = [], digest: [UInt8]? = nil) {
        self.current = current
        self.previous = previous
        self.digest = digest
    }

    public var description: String { "StoreKeys(1 current, \(previous.count) previous, digest key \(digest == nil ? "unset" : "set"))" }

    /// Resolves every reference of `store` and decodes each value, which must be 32 bytes in
    /// standard base64 (as `openssl rand -base64 32` prints; surrounding whitespace is ignored).
    /// Every problem is reported at once, at the reference's place in `policy`, never with the
    /// value. What `serve` runs at start.
    public static func resolve(_ store: StorePolicy, in policy: Policy, secrets: some SecretResolving) -> Result<StoreKeys, PolicyDiagnostics> {
        let (keys, diagnostics) = read(store, in: policy, secrets: secrets, unresolvable: .error)
        guard let keys, diagnostics.isEmpty else { return .failure(PolicyDiagnostics(diagnostics)) }
        return .success(keys)
    }

    /// What `pushwarden policy check` reports about the policy's store keys: an error for a value
    /// `serve` would refuse, a warning for a reference that cannot be read here (the environment
    /// that checks a file seldom holds its secrets), and, when nothing is wrong, a warning that key
    /// names still carry unkeyed digests (no `digest_key`). Empty without a `store` block.
    public static func diagnostics(for policy: Policy, secrets: some SecretResolving = SecretResolver()) -> [Diagnostic] {
        guard let store = policy.store else { return [] }
        var found = read(store, in: policy, secrets: secrets, unresolvable: .warning).diagnostics
        // Only once the keys themselves are right: a policy with errors has those to fix first.
        if store.digestKey == nil, !found.contains(where: { $0.severity == .error }) {
            found.append(policy.diagnostic(at: StorePolicy.encryptionKeyPath, missingDigestKey, severity: .warning))
        }
        return found
    }

    /// Why encryption without `digest_key` is worth a warning (a refusal would stop deployments
    /// that encrypted before the key existed).
    public static let missingDigestKey = "store.digest_key is not set: key names carry unkeyed SHA-256 digests of contact ids "
        + "and push tokens, so a dump can be matched against a list of contact ids; set digest_key "
        + "(32 random bytes in base64, not an encryption key) to key them"

    private static func read(_ store: StorePolicy, in policy: Policy, secrets: some SecretResolving,
                             unresolvable: Diagnostic.Severity) -> (StoreKeys?, diagnostics: [Diagnostic]) {
        var diagnostics: [Diagnostic] = []
        var refs = [(store.encryptionKey, StorePolicy.encryptionKeyPath)]
            + store.previousEncryptionKeys.enumerated().map { ($0.element, StorePolicy.previousKeyPath($0.offset)) }
        if let digestKey = store.digestKey { refs.append((digestKey, StorePolicy.digestKeyPath)) }
        var values: [[UInt8]?] = []
        for (ref, path) in refs {
            let isDigestKey = path == StorePolicy.digestKeyPath
            let raw: [UInt8]
            do {
                raw = try secrets.resolve(ref)
            } catch {
                diagnostics.append(policy.diagnostic(at: path, "\(error.description); it must hold the store key", severity: unresolvable))
                values.append(nil)
                continue
            }
            switch decode(raw) {
            case .success(let bytes):
                // Two references to one key would make a rotation look done when it is not.
                if let same = values.firstIndex(where: { $0 == bytes }) {
                    diagnostics.append(policy.diagnostic(at: path, isDigestKey
                        ? "secret \(ref) holds the same key as \(refs[same].1); the digest key must be a key of its own (it is never rotated)"
                        : "secret \(ref) holds the same key as \(refs[same].1); list each key once"))
                    values.append(nil)
                } else if isDigestKey, Set(bytes).count < minimumDistinctDigestKeyBytes {
                    diagnostics.append(policy.diagnostic(at: path, "secret \(ref) does not look random (\(Set(bytes).count) distinct bytes); "
                        + "make it with `openssl rand -base64 32`"))
                    values.append(nil)
                } else {
                    values.append(bytes)
                }
            case .failure(let problem):
                diagnostics.append(policy.diagnostic(at: path, "secret \(ref): \(problem.message)"))
                values.append(nil)
            }
        }
        guard let current = values[0], values.allSatisfy({ $0 != nil }) else { return (nil, diagnostics) }
        let previousCount = store.previousEncryptionKeys.count
        return (StoreKeys(current: current, previous: values[1..<(1 + previousCount)].compactMap { $0 },
                          digest: store.digestKey == nil ? nil : values.last ?? nil), diagnostics)
    }

    /// Why a key value was refused; never holds the value.
    public struct DecodingProblem: Error, Sendable, Equatable {
        public var message: String
    }

    /// A store key from its text: standard base64 (RFC 4648 section 4) of exactly 32 bytes.
    public static func decode(_ raw: [UInt8]) -> Result<[UInt8], DecodingProblem> {
        let expected = "must be 32 bytes in base64, as `openssl rand -base64 32` prints"
        var text = raw[...]
        while let first = text.first, first == 0x20 || first == 0x09 || first == 0x0A || first == 0x0D { text = text.dropFirst() }
        while let last = text.last, last == 0x20 || last == 0x09 || last == 0x0A || last == 0x0D { text = text.dropLast() }
        // Standard base64 is base64url with two other letters: translate, refusing base64url's own.
        var translated: [UInt8] = []
        translated.reserveCapacity(text.count)
        for byte in text {
            switch byte {
            case UInt8(ascii: "+"): translated.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): translated.append(UInt8(ascii: "_"))
            case UInt8(ascii: "-"), UInt8(ascii: "_"):
                return .failure(DecodingProblem(message: "\(expected); the value is not standard base64"))
            default: translated.append(byte)
            }
        }
        guard let bytes = translated.withUnsafeBufferPointer({ Base64URL.decode(bytes: $0) }) else {
            return .failure(DecodingProblem(message: "\(expected); the value is not base64"))
        }
        guard bytes.count == byteCount else {
            return .failure(DecodingProblem(message: "\(expected); the value decodes to \(bytes.count) bytes"))
        }
        return .success(bytes)
    }
}

extension PolicyReader {
    /// `store: {encryption_key: REF, previous_encryption_keys: [REF, ...], require_sealed: BOOL, digest_key: REF}`.
    func store(_ node: YAMLNode) -> StorePolicy? {
        let path = "store"
        let fields = Fields(checker, node, path, allowed: ["encryption_key", "previous_encryption_keys", "require_sealed", "digest_key"])
        guard fields.isMapping else { return nil }
        guard let keyNode = fields.required("encryption_key") else { return nil }
        let current = checker.secret(keyNode, fields.at("encryption_key"))
        if current != nil { checker.locate(keyNode.mark, StorePolicy.encryptionKeyPath) }
        var previous: [SecretRef]? = []
        if let listNode = fields["previous_encryption_keys"] {
            if let items = checker.list(listNode, fields.at("previous_encryption_keys")) {
                var refs: [SecretRef] = []
                for (index, item) in items.enumerated() {
                    let at = StorePolicy.previousKeyPath(index)
                    guard let ref = checker.secret(item, at) else {
                        previous = nil
                        continue
                    }
                    if ref == current || refs.contains(ref) {
                        checker.report(item.mark, at, ref == current ? "\(ref) is the encryption_key itself; list only keys it replaced"
                                                                     : "\(ref) is listed twice")
                        previous = nil
                        continue
                    }
                    checker.locate(item.mark, at)
                    refs.append(ref)
                }
                if previous != nil { previous = refs }
            } else {
                previous = nil
            }
        }
        var requireSealed: Bool? = false
        if let flag = fields["require_sealed"] {
            requireSealed = checker.choice(flag, fields.at("require_sealed"), ["true", "false"]).map { $0 == "true" }
        }
        var digestKey: SecretRef?? = .some(nil)
        if let digestNode = fields["digest_key"] {
            digestKey = checker.secret(digestNode, fields.at("digest_key")).map { .some($0) }
            if let ref = digestKey ?? nil {
                if ref == current || (previous ?? []).contains(ref) {
                    checker.report(digestNode.mark, StorePolicy.digestKeyPath,
                                   "\(ref) is also an encryption key; the digest key must be a key of its own (it is never rotated)")
                    digestKey = nil
                } else {
                    checker.locate(digestNode.mark, StorePolicy.digestKeyPath)
                }
            }
        }
        guard let current, let previous, let requireSealed, let digestKey else { return nil }
        return StorePolicy(encryptionKey: current, previousEncryptionKeys: previous, requireSealed: requireSealed, digestKey: digestKey)
    }
}
