import PWCore

/// How many installations and contacts an app's inventory holds, and how many installations each
/// upstream holds, as the store's counters say.
package struct InventoryCounts: Sendable, Equatable {
    package var installations: Int
    package var contacts: Int
    /// Upstream name → installations whose record names it.
    package var upstreams: [String: Int]

    package init(installations: Int = 0, contacts: Int = 0, upstreams: [String: Int] = [:]) {
        self.installations = installations
        self.contacts = contacts
        self.upstreams = upstreams
    }
}

/// Where the export walk stands: the last installation it returned, by the place it keeps in its
/// shard's index (`<token digest>:<contact digest>`). Installations are walked shard by shard
/// (the token digest's first two hex digits) and, within a shard, in that order, which never
/// changes while an installation lives: so one present from the first page to the last is
/// returned exactly once.
package struct InventoryPosition: Sendable, Equatable {
    package let token: TokenKeys
    package let contact: ContactKeys

    package init(token: TokenKeys, contact: ContactKeys) {
        self.token = token
        self.contact = contact
    }

    /// `<token digest>:<contact digest>:`, the start of the installation's member in its shard's
    /// index (the upstreams follow).
    package var indexKey: String { token.digest + ":" + contact.digest + ":" }

    /// Reads an index member back (`<token>:<contact>:<upstream,...>`); nil when it is not one.
    package static func parse(indexMember member: String) -> (position: InventoryPosition, upstreams: [String])? {
        let parts = member.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, isDigest(parts[0]), isDigest(parts[1]) else { return nil }
        let names = parts[2].split(separator: ",").map(String.init)
        return (InventoryPosition(token: TokenKeys(digest: String(parts[0])), contact: ContactKeys(digest: String(parts[1]))), names)
    }

    /// 64 lowercase hex digits: what every digest the store names things by looks like.
    package static func isDigest(_ text: Substring) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}

/// One page of the export walk: the installations found after the position asked for, in walk
/// order, and whether the walk may go on after the last of them.
package struct InventoryPage: Sendable {
    package var entries: [InventoryPosition]
    /// False once the walk has passed the last shard.
    package var more: Bool

    package init(entries: [InventoryPosition], more: Bool) {
        self.entries = entries
        self.more = more
    }
}

/// What a store keeps to answer for a whole app without scanning it: counters kept with every
/// write of the inventory, the ordered index the export walks, and the bounded repair of both.
package protocol InventoryCensus: Sendable {
    /// The app's counts, summed over its shards (a bounded read: two small values per shard).
    func counts(app: AppInventoryKeys) async throws(StoreError) -> InventoryCounts
    /// Up to `limit` installations after `position` (from the start when nil), in walk order.
    func page(app: AppInventoryKeys, after position: InventoryPosition?, limit: Int) async throws(StoreError) -> InventoryPage
    /// Compares one shard's index and counts with the records they stand for and mends what
    /// drifted (a write that reached the record and not the shard, or the other way round; data
    /// from before the counts existed). How many entries it mended.
    func reconcile(shard: Int, app: AppInventoryKeys) async throws(StoreError) -> Int
}
