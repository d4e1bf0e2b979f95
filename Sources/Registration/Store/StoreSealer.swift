import PWCore
import PWCrypto
import PWPolicy

/// Seals the sensitive values PushWarden writes to the store (push tokens and Web Push secrets,
/// in inventory records, identities and outbox entries) and opens them again.
///
/// Without `store.encryption_key` it passes values through unchanged. Keys, never values, are
/// what the store indexes by: keys are hashes already (`RegistrationKeys`, `ContactKeys`).
///
/// With a key, a value is stored as `pwe2:<key id>:<base64url(nonce | ciphertext | tag)>`:
/// AES-256-GCM under a fresh 12-byte random nonce, a 16-byte tag, and `pwe2:<key id>`, a zero
/// byte and the value's place (`boundTo`: the key name, and the hash field or the entry field it
/// sits in) as the associated data. A sealed value copied to another key, field or entry does not
/// open there: a Redis writer without the key cannot swap one user's values for another's. The key
/// id is the first 8 bytes (16 hex digits) of HMAC-SHA-256(key, "pushwarden store key id"): it
/// names the key without saying anything about it. `open` finds the key by that id among the
/// current key and `store.previous_encryption_keys`, so values sealed before a rotation still
/// open; what it writes again is sealed under the current key.
///
/// `pwe1:` values (earlier builds: the associated data is `pwe1:<key id>` alone, bound to no
/// place) still open, so an upgrade loses nothing; each is sealed as `pwe2:` the next time it is
/// written, and readers that can check a value against its place (the inventory's token and
/// contact) do. A stored value without a prefix is one written before the key was set, and
/// `open` returns it as it is, unless `store.require_sealed` refuses it: turning encryption on
/// loses no registration, and once every value was written again the plaintext ones can be
/// refused.
/// Encryption at rest keeps Redis's contents (dumps, backups, replicas) from giving tokens away;
/// with binding and `require_sealed` a Redis writer without the key can delete values, not swap
/// or plant them.
///
/// Thread-safe: immutable after `init`; each seal and open makes its own cipher context.
public struct StoreSealer: Sendable {
    /// One key and its id.
    struct Key: Sendable {
        let id: String
        let cipher: AES256GCMKey
        /// `pwe2:<id>:`, the prefix of every value this key seals.
        let prefix: String

        init(_ bytes: [UInt8]) throws(CryptoError) {
            cipher = try AES256GCMKey(bytes)
            id = Hex.encode(HMACSHA256.mac(key: bytes, message: Array("pushwarden store key id".utf8)).prefix(8))
            prefix = StoreSealer.version + id + ":"
        }

        /// What a `pwe2:` value sealed at `place` is authenticated with.
        func associatedData(boundTo place: String) -> [UInt8] { Array((StoreSealer.version + id + "\u{0}" + place).utf8) }

        /// What a `pwe1:` value of an earlier build was authenticated with.
        var legacyAssociatedData: [UInt8] { Array((StoreSealer.legacyVersion + id).utf8) }
    }

    /// The prefix of every value sealed now.
    static let version = "pwe2:"
    /// The prefix of values sealed by earlier builds, bound to no place.
    static let legacyVersion = "pwe1:"

    /// Passes values through: no `store.encryption_key` in the policy.
    public static let none = StoreSealer()

    private let current: Key?
    /// The current key first, then the previous ones.
    private let keys: [Key]
    /// Whether a value without a prefix is refused (`store.require_sealed`).
    private let requireSealed: Bool

    /// True when values are encrypted before they are stored.
    public var isEnabled: Bool { current != nil }

    /// The id of the key that seals (for the start-up log line; it says nothing about the key).
    public var keyID: String? { current?.id }

    /// How many keys only open (`store.previous_encryption_keys`).
    public var previousKeyCount: Int { max(0, keys.count - 1) }

    public init() {
        current = nil
        keys = []
        requireSealed = false
    }

    /// Seals under `keys.current`; opens under it and every one of `keys.previous`.
    ///
    /// - Throws: when a key is not 32 bytes (`StoreKeys.resolve` refuses those already).
    public init(keys resolved: StoreKeys, requireSealed: Bool = false) throws(CryptoError) {
        let current = try Key(resolved.current)
        var keys = [current]
        for bytes in resolved.previous { keys.append(try Key(bytes)) }
        self.current = current
        self.keys = keys
        self.requireSealed = requireSealed
    }

    /// The sealer `policy`'s `store` block asks for (`.none` without one), its keys resolved
    /// through `secrets`: what `serve` and `pushwarden outbox` both run.
    ///
    /// - Throws: every diagnostic about the keys, one per line, never a value.
    public static func make(for policy: Policy, secrets: some SecretResolving) throws(ConfigurationError) -> StoreSealer {
        guard let store = policy.store else { return .none }
        switch StoreKeys.resolve(store, in: policy, secrets: secrets) {
        case .success(let keys):
            do {
                return try StoreSealer(keys: keys, requireSealed: store.requireSealed)
            } catch {
                throw ConfigurationError("store.encryption_key: \(error.message)")
            }
        case .failure(let diagnostics):
            throw ConfigurationError(diagnostics.description)
        }
    }

    /// The value as it is stored at `place` (the key name, and the field within it).
    /// `place` is made only when there is a key (the names it joins cost allocations).
    public func seal(_ plaintext: String, boundTo place: @autoclosure () -> String) -> String {
        guard let current else { return plaintext }
        let sealed = AES256GCM.seal(plaintext.utf8, key: current.cipher, authenticating: current.associatedData(boundTo: place()))
        return current.prefix + Base64URL.encode(sealed.combined)
    }

    /// The value as it was given to `seal` for the same `place`, or nil when it cannot be opened (a
    /// key this process does not hold, tampered bytes, or a value sealed for another place). A
    /// value without a prefix is returned as is, unless `store.require_sealed` refuses it.
    public func open(_ stored: String, boundTo place: @autoclosure () -> String) -> String? {
        let isCurrent = stored.hasPrefix(Self.version)
        guard isCurrent || stored.hasPrefix(Self.legacyVersion) else { return requireSealed && current != nil ? nil : stored }
        let body = stored.dropFirst(Self.version.count)
        // `<16 hex digits>:<base64url>`
        guard let colon = body.firstIndex(of: ":"), body.distance(from: body.startIndex, to: colon) == 16 else { return nil }
        let id = body[..<colon]
        guard let key = keys.first(where: { $0.id == id }),
              let bytes = Base64URL.decode(body[body.index(after: colon)...]),
              let sealed = AES256GCM.Sealed(combined: bytes),
              let plaintext = AES256GCM.open(sealed, key: key.cipher,
                                             authenticating: isCurrent ? key.associatedData(boundTo: place()) : key.legacyAssociatedData) else { return nil }
        return String(validating: plaintext, as: UTF8.self)
    }
}
