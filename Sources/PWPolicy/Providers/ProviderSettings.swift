/// What a provider's settings tell a security reviewer (`pushwarden policy explain`). Each
/// provider's settings type implements it beside its policy reader.
public protocol ProviderSettings: Sendable {
    /// The provider's name as written in the policy (`voyado`).
    var providerName: String { get }
    /// A human name and where it is reached: "Voyado at https://...".
    var summary: String { get }
    /// The URL requests go to; nil when nothing leaves the host (dry runs).
    var endpoint: String? { get }
    /// Server-held values injected into each call and where they come from
    /// ("Authorization: Bearer <API key from env:VOYADO_API_KEY>").
    var injected: [String] { get }
    /// Secrets referenced, by name only, with what each is for.
    var secrets: [SecretUse] { get }
}

public struct SecretUse: Sendable, Equatable {
    public var reference: SecretRef
    public var purpose: String
    public init(_ reference: SecretRef, _ purpose: String) {
        self.reference = reference
        self.purpose = purpose
    }
}
