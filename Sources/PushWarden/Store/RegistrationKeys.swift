import PWCrypto

/// Where the state of one (app, upstream, push token) lives: the dedupe entry, its in-flight lock
/// and the identity the provider handed back. One SHA-256 of the three, never the raw token,
/// computed once per registration and carried through forward, rotation and retirement.
public struct RegistrationKeys: Sendable, Equatable {
    public let entry: String
    public let lock: String
    public let identity: String
    /// The fingerprint of a registration waiting in the outbox: a duplicate is not queued again.
    public let queued: String

    public init(app: String, upstream: String, pushToken: String) {
        var material = Array(app.utf8)
        material.reserveCapacity(material.count + upstream.utf8.count + pushToken.utf8.count + 2)
        material.append(0)
        material.append(contentsOf: upstream.utf8)
        material.append(0)
        material.append(contentsOf: pushToken.utf8)
        let digest = SHA256.hexHash(material)
        entry = "pw:v1:reg:" + digest
        lock = "pw:v1:lock:" + digest
        identity = "pw:v1:id:" + digest
        queued = "pw:v1:q:" + digest
    }
}
