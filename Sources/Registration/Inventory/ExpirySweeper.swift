import PWCore
import PWCrypto
import Providers

/// Retires installations nobody registered again for `apps.<id>.inventory.expire_after`:
/// unregistered upstream and forgotten, oldest first, a bounded batch per pass. Every replica
/// runs one; a lease in the store lets one replica at a time sweep an app.
package struct ExpirySweeper: Sendable {
    let registrar: Registrar
    /// The apps in force (a reload may change them between passes).
    let apps: AppTable
    let metrics: Metrics
    let logger: Logger
    /// Names this replica's lease.
    let owner = Base64URL.encode(SecureRandom.bytes(9))
    /// Installations retired per app and pass.
    static let batch = 100

    package init(registrar: Registrar, apps: AppTable, metrics: Metrics, logger: Logger) {
        self.registrar = registrar
        self.apps = apps
        self.metrics = metrics
        self.logger = logger
    }

    /// Sweeps until cancelled, each app every tenth of its `expire_after` (between 100 ms and a
    /// minute).
    package func run() async {
        while !Task.isCancelled {
            var pauseMillis = 60_000
            for app in apps.all.values {
                guard let expire = app.policy.inventory.expireAfterMillis else { continue }
                let interval = Self.intervalMillis(expireAfterMillis: expire)
                pauseMillis = min(pauseMillis, interval)
                _ = await sweep(app, expireAfterMillis: expire, leaseMillis: 3 * interval)
            }
            try? await Task.sleep(for: .milliseconds(pauseMillis))
        }
    }

    static func intervalMillis(expireAfterMillis: Int) -> Int { min(60_000, max(100, expireAfterMillis / 10)) }

    /// One pass over one app: how many installations it retired.
    func sweep(_ app: AppRuntime, expireAfterMillis: Int, leaseMillis: Int) async -> Int {
        let inventory = registrar.inventory
        let appID = app.policy.id
        let keys = inventory.keys(of: appID)
        let cutoff = inventory.clock() - Int64(expireAfterMillis)
        let due: [(ContactKeys, Inventory.Kept)]
        do {
            guard try await inventory.store.lease(keys.sweepLease, owner: owner, ttlMillis: leaseMillis) else { return 0 }
            var found: [(ContactKeys, Inventory.Kept)] = []
            for (contact, token) in try await inventory.store.seen(before: cutoff, app: keys, limit: Self.batch) {
                guard let kept = try await inventory.kept(token, contact: contact, app: appID, on: nil) else {
                    try await inventory.store.forgetSeen(token, of: contact, app: keys)
                    continue
                }
                if kept.stored.lastSeenMillis < cutoff {
                    found.append((contact, kept))
                } else {
                    // Seen since (a write that reached the record and not the index): the index
                    // catches up, so an entry that is not due never stays at the head.
                    try await inventory.store.indexSeen(token, of: contact, app: keys, at: kept.stored.lastSeenMillis,
                                                         upstreams: kept.stored.upstreams)
                }
            }
            due = found
        } catch {
            logger.bounded(.warning, "inventory store unavailable; expiry waits", key: "expiry" + appID, [("app", appID), ("error", error.detail)])
            return 0
        }
        await withTaskGroup(of: Void.self) { group in
            for (contact, kept) in due {
                group.addTask { [registrar] in
                    // No client headers: a provider that takes only the user's own credential is skipped.
                    let origin = Registrar.Origin(app: app, context: CallContext(contactID: kept.contactID ?? ""), requestID: "expiry",
                                                  loop: nil)
                    _ = await registrar.retire(kept, contact: contact, origin: origin, reason: .expired)
                }
            }
        }
        return due.count
    }
}
