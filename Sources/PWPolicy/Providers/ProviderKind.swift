/// The upstream providers PushWarden speaks to, by the name a policy writes (`provider: voyado`,
/// `emulates: voyado`). Parsed once, by the policy reader; everything else switches on the case.
public enum ProviderKind: String, Sendable, Hashable, CaseIterable {
    case voyado
    case voidhash
    case fluxer
    case nativeNotify = "nativenotify"
    case pushNotice = "pushnotice"

    /// What the provider does with what it is sent: one value that the adapters, the factory, the
    /// dry run and both explainers read, so no two places can disagree.
    public var traits: ProviderTraits {
        switch self {
        case .voyado:
            return ProviderTraits(label: "Voyado", keepsIdentity: false, takesEvents: true, needsCallerCredential: false)
        case .voidhash:
            return ProviderTraits(label: "Voidhash", keepsIdentity: true, takesEvents: false, needsCallerCredential: false)
        case .fluxer:
            return ProviderTraits(label: "Fluxer", keepsIdentity: true, takesEvents: false, needsCallerCredential: true)
        case .nativeNotify:
            return ProviderTraits(label: "Native Notify", keepsIdentity: true, takesEvents: false, needsCallerCredential: false)
        case .pushNotice:
            return ProviderTraits(label: "PushNotice", keepsIdentity: false, takesEvents: false, needsCallerCredential: false)
        }
    }
}

/// The facts about a provider that do not depend on any one policy's settings.
public struct ProviderTraits: Sendable, Equatable {
    /// The provider's human name ("Native Notify").
    public let label: String
    /// The provider hands back an identity that later calls need: only then does a registration
    /// read or write the identity store, and `policy explain` lists it under what is kept.
    public let keepsIdentity: Bool
    /// Engagement events are forwarded to it.
    public let takesEvents: Bool
    /// Every call carries the end user's own credential from the client's request, which
    /// PushWarden never stores: it cannot be called later (no outbox, no erasure from the store).
    public let needsCallerCredential: Bool
}
