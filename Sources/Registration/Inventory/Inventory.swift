import ClientAPI
import Loops
import PWCore
import Providers
import Synchronization

/// The installations of each contact (contract section 8), over an `InventoryStore`: what is
/// kept per installation, sealed where it is a token or a contact id, and when a dedupe hit is
/// worth a write of its last-seen time.
package final class Inventory: Sendable {
    let store: any InventoryStore
    let sealer: StoreSealer
    /// What names contacts and tokens here, and in every key the registration operations make.
    let digests: KeyDigest
    /// Where a record found out of place is reported.
    let logger: Logger?
    /// Milliseconds since the epoch: first and last seen, and the expiry's cutoff.
    let clock: @Sendable () -> Int64
    /// When this process last wrote each installation's last-seen time on a dedupe hit.
    private let touches: TouchMemory
    /// Each app's inventory keys, hashed once (a policy names a handful of apps).
    private let appKeys = Mutex<[String: AppInventoryKeys]>([:])

    package init(store: any InventoryStore, sealer: StoreSealer = .none, digests: KeyDigest, logger: Logger? = nil,
         clock: @escaping @Sendable () -> Int64 = { Int64(SystemClock.epochMillis()) },
         touches: TouchMemory = TouchMemory()) {
        self.store = store
        self.sealer = sealer
        self.digests = digests
        self.logger = logger
        self.clock = clock
        self.touches = touches
    }

    /// One kept installation, opened.
    struct Kept: Sendable {
        let stored: StoredInstallation
        /// Nil when the record cannot be opened (sealed under a key this process does not hold).
        let pushToken: String?
        let contactID: String?
        /// The session it was registered under (`backchannel_logout`), when the record keeps one.
        var sessionID: String? = nil

        /// The token as logs and the server-to-server API show it. A record that cannot be opened
        /// shows its digest's first 8 hex digits, or a hash of a field name PushWarden never
        /// writes (the digest is the store's field name, which another writer may have chosen).
        var summaryToken: String {
            if let pushToken { return Redact.token(pushToken) }
            let digest = stored.token.digest
            let isHex = digest.utf8.count == 64 && digest.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
            return "tok:" + (isHex ? String(digest.prefix(8)) : Redact.shortHash(digest))
        }
    }

    // MARK: Writing

    /// Records that `upstreams` hold `installation` for `contactID`. Here as everywhere in this
    /// type, `loop` is the request's loop (its own store connection), nil off the loops.
    /// With `sessionID` (the registering session at the identity provider), the record keeps it
    /// sealed beside the token and the session index names the contact for `sessionTTLMillis`.
    func keep(_ installation: Installation, contactID: String, app: String, upstreams: [String], sessionID: String? = nil,
              sessionTTLMillis: Int = 0, likelyNew: Bool = true, on loop: EventLoop?) async throws(StoreError) -> InventoryWriteResult {
        var members = [JSONMember("t", .string(installation.pushToken)), JSONMember("c", .string(contactID))]
        if let sessionID { members.append(JSONMember("s", .string(sessionID))) }
        let payload = JSONValue.object(JSONObject(members)).encodedString()
        let contact = digests.contact(contactID, app: app), token = digests.token(installation.pushToken, app: app)
        var write = InventoryWrite(
            contact: contact, token: token,
            app: keys(of: app), sealed: sealer.seal(payload, boundTo: Self.place(of: token, in: contact)), platform: installation.platform.rawValue,
            pushService: installation.pushService.rawValue, upstreams: upstreams, nowMillis: clock())
        write.likelyNew = likelyNew
        if let sessionID { write.session = SessionIndexWrite(key: digests.session(sessionID, app: app), ttlMillis: max(sessionTTLMillis, 1000)) }
        return try await store.record(write, on: loop)
    }

    /// The contact the session index names for `sessionID`, if any.
    func sessionHolder(_ sessionID: String, app: String, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        try await store.sessionHolder(digests.session(sessionID, app: app), nowMillis: clock(), on: loop)
    }

    /// The installation as a build without `store.digest_key` recorded it (under unkeyed names),
    /// when this one is keyed and such a record exists: which contact holds it there, and its
    /// keys. What a registration moves away from, an unregister still finds.
    func legacyHolding(_ pushToken: String, app: String, on loop: EventLoop?) async throws(StoreError) -> (contact: ContactKeys, token: TokenKeys)? {
        guard let legacy = digests.legacy else { return nil }
        let token = legacy.token(pushToken, app: app)
        guard let contact = try await store.owner(of: token, app: keys(of: app), on: loop) else { return nil }
        return (contact, token)
    }

    /// The keys a contact's installations are kept under: the keyed ones, then (when keyed) the
    /// unkeyed ones a build without `store.digest_key` wrote, which listing and erasure still read.
    func contactKeys(_ contactID: String, app: String) -> [ContactKeys] {
        [digests.contact(contactID, app: app)] + (digests.legacy.map { [$0.contact(contactID, app: app)] } ?? [])
    }

    /// Whether a dedupe hit should refresh the installation's last-seen time now: at most once
    /// per `intervalMillis` per installation and process.
    func touchDue(_ key: String, intervalMillis: Int) -> Bool {
        touches.due(key, intervalMillis: intervalMillis)
    }

    /// Notes that the installation's record was just written (a registration that was forwarded).
    func touched(_ key: String) {
        touches.written(key)
    }

    /// How stale a last-seen time may get on dedupe hits: a tenth of `expire_after`, and at most
    /// a day (contract section 8), so a device that keeps registering is never expired.
    static func touchIntervalMillis(expireAfterMillis: Int?) -> Int {
        let day = 86_400_000
        guard let expire = expireAfterMillis else { return day }
        return max(1, min(expire / 10, day))
    }

    // MARK: Reading

    func holder(of pushToken: String, app: String, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        try await holder(of: digests.token(pushToken, app: app), app: app, on: loop)
    }

    func holder(of token: TokenKeys, app: String, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        try await store.owner(of: token, app: keys(of: app), on: loop)
    }

    func kept(_ pushToken: String, contact: ContactKeys, app: String, on loop: EventLoop?) async throws(StoreError) -> Kept? {
        try await store.installation(digests.token(pushToken, app: app), of: contact, on: loop).map { open($0, of: contact, app: app) }
    }

    func kept(_ token: TokenKeys, contact: ContactKeys, app: String, on loop: EventLoop?) async throws(StoreError) -> Kept? {
        try await store.installation(token, of: contact, on: loop).map { open($0, of: contact, app: app) }
    }

    func all(of contact: ContactKeys, app: String, on loop: EventLoop?) async throws(StoreError) -> [Kept] {
        try await store.installations(of: contact, on: loop).map { open($0, of: contact, app: app) }
    }

    /// Removes the installation from the contact's inventory, only while its record is still
    /// `expected` when given (an erasure must not drop a record a registration just rewrote).
    func forget(_ token: TokenKeys, contact: ContactKeys, app: String, ifStill expected: String? = nil,
                on loop: EventLoop?) async throws(StoreError) -> Bool {
        try await store.remove(token, of: contact, app: keys(of: app), ifStill: expected, on: loop)
    }

    /// The app's keys, built once per app (its 256 shards' names).
    func keys(of app: String) -> AppInventoryKeys {
        appKeys.withLock { known in
            if let keys = known[app] { return keys }
            let keys = AppInventoryKeys(app: app)
            known[app] = keys
            return keys
        }
    }

    /// Opens a record and checks that the token and contact inside are the ones its place names:
    /// a record copied into another contact's inventory or field (a Redis writer's swap, or a
    /// `pwe1:` value, which is bound to no place) opens as unreadable, so it never unregisters the
    /// device it names on another contact's behalf.
    private func open(_ stored: StoredInstallation, of contact: ContactKeys, app: String) -> Kept {
        let unreadable = Kept(stored: stored, pushToken: nil, contactID: nil)
        guard let text = sealer.open(stored.sealed, boundTo: Self.place(of: stored.token, in: contact)),
              let object = (try? JSONValue.parse(Array(text.utf8)))?.objectValue,
              let pushToken = object["t"]?.stringValue, let contactID = object["c"]?.stringValue else { return unreadable }
        // Under the keyed names, or both under the unkeyed ones of a build without the key.
        let belongs = ([digests] + (digests.legacy.map { [$0] } ?? [])).contains {
            $0.token(pushToken, app: app) == stored.token && $0.contact(contactID, app: app) == contact
        }
        guard belongs else {
            logger?.bounded(.warning, "inventory record does not belong where it is stored (moved by hand); not used", key: "misplaced" + app,
                            [("app", app), ("contact", "ct:" + contact.digest.prefix(8)), ("token", "tok:" + stored.token.digest.prefix(8))])
            return unreadable
        }
        return Kept(stored: stored, pushToken: pushToken, contactID: contactID, sessionID: object["s"]?.stringValue)
    }

    /// Where a record's sealed part sits: the contact's inventory and the token's field in it.
    static func place(of token: TokenKeys, in contact: ContactKeys) -> String { contact.inventory + "\u{0}" + token.digest }
}
