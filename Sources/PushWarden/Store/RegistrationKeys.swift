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
    /// `pw:v2:{<digest>}:`, the prefix of every key below.
    private let tag: String
    /// Made with the keys: every registration looks at it; the others are spelled out only by
    /// the steps that need them (a dedupe hit builds no other key).
    public let entry: String
    public var lock: String { tag + "lock" }
    public var identity: String { tag + "id" }

    public init(app: String, upstream: String, pushToken: String) {
        var material = Array(app.utf8)
        material.reserveCapacity(material.count + upstream.utf8.count + pushToken.utf8.count + 2)
        material.append(0)
        material.append(contentsOf: upstream.utf8)
        material.append(0)
        material.append(contentsOf: pushToken.utf8)
        tag = "pw:v2:{" + SHA256.hexHash(material) + "}:"
        entry = tag + "reg"
    }
}

/// Where the state of one contact of one app lives, under the contact's hash tag
/// (`pw:v2:{c:<sha256(app, contact)>}:...`): its rate-limit counters and its inventory.
public struct ContactKeys: Sendable, Equatable, Hashable {
    /// The hex SHA-256 of app and contact id: what other keys refer to the contact by.
    public let digest: String
    /// `pw:v2:{c:<digest>}:`, the prefix every key of the contact starts with.
    public let prefix: String

    public init(app: String, contactID: String) {
        self.init(digest: KeyDigest.of(app, contactID))
    }

    /// The keys of a contact known only by its digest (the owner of a token, an expiry entry).
    public init(digest: String) {
        self.digest = digest
        prefix = "pw:v2:{c:" + digest + "}:"
    }

    /// The rate-limit state of one route (`register`, `unregister`, `events`).
    public func rateLimit(route: String) -> String { prefix + "rate:" + route }

    /// The contact's installations: a hash from token digest to the sealed installation record.
    public var inventory: String { prefix + "inv" }
}

/// Where the inventory keeps one push token of one app, under the token's own hash tag
/// (`pw:v2:{t:<sha256(app, token)>}:owner`): which contact holds it now, so a move is found.
public struct TokenKeys: Sendable, Equatable {
    /// The hex SHA-256 of app and push token: the token's field in its contact's inventory.
    public let digest: String
    /// The digest of the contact that holds the token.
    public let owner: String

    public init(app: String, pushToken: String) {
        self.init(digest: KeyDigest.of(app, pushToken))
    }

    public init(digest: String) {
        self.digest = digest
        owner = "pw:v2:{t:" + digest + "}:owner"
    }
}

/// The hex SHA-256 of an app id and one value, a zero byte between: what contact and token keys
/// are named by.
enum KeyDigest {
    static func of(_ app: String, _ value: String) -> String {
        var material = Array(app.utf8)
        material.reserveCapacity(material.count + 1 + value.utf8.count)
        material.append(0)
        material.append(contentsOf: value.utf8)
        return SHA256.hexHash(material)
    }
}

/// The per-app keys of the inventory, each its own hash tag (`pw:v2:{inv:<app digest>}:...`).
public struct AppInventoryKeys: Sendable, Equatable {
    /// Every installation of the app by when it was last seen: a sorted set of
    /// `<contact digest>:<token digest>` scored by milliseconds since the epoch. What the expiry
    /// sweeper reads, oldest first.
    public let seen: String
    /// The sweeper's lease: one replica at a time sweeps an app.
    public let sweepLease: String

    public init(app: String) {
        let tag = "pw:v2:{inv:" + SHA256.hexHash(Array(app.utf8)) + "}:"
        seen = tag + "seen"
        sweepLease = tag + "sweep"
    }
}
