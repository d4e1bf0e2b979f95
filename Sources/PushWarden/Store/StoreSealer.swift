import PWCore
import PWCrypto
import PWPolicy

/// Seals the sensitive values PushWarden writes to the store (push tokens and Web Push secrets,
/// in inventory records, identities and outbox entries) and opens them again.
///
/// Without `store.encryption_key` it passes values through unchanged. Keys, never values, are
/// what the store indexes by: keys are hashes already (`RegistrationKeys`, `ContactKeys`).
///
/// With a key, a value is stored as `pwe1:<key id>:<base64url(nonce | ciphertext | tag)>`:
/// AES-256-GCM under a fresh 12-byte random nonce, a 16-byte tag, and `pwe1:<key id>` as the
/// associated data, so the version and the key id cannot be swapped without the tag failing. The
/// key id is the first 8 bytes (16 hex digits) of HMAC-SHA-256(key, "pushwarden store key id"):
/// it names the key without saying anything about it. `open` finds the key by that id among the
/// current key and `store.previous_encryption_keys`, so values sealed before a rotation still
/// open; what it writes again is sealed under the current key.
///
/// A stored value without the `pwe1:` prefix is a value written before the key was set (or on a
/// store without one), and `open` returns it as it is, with or without a key: turning encryption
/// on loses no registration, and each such value is sealed the next time it is written.
/// Encryption at rest keeps Redis's contents (dumps, backups, replicas) from giving tokens away;
/// it does not make Redis's writers trustworthy.
///
/// Thread-safe: immutable after `init`; each seal and open makes its own cipher context.
public struct StoreSealer: Sendable {
    /// One key and its id.
    struct Key: Sendable {
        let id: String
        let cipher: AES256GCMKey
        /// `pwe1:<id>:`, the prefix of every value this key sealed.
        let prefix: String
        /// `pwe1:<id>`: the associated data every value sealed under this key is authenticated with.
        let associatedData: [UInt8]

        init(_ bytes: [UInt8]) throws(CryptoError) {
            cipher = try AES256GCMKey(bytes)
            id = Hex.encode(HMACSHA256.mac(key: bytes, message: Array("pushwarden store key id".utf8)).prefix(8))
            prefix = StoreSealer.version + id + ":"
            associatedData = Array((StoreSealer.version + id).utf8)
        }
    }

    /// The prefix of every sealed value.
    static let version = "pwe1:"

    /// Passes values through: no `store.encryption_key` in the policy.
    public static let none = StoreSealer()

    private let current: Key?
    /// The current key first, then the previous ones.
    private let keys: [Key]

    /// True when values are encrypted before they are stored.
    public var isEnabled: Bool { current != nil }

    /// The id of the key that seals (for the start-up log line; it says nothing about the key).
    public var keyID: String? { current?.id }

    /// How many keys only open (`store.previous_encryption_keys`).
    public var previousKeyCount: Int { max(0, keys.count - 1) }

    public init() {
        current = nil
        keys = []
    }

    /// Seals under `keys.current`; opens under it and every one of `keys.previous`.
    ///
    /// - Throws: when a key is not 32 bytes (`StoreKeys.resolve` refuses those already).
    public init(keys resolved: StoreKeys) throws(CryptoError) {
        let current = try Key(resolved.current)
        var keys = [current]
        for bytes in resolved.previous { keys.append(try Key(bytes)) }
        self.current = current
        self.keys = keys
    }

    /// The sealer `policy`'s `store` block asks for (`.none` without one), its keys resolved
    /// through `secrets`: what `serve` and `pushwarden outbox` both run.
    ///
    /// - Throws: every diagnostic about the keys, one per line, never a value.
    public static func make(for policy: Policy, secrets: some SecretResolving) throws(StartupError) -> StoreSealer {
        guard let store = policy.store else { return .none }
        switch StoreKeys.resolve(store, in: policy, secrets: secrets) {
        case .success(let keys):
            do {
                return try StoreSealer(keys: keys)
            } catch {
                throw StartupError("store.encryption_key: \(error.message)")
            }
        case .failure(let diagnostics):
            throw StartupError(diagnostics.description)
        }
    }

    /// The value as it is stored.
    public func seal(_ plaintext: String) -> String {
        guard let current else { return plaintext }
        let sealed = AES256GCM.seal(plaintext.utf8, key: current.cipher, authenticating: current.associatedData)
        return current.prefix + Base64URL.encode(sealed.combined)
    }

    /// The value as it was given to `seal`, or nil when it cannot be opened (a key this process
    /// does not hold, or tampered bytes). A value without the `pwe1:` prefix is returned as is.
    public func open(_ stored: String) -> String? {
        guard stored.hasPrefix(Self.version) else { return stored }
        let body = stored.dropFirst(Self.version.count)
        // `<16 hex digits>:<base64url>`
        guard let colon = body.firstIndex(of: ":"), body.distance(from: body.startIndex, to: colon) == 16 else { return nil }
        let id = body[..<colon]
        guard let key = keys.first(where: { $0.id == id }),
              let bytes = Base64URL.decode(body[body.index(after: colon)...]),
              let sealed = AES256GCM.Sealed(combined: bytes),
              let plaintext = AES256GCM.open(sealed, key: key.cipher, authenticating: key.associatedData) else { return nil }
        return String(validating: plaintext, as: UTF8.self)
    }

    /// Whether `stored` is in the sealed form (whether or not this sealer can open it).
    public static func isSealed(_ stored: String) -> Bool { stored.hasPrefix(version) }
}
