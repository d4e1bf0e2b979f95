import Loops
import PWCore

/// One installation as the inventory writes it: who holds it, what it is, and which upstreams
/// took it. The push token and the contact id travel only inside `sealed`.
package struct InventoryWrite: Sendable {
    package let contact: ContactKeys
    package let token: TokenKeys
    package let app: AppInventoryKeys
    /// The token and contact id, sealed by the store's `StoreSealer`.
    package let sealed: String
    package let platform: String
    package let pushService: String
    /// The upstreams that hold it now; merged with those the record already names.
    package let upstreams: [String]
    package let nowMillis: Int64
    /// Whether the installation is most likely not recorded yet (a forward, a queued
    /// registration, an import; not the last-seen touch of a dedupe hit): a store may then try a
    /// plain insert first and merge only when a record was there after all.
    package var likelyNew = true
    /// The session index entry to write with the record (`backchannel_logout`): which contact
    /// registered under a session, so a logout token naming only its `sid` finds the contact.
    package var session: SessionIndexWrite? = nil
}

/// One entry of the session index: its key (`KeyDigest.session`), naming the contact's digest,
/// for `ttlMillis`.
package struct SessionIndexWrite: Sendable {
    package let key: String
    package let ttlMillis: Int
}

/// What `record` found while writing.
package struct InventoryWriteResult: Sendable, Equatable {
    /// The contact that held the token before, when it was another one: the token moved.
    let previousOwner: ContactKeys?
    /// Whether the contact had no record of this token before.
    let isNew: Bool
    /// How many installations the contact has now.
    let count: Int

    package init(previousOwner: ContactKeys?, isNew: Bool, count: Int) {
        self.previousOwner = previousOwner
        self.isNew = isNew
        self.count = count
    }
}

/// One installation as the inventory holds it.
package struct StoredInstallation: Sendable, Equatable {
    let token: TokenKeys
    /// The record exactly as stored: what `remove(ifStill:)` compares against.
    let raw: String
    let sealed: String
    let platform: String
    let pushService: String
    package let upstreams: [String]
    let firstSeenMillis: Int64
    package let lastSeenMillis: Int64

    /// The record's stored form: a small JSON object with short keys (`x` sealed token and
    /// contact, `p` platform, `s` push service, `u` upstreams, `f`/`l` first and last seen).
    package static func encode(sealed: String, platform: String, pushService: String, upstreams: [String],
                       firstSeen: Int64, lastSeen: Int64) -> String {
        JSONValue.object(JSONObject([
            JSONMember("x", .string(sealed)),
            JSONMember("p", .string(platform)),
            JSONMember("s", .string(pushService)),
            JSONMember("u", .array(upstreams.map { .string($0) })),
            JSONMember("f", .number(String(firstSeen))),
            JSONMember("l", .number(String(lastSeen))),
        ])).encodedString()
    }

    /// Reads a stored record (written by Swift or by the Redis script); nil when it does not hold
    /// together.
    package static func decode(_ raw: String, token: TokenKeys) -> StoredInstallation? {
        guard let object = (try? JSONValue.parse(Array(raw.utf8)))?.objectValue,
              let sealed = object["x"]?.stringValue, let platform = object["p"]?.stringValue,
              let service = object["s"]?.stringValue, let first = millis(object["f"]), let last = millis(object["l"]) else { return nil }
        var upstreams: [String] = []
        if case .array(let names)? = object["u"] { upstreams = names.compactMap(\.stringValue) }
        return StoredInstallation(token: token, raw: raw, sealed: sealed, platform: platform, pushService: service,
                                  upstreams: upstreams, firstSeenMillis: first, lastSeenMillis: last)
    }

    /// A number as Swift writes it (`1764654000000`) or as Lua's cjson may (`1.764654e+12`).
    private static func millis(_ value: JSONValue?) -> Int64? {
        guard case .number(let text)? = value else { return nil }
        if let exact = Int64(text) { return exact }
        guard let double = Double(text), double.isFinite, abs(double) < 9e15 else { return nil }
        return Int64(double)
    }
}

/// Where the inventory of each contact's installations lives (contract section 8): per contact,
/// its installations by token digest; per token, the contact holding it; per app, when each
/// installation was last seen. Both stores implement the same semantics; keys are hashes.
///
/// What a request does takes the request's loop (`Registrar.Origin.loop`), whose own connection
/// a shared store uses, or nil off the loops; the sweeper's own operations (`seen`, `forgetSeen`,
/// `indexSeen`, `lease`) never run for a request and always use the pool.
package protocol InventoryStore: InventoryCensus {
    /// Writes the installation into its contact's inventory (keeping its first-seen time and the
    /// upstreams named before), makes the contact the token's holder and indexes when it was seen;
    /// in one round trip. The previous holder's inventory is not touched here: see
    /// `previousOwner`.
    func record(_ write: InventoryWrite, on loop: EventLoop?) async throws(StoreError) -> InventoryWriteResult
    /// The contact holding the token now, if the inventory knows it.
    func owner(of token: TokenKeys, app: AppInventoryKeys, on loop: EventLoop?) async throws(StoreError) -> ContactKeys?
    func installation(_ token: TokenKeys, of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> StoredInstallation?
    func installations(of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> [StoredInstallation]
    /// Removes the token from the contact's inventory (only while its record is still `expected`,
    /// when given), its holder while that is this contact, and its last-seen entry. True when the
    /// record was removed (or was already gone and nothing was expected).
    func remove(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, ifStill expected: String?, on loop: EventLoop?) async throws(StoreError) -> Bool
    /// Up to `limit` installations of the app last seen before `cutoffMillis`, about oldest first
    /// (each shard's oldest, merged).
    func seen(before cutoffMillis: Int64, app: AppInventoryKeys, limit: Int) async throws(StoreError) -> [(contact: ContactKeys, token: TokenKeys)]
    /// Drops a last-seen entry whose installation is gone.
    func forgetSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys) async throws(StoreError)
    /// Sets an installation's last-seen entry to `millis` (the sweeper's repair of an entry older
    /// than its record, which a write that reached one of the two left behind); `upstreams` (its
    /// record's) keep the shard's counts when the entry is new there.
    func indexSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, at millis: Int64, upstreams: [String]) async throws(StoreError)
    /// The contact the session index names for a session (`KeyDigest.session`), if an entry is
    /// there and has not expired at `nowMillis`.
    func sessionHolder(_ key: String, nowMillis: Int64, on loop: EventLoop?) async throws(StoreError) -> ContactKeys?
    /// Takes or keeps a lease for `owner` for `ttlMillis`: true while `owner` holds it.
    func lease(_ key: String, owner: String, ttlMillis: Int) async throws(StoreError) -> Bool
    /// Gives a lease up, while `owner` still holds it.
    func releaseLease(_ key: String, owner: String) async throws(StoreError)
}

extension InventoryStore {
    /// The member of the app's last-seen index for one installation.
    package static func seenMember(_ contact: ContactKeys, _ token: TokenKeys) -> String { contact.digest + ":" + token.digest }

    package static func parseSeenMember(_ member: String) -> (contact: ContactKeys, token: TokenKeys)? {
        let parts = member.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].utf8.count == 64, parts[1].utf8.count == 64 else { return nil }
        return (ContactKeys(digest: String(parts[0])), TokenKeys(digest: String(parts[1])))
    }
}
