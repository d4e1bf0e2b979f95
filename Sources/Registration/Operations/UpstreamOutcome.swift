import Providers

/// What happened at one upstream for one operation.
public enum UpstreamOutcome: Sendable, Equatable {
    case forwarded, unchanged, skipped
    /// In the durable outbox: delivered later, by whichever replica holds its shard.
    case queued
    case failed(UpstreamFailure)

    public var isUnchanged: Bool {
        if case .unchanged = self { return true }
        return false
    }

    public var isFailure: Bool {
        if case .failed = self { return true }
        return false
    }

    /// Whether the upstream holds the registration (or will, from the outbox) after this outcome.
    public var holdsRegistration: Bool {
        switch self {
        case .forwarded, .unchanged, .queued: return true
        case .skipped, .failed: return false
        }
    }

    /// The outcome's name in a client's `upstreams` map.
    public var name: String {
        switch self {
        case .forwarded: return "forwarded"
        case .unchanged: return "unchanged"
        case .skipped: return "skipped"
        case .queued: return "queued"
        case .failed: return "failed"
        }
    }
}
