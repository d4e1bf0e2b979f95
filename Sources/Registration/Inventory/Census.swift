import PWCore
import PWCrypto
import Synchronization

/// An app's coverage as last counted: what `GET /v1/apps/{app}/coverage` answers and the
/// inventory gauges show.
package struct CoverageSnapshot: Sendable, Equatable {
    package let installations: Int
    package let contacts: Int
    /// Every upstream of the app in policy order, with how many installations it holds (0 when none).
    package let upstreams: [(name: String, installations: Int)]
    /// When the counts were read (ms since the epoch).
    package let asOfMillis: Int64

    /// The share of the app's installations `count` is (0 for an empty app), to four decimals.
    package func share(_ count: Int) -> Double {
        guard installations > 0 else { return 0 }
        return (Double(min(count, installations)) / Double(installations) * 10_000).rounded() / 10_000
    }

    package static func == (a: CoverageSnapshot, b: CoverageSnapshot) -> Bool {
        a.installations == b.installations && a.contacts == b.contacts && a.asOfMillis == b.asOfMillis
            && a.upstreams.map(\.name) == b.upstreams.map(\.name) && a.upstreams.map(\.installations) == b.upstreams.map(\.installations)
    }
}

/// One installation of the export walk: its contact id (nil when its record is sealed under a
/// key this process does not hold) and what the per-contact listing shows of it.
package struct ExportedInstallation: Sendable {
    package let contactID: String?
    package let summary: InstallationSummary
}

/// The fleet view of each app's inventory (migration between providers): its counts, kept by the
/// store as the inventory changes and read at most once per `maxAgeMillis` per app and process
/// (the route and the gauges share the reading); the paged export; and, in `run`, the bounded
/// pass that reconciles a few shards of each app at a time, one replica at a time (a lease).
///
/// Thread-safe: the last readings sit behind one lock.
package final class Census: Sendable {
    let inventory: Inventory
    let apps: AppTable
    let metrics: Metrics
    let logger: Logger
    /// How old a reading may be before the next request or tick reads again.
    let maxAgeMillis: Int64
    /// The pause between reconcile ticks, and the shards each tick reconciles per app.
    let tickMillis: Int
    let shardsPerTick: Int
    /// Names this replica's lease.
    private let owner = Base64URL.encode(SecureRandom.bytes(9))
    private let readings = Mutex<[String: CoverageSnapshot]>([:])
    /// The next shard this replica reconciles, per app; begun at a random one.
    private let nextShard = Mutex<[String: Int]>([:])
    /// Most installations one export page holds.
    package static let maxPage = 1_000

    package init(inventory: Inventory, apps: AppTable, metrics: Metrics, logger: Logger, maxAgeMillis: Int64 = 60_000,
                 tickMillis: Int = 10_000, shardsPerTick: Int = 1) {
        self.inventory = inventory
        self.apps = apps
        self.metrics = metrics
        self.logger = logger
        self.maxAgeMillis = maxAgeMillis
        self.tickMillis = tickMillis
        self.shardsPerTick = shardsPerTick
    }

    // MARK: Coverage

    /// The app's coverage, read again when the last reading is older than `maxAgeMillis`.
    package func coverage(of app: AppRuntime) async throws(StoreError) -> CoverageSnapshot {
        let now = inventory.clock()
        if let last = readings.withLock({ $0[app.policy.id] }), now - last.asOfMillis < maxAgeMillis, now >= last.asOfMillis {
            return last
        }
        return try await read(app)
    }

    /// Counts the app now, keeps the reading and sets the gauges from it.
    @discardableResult
    func read(_ app: AppRuntime) async throws(StoreError) -> CoverageSnapshot {
        let appID = app.policy.id
        let counts = try await inventory.store.counts(app: inventory.keys(of: appID))
        let snapshot = CoverageSnapshot(installations: counts.installations, contacts: counts.contacts,
                                        upstreams: app.policy.upstreams.map { ($0.name, counts.upstreams[$0.name] ?? 0) },
                                        asOfMillis: inventory.clock())
        readings.withLock { $0[appID] = snapshot }
        metrics.inventoryCounts(app: appID, installations: snapshot.installations, contacts: snapshot.contacts,
                                upstreams: snapshot.upstreams.map { ($0.name, $0.installations) })
        return snapshot
    }

    // MARK: Export

    /// Up to `limit` installations of the app after `position` (from the first when nil), each
    /// opened from its record, and where the next page starts (nil: the walk is done). An index
    /// entry whose record is gone (removed since) is left out.
    package func export(_ app: AppRuntime, after position: InventoryPosition?, limit: Int) async throws(StoreError)
        -> (installations: [ExportedInstallation], next: InventoryPosition?) {
        let appID = app.policy.id
        let page = try await inventory.store.page(app: inventory.keys(of: appID), after: position, limit: min(max(1, limit), Self.maxPage))
        let results = await mapConcurrently(page.entries, width: 32) { [inventory] entry in
            await capture { () async throws(StoreError) in try await inventory.kept(entry.token, contact: entry.contact, app: appID, on: nil) }
        }
        var exported: [ExportedInstallation] = []
        exported.reserveCapacity(results.count)
        for result in results {
            guard let kept = try result.get() else { continue }
            var odd: [String] = []
            exported.append(ExportedInstallation(contactID: kept.contactID, summary: InstallationSummary(kept, odd: &odd)))
        }
        return (exported, page.more ? page.entries.last : nil)
    }

    // MARK: The background pass

    /// Until cancelled: each tick, every app's counts are read again when due (the gauges), and,
    /// for the replica holding the app's lease, `shardsPerTick` of its shards are reconciled.
    package func run() async {
        while !Task.isCancelled {
            let inForce = apps.all
            metrics.keepInventoryCounts(of: Set(inForce.keys))
            for app in inForce.values {
                await tick(app)
            }
            try? await Task.sleep(for: .milliseconds(tickMillis))
        }
    }

    /// One tick for one app: its reading when due, then its next shards under the lease.
    func tick(_ app: AppRuntime) async {
        let appID = app.policy.id
        let keys = inventory.keys(of: appID)
        do {
            _ = try await coverage(of: app)
            guard try await inventory.store.lease(keys.censusLease, owner: owner, ttlMillis: 3 * tickMillis) else { return }
            var mended = 0
            for _ in 0..<shardsPerTick {
                let shard = nextShard.withLock { next in
                    let shard = next[appID] ?? Int.random(in: 0..<AppInventoryKeys.shardCount)
                    next[appID] = (shard + 1) % AppInventoryKeys.shardCount
                    return shard
                }
                mended += try await inventory.store.reconcile(shard: shard, app: keys)
            }
            if mended > 0 { logger.info("inventory counts reconciled", [("app", appID), ("mended", String(mended))]) }
        } catch {
            logger.bounded(.warning, "inventory store unavailable; counts wait", key: "census" + appID, [("app", appID), ("error", error.detail)])
        }
    }

    /// Reconciles every shard of the app now (tests, and a first pass after an upgrade).
    package func reconcileAll(_ app: AppRuntime) async throws(StoreError) -> Int {
        let keys = inventory.keys(of: app.policy.id)
        var mended = 0
        for shard in 0..<AppInventoryKeys.shardCount { mended += try await inventory.store.reconcile(shard: shard, app: keys) }
        return mended
    }
}
