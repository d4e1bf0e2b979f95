/// A configuration that cannot be put in force: a policy, a flag, a secret or a listener that
/// does not hold up. Thrown by every layer that reads configuration, so it lives below them all.
///
/// The message is for the operator and never holds a secret.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
