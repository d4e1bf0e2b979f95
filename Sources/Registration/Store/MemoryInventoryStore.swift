import Loops
import PWCore
import Synchronization

/// The embedded store's inventory: one process, nothing shared, nothing survives a restart.
package final class MemoryInventoryStore: InventoryStore {
    private struct State {
        /// Contact digest → token digest → stored record.
        var inventories: [String: [String: String]] = [:]
        /// Token digest → contact digest.
        var owners: [String: String] = [:]
        /// App digest → seen member → last seen (ms). One index per app: shards spread keys over a
        /// cluster's slots, which one process does not have.
        var seen: [String: [String: Int64]] = [:]
        /// App digest → `InventoryPosition.indexKey` → the upstreams holding the installation: what
        /// the counts and the export walk read (the Redis shards' index, in one dictionary).
        var index: [String: [String: [String]]] = [:]
        /// Lease key → (owner, expiry in monotonic nanoseconds).
        var leases: [String: (String, UInt64)] = [:]
        /// Session index key → (contact digest, expiry in ms since the epoch).
        var sessions: [String: (String, Int64)] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    package func record(_ write: InventoryWrite, on loop: EventLoop?) async throws(StoreError) -> InventoryWriteResult {
        state.withLock { state in
            let previous = state.owners.updateValue(write.contact.digest, forKey: write.token.digest)
            var records = state.inventories[write.contact.digest, default: [:]]
            let existing = records[write.token.digest].flatMap { StoredInstallation.decode($0, token: write.token) }
            var upstreams = existing?.upstreams ?? []
            for name in write.upstreams where !upstreams.contains(name) { upstreams.append(name) }
            records[write.token.digest] = StoredInstallation.encode(
                sealed: write.sealed, platform: write.platform, pushService: write.pushService, upstreams: upstreams,
                firstSeen: existing?.firstSeenMillis ?? write.nowMillis, lastSeen: write.nowMillis)
            state.inventories[write.contact.digest] = records
            state.seen[write.app.digest, default: [:]][Self.seenMember(write.contact, write.token)] = write.nowMillis
            state.index[write.app.digest, default: [:]][InventoryPosition(token: write.token, contact: write.contact).indexKey] = upstreams
            if let session = write.session {
                if state.sessions.count >= 100_000 { state.sessions = state.sessions.filter { $0.value.1 > write.nowMillis } }
                state.sessions[session.key] = (write.contact.digest, write.nowMillis + Int64(session.ttlMillis))
            }
            let moved = previous.flatMap { $0 == write.contact.digest ? nil : ContactKeys(digest: $0) }
            return InventoryWriteResult(previousOwner: moved, isNew: existing == nil, count: records.count)
        }
    }

    package func sessionHolder(_ key: String, nowMillis: Int64, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        state.withLock { state in
            guard let (digest, expiry) = state.sessions[key], expiry > nowMillis else { return nil }
            return ContactKeys(digest: digest)
        }
    }

    package func owner(of token: TokenKeys, app: AppInventoryKeys, on loop: EventLoop?) async throws(StoreError) -> ContactKeys? {
        state.withLock { $0.owners[token.digest].map(ContactKeys.init(digest:)) }
    }

    package func installation(_ token: TokenKeys, of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> StoredInstallation? {
        state.withLock { $0.inventories[contact.digest]?[token.digest] }.flatMap { StoredInstallation.decode($0, token: token) }
    }

    package func installations(of contact: ContactKeys, on loop: EventLoop?) async throws(StoreError) -> [StoredInstallation] {
        let records = state.withLock { $0.inventories[contact.digest] ?? [:] }
        return records.compactMap { StoredInstallation.decode($0.value, token: TokenKeys(digest: $0.key)) }
    }

    package func remove(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, ifStill expected: String?, on loop: EventLoop?) async throws(StoreError) -> Bool {
        state.withLock { state in
            let current = state.inventories[contact.digest]?[token.digest]
            if let expected, current != expected { return false }
            state.inventories[contact.digest]?[token.digest] = nil
            if state.inventories[contact.digest]?.isEmpty == true { state.inventories[contact.digest] = nil }
            if state.owners[token.digest] == contact.digest { state.owners[token.digest] = nil }
            state.seen[app.digest]?[Self.seenMember(contact, token)] = nil
            state.index[app.digest]?[InventoryPosition(token: token, contact: contact).indexKey] = nil
            return true
        }
    }

    package func seen(before cutoffMillis: Int64, app: AppInventoryKeys, limit: Int) async throws(StoreError) -> [(contact: ContactKeys, token: TokenKeys)] {
        let entries = state.withLock { $0.seen[app.digest] ?? [:] }
        return entries.filter { $0.value < cutoffMillis }
            .sorted { ($0.value, $0.key) < ($1.value, $1.key) }
            .prefix(limit)
            .compactMap { Self.parseSeenMember($0.key) }
    }

    package func forgetSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys) async throws(StoreError) {
        state.withLock { state in
            state.seen[app.digest]?[Self.seenMember(contact, token)] = nil
            state.index[app.digest]?[InventoryPosition(token: token, contact: contact).indexKey] = nil
        }
    }

    package func indexSeen(_ token: TokenKeys, of contact: ContactKeys, app: AppInventoryKeys, at millis: Int64,
                           upstreams: [String]) async throws(StoreError) {
        state.withLock { state in
            state.seen[app.digest, default: [:]][Self.seenMember(contact, token)] = millis
            let key = InventoryPosition(token: token, contact: contact).indexKey
            if state.index[app.digest]?[key] == nil { state.index[app.digest, default: [:]][key] = upstreams }
        }
    }

    /// How many installations the app's last-seen index holds (the dead-token guard's share).
    package func seenCount(app: AppInventoryKeys) -> Int {
        state.withLock { $0.seen[app.digest]?.count ?? 0 }
    }

    package func releaseLease(_ key: String, owner: String) async throws(StoreError) {
        state.withLock { state in
            if state.leases[key]?.0 == owner { state.leases[key] = nil }
        }
    }

    package func lease(_ key: String, owner: String, ttlMillis: Int) async throws(StoreError) -> Bool {
        let now = MonotonicClock.nowNanos()
        return state.withLock { state in
            if let (holder, expiry) = state.leases[key], expiry > now, holder != owner { return false }
            state.leases[key] = (owner, now + UInt64(max(ttlMillis, 1)) * 1_000_000)
            return true
        }
    }
}

/// The counts and the walk over one process's index. Every write updates the index under the
/// same lock as the records, so there is nothing to reconcile.
extension MemoryInventoryStore {
    package func counts(app: AppInventoryKeys) async throws(StoreError) -> InventoryCounts {
        state.withLock { state in
            var counts = InventoryCounts()
            var contacts = Set<Substring>()
            for (key, upstreams) in state.index[app.digest] ?? [:] {
                counts.installations += 1
                contacts.insert(key.dropFirst(65).prefix(64))
                for name in upstreams { counts.upstreams[name, default: 0] += 1 }
            }
            counts.contacts = contacts.count
            return counts
        }
    }

    package func page(app: AppInventoryKeys, after position: InventoryPosition?, limit: Int) async throws(StoreError) -> InventoryPage {
        let keys = state.withLock { state in Array((state.index[app.digest] ?? [:]).keys) }
        let after = position?.indexKey ?? ""
        let following = keys.filter { $0 > after }.sorted()
        let entries = following.prefix(max(0, limit)).compactMap { InventoryPosition.parse(indexMember: $0)?.position }
        return InventoryPage(entries: entries, more: following.count > limit)
    }

    package func reconcile(shard: Int, app: AppInventoryKeys) async throws(StoreError) -> Int { 0 }
}
