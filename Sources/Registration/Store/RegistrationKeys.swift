import PWCore
import PWCrypto
import PWPolicy

/// Where the state of one (app, upstream, push token) lives: the dedupe entry, its in-flight lock
/// and the identity the provider handed back. One digest of the three (`KeyDigest`), never the
/// raw token, computed once per registration and carried through forward, rotation and retirement.
///
/// All three share one hash tag, the digest in braces (`pw:v2:{<digest>}:reg`), so on a Redis
/// Cluster they sit in one slot: the scripts that touch the entry and the lock together run on
/// one node. Keys of the `pw:v1:` layout (before the tags) are not read: a registration kept there
/// is simply forwarded once more.
public struct RegistrationKeys: Sendable, Equatable {
    /// `pw:v2:{<digest>}:reg`. Made with the keys, in one allocation: every registration looks at
    /// it; the others are spelled out only by the steps that need them (a dedupe hit builds no
    /// other key).
    public let entry: String
    /// `pw:v2:{<digest>}:`, the prefix of every key here.
    private var tag: Substring { entry.dropLast(3) }
    public var lock: String { String(tag) + "lock" }
    public var identity: String { String(tag) + "id" }
    /// `pw:v2:{<unkeyed digest>}:`, where a build without `store.digest_key` kept this state, when
    /// these keys are keyed.
    private let legacyTag: String?
    /// The identity under its unkeyed name: read when the keyed one holds none, so no provider id
    /// is lost.
    public var legacyIdentity: String? { legacyTag.map { $0 + "id" } }
    /// The dedupe entry under its unkeyed name: never read, deleted with the keyed one.
    public var legacyEntry: String? { legacyTag.map { $0 + "reg" } }

    init(entry: String, legacyTag: String?) {
        self.entry = entry
        self.legacyTag = legacyTag
    }
}

/// Where the state of one contact of one app lives, under the contact's hash tag
/// (`pw:v2:{c:<digest(app, contact)>}:...`): its rate-limit counters and its inventory. Made from
/// a contact id by `KeyDigest.contact`.
public struct ContactKeys: Sendable, Equatable, Hashable {
    /// The `KeyDigest` of app and contact id: what other keys refer to the contact by.
    public let digest: String
    /// `pw:v2:{c:<digest>}:`, the prefix every key of the contact starts with.
    public let prefix: String

    /// The keys of a contact known only by its digest (the owner of a token, an expiry entry).
    public init(digest: String) {
        self.digest = digest
        prefix = "pw:v2:{c:" + digest + "}:"
    }

    /// The rate-limit state of one route (`register`, `unregister`, `events`).
    public func rateLimit(route: String) -> String { prefix + "rate:" + route }

    /// The contact's installations: a hash from token digest to the sealed installation record.
    public var inventory: String { prefix + "inv" }

    /// Held by the one removal (erasure, eviction, expiry) that unregisters this installation now.
    public func removalClaim(of token: TokenKeys) -> String { prefix + "claim:" + token.digest }
}

/// One push token of one app, as the inventory names it: by the `KeyDigest` of app and token
/// (its field in its contact's inventory, and the name of its holder in its app's shard). Made
/// from a token by `KeyDigest.token`.
public struct TokenKeys: Sendable, Equatable {
    public let digest: String

    public init(digest: String) {
        self.digest = digest
    }

    /// Which of its app's `AppInventoryKeys.shardCount` shards holds the token: the digest's
    /// first two hex digits (the digest is uniform, so the shards fill evenly).
    public var shard: Int {
        var value = 0
        for byte in digest.utf8.prefix(2) {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = value * 16 + Int(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = value * 16 + Int(byte - UInt8(ascii: "a")) + 10
            default: return 0
            }
        }
        return value
    }

    /// Where builds before the shards kept the token's holder (`pw:v2:{t:<digest>}:owner`): read
    /// when the shard has none, deleted with the installation.
    public var legacyOwner: String { "pw:v2:{t:" + digest + "}:owner" }
}

/// The one place that turns a contact id or a push token into the digest that names it in the
/// store: of the app id and the value (and the upstream, for `RegistrationKeys`), zero bytes
/// between. Without `store.digest_key` it is the hex SHA-256 (the names every earlier build
/// wrote); with it, the hex HMAC-SHA-256 under that key, so a dump's names cannot be matched
/// against a list of contact ids or tokens.
///
/// Thread-safe: immutable. Its description never shows the key.
public struct KeyDigest: Sendable, CustomStringConvertible {
    private let secret: [UInt8]?

    /// Plain SHA-256: no `store.digest_key`.
    public static let unkeyed = KeyDigest(secret: nil)

    public init(secret: [UInt8]?) {
        self.secret = secret
    }

    public var isKeyed: Bool { secret != nil }

    /// The digests of a build without the key, when this one is keyed: where state written before
    /// the key was set is still found.
    public var legacy: KeyDigest? { secret == nil ? nil : .unkeyed }

    public var description: String { secret == nil ? "KeyDigest(unkeyed SHA-256)" : "KeyDigest(HMAC-SHA-256)" }

    /// The digest `store.digest_key` in `policy` asks for (`unkeyed` without one), the key read
    /// through `secrets` as `StoreSealer.make` reads the encryption keys.
    ///
    /// - Throws: every diagnostic about the store's keys, never a value.
    public static func make(for policy: Policy, secrets: some SecretResolving) throws(ConfigurationError) -> KeyDigest {
        guard let store = policy.store, store.digestKey != nil else { return .unkeyed }
        switch StoreKeys.resolve(store, in: policy, secrets: secrets) {
        case .success(let keys): return KeyDigest(secret: keys.digest)
        case .failure(let diagnostics): throw ConfigurationError(diagnostics.description)
        }
    }

    public func contact(_ contactID: String, app: String) -> ContactKeys { ContactKeys(digest: hex(app, contactID)) }

    /// `contact(contactID, app: app).rateLimit(route: route) + ":" + window`, made in one string:
    /// the rate limiter names every counter it sends this way, each second.
    package func rateLimit(_ contactID: String, app: String, route: String, window: Int64) -> String {
        var key = "pw:v2:{c:"
        key.reserveCapacity(96)
        key += hex(app, contactID)
        key += "}:rate:"
        key += route
        key += ":"
        key += String(window)
        return key
    }

    public func token(_ pushToken: String, app: String) -> TokenKeys { TokenKeys(digest: hex(app, pushToken)) }

    public func registration(_ pushToken: String, app: String, upstream: String) -> RegistrationKeys {
        guard secret != nil else {
            return RegistrationKeys(entry: SHA256.hexHash(joining: app, upstream, pushToken, prefix: "pw:v2:{", suffix: "}:reg"),
                                    legacyTag: nil)
        }
        return RegistrationKeys(entry: "pw:v2:{" + hex(app, upstream, pushToken) + "}:reg",
                                legacyTag: SHA256.hexHash(joining: app, upstream, pushToken, prefix: "pw:v2:{", suffix: "}:"))
    }

    /// The hex digest of the parts joined by zero bytes.
    package func hex(_ first: String, _ second: String, _ third: String? = nil) -> String {
        guard let secret else { return SHA256.hexHash(joining: first, second, third) }
        var material = Array(first.utf8)
        material.append(0)
        material.append(contentsOf: second.utf8)
        if let third {
            material.append(0)
            material.append(contentsOf: third.utf8)
        }
        return Hex.encode(HMACSHA256.mac(key: secret, message: material))
    }
}

/// The per-app keys of the inventory. What every registration writes (which contact holds a token,
/// when the installation was last seen) is spread over `shardCount` shards, each its own hash tag
/// (`pw:v2:{inv:<app>:<shard>}:...`, `<app>` the first 16 hex digits of the app's digest, the
/// shard the token digest's first two): on a Redis Cluster an app's writes spread over 256 slots instead of one key on one
/// master, and a token's holder and last-seen entry sit on one node.
public struct AppInventoryKeys: Sendable, Equatable {
    public static let shardCount = 256

    /// The hex SHA-256 of the app id.
    public let digest: String
    /// Indexed by `TokenKeys.shard`.
    public let shards: [InventoryShardKeys]
    /// The sweeper's lease: one replica at a time sweeps an app.
    public let sweepLease: String
    /// The census's lease: one replica at a time reconciles an app's counts.
    public var censusLease: String { String(sweepLease.dropLast(5)) + "census" }
    /// The whole app's last-seen index of builds before the shards: still read by the sweeper
    /// (so installations seen only before an upgrade still expire), never written.
    public let legacySeen: String

    public init(app: String) {
        let digest = SHA256.hexHash(Array(app.utf8))
        let digits = Array("0123456789abcdef")
        self.digest = digest
        // The digest's first 16 hex digits name the app in the shards' tags: enough to tell a
        // policy's apps apart, and 48 bytes less in each token's holder key.
        let app = String(digest.prefix(16))
        shards = (0..<Self.shardCount).map { index in
            InventoryShardKeys(prefix: "pw:v2:{inv:" + app + ":" + String(digits[index / 16]) + String(digits[index % 16]) + "}:")
        }
        let tag = "pw:v2:{inv:" + digest + "}:"
        sweepLease = tag + "sweep"
        legacySeen = tag + "seen"
    }

    public func shard(of token: TokenKeys) -> InventoryShardKeys { shards[token.shard] }

    /// The shard that counts the contact among the app's contacts: its digest's first two hex digits.
    public func shard(of contact: ContactKeys) -> InventoryShardKeys { shards[TokenKeys(digest: contact.digest).shard] }
}

/// One shard of an app's inventory index, under one hash tag.
public struct InventoryShardKeys: Sendable, Equatable {
    /// `pw:v2:{inv:<app>:<shard>}:`, the prefix of the shard's keys.
    public let prefix: String
    /// The shard's installations by when they were last seen: a sorted set of
    /// `<contact digest>:<token digest>` scored by milliseconds since the epoch. What the expiry
    /// sweeper reads, oldest first.
    public let seen: String

    init(prefix: String) {
        self.prefix = prefix
        seen = prefix + "seen"
    }

    /// The shard's installations in a fixed order, for the export walk and the counts: a sorted
    /// set of `<token digest>:<contact digest>:<upstream,...>`, every score 0, so it is ordered by
    /// member and a member's place never moves while its installation lives.
    public var index: String { prefix + "x" }
    /// The shard's counts, kept with `index` by the same scripts: `i` installations, `u:<name>`
    /// installations an upstream holds.
    public var counts: String { prefix + "n" }
    /// The contacts whose digest starts with this shard's two hex digits and that hold at least
    /// one installation: a set of contact digests.
    public var contacts: String { prefix + "c" }

    /// Which contact holds the token now (the contact's digest): how a move is found and an
    /// unregister bound to its contact. A key of its own, so that taking it answers the holder
    /// before (`SET … GET`) without a script.
    public func holder(of token: TokenKeys) -> String { prefix + "h:" + token.digest }
}
