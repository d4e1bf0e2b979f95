import PWCrypto

/// Where the state of one (app, upstream, push token) lives: the dedupe entry, its in-flight lock
/// and the identity the provider handed back. One SHA-256 of the three, never the raw token,
/// computed once per registration and carried through forward, rotation and retirement.
///
/// All three share one hash tag, the digest in braces (`pw:v2:{<digest>}:reg`), so on a Redis
/// Cluster they sit in one slot: the scripts that touch the entry and the lock together run on
/// one node. Keys of the `pw:v1:` layout (before the tags) are not read: a registration kept there
/// is simply forwarded once more.
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
        let tag = "pw:v2:{" + SHA256.hexHash(material) + "}:"
        entry = tag + "reg"
        lock = tag + "lock"
        identity = tag + "id"
        queued = tag + "q"
    }
}

/// Where the state of one contact of one app lives, under the contact's hash tag
/// (`pw:v2:{c:<sha256(app, contact)>}:...`): its rate-limit counters now, its inventory later.
public struct ContactKeys: Sendable, Equatable {
    /// `pw:v2:{c:<digest>}:`, the prefix every key of the contact starts with.
    public let prefix: String

    public init(app: String, contactID: String) {
        var material = Array(app.utf8)
        material.append(0)
        material.append(contentsOf: contactID.utf8)
        prefix = "pw:v2:{c:" + SHA256.hexHash(material) + "}:"
    }

    /// The rate-limit state of one route (`register`, `unregister`, `events`).
    public func rateLimit(route: String) -> String { prefix + "rate:" + route }
}
