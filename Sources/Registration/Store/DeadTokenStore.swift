import Loops
import PWCore
import PWCrypto
import Synchronization

/// Where one app's dead-token guard keeps its state, under one hash tag
/// (`pw:v2:{dead:<app>}:...`, `<app>` the first 16 hex digits of the app id's SHA-256): the
/// removals counted per minute and the reports the guard holds.
public struct DeadTokenKeys: Sendable, Equatable {
    /// The hex SHA-256 of the app id.
    public let digest: String
    /// `pw:v2:{dead:<app>}:`.
    public let prefix: String
    /// The held reports: a hash from the token's digest to the held report.
    public let held: String

    public init(app: String) {
        digest = SHA256.hexHash(Array(app.utf8))
        prefix = "pw:v2:{dead:" + digest.prefix(16) + "}:"
        held = prefix + "held"
    }

    /// The removals counted in the minute that starts at `minute` × 60 s.
    public func window(_ minute: Int64) -> String { prefix + "win:" + String(minute) }
}

/// One report held by the mass-death guard, as stored: the token's digest names it; the record
/// holds the token (sealed, bound to its place) and what the report said.
package struct HeldReport: Sendable, Equatable {
    package let field: String
    package let record: String

    package init(field: String, record: String) {
        self.field = field
        self.record = record
    }
}

/// The mass-death guard's shared state: the removals of the last minute
/// per app, counted where every replica counts, and the reports held back.
package protocol DeadTokenStore: Sendable {
    /// Counts up to `count` removals into the app's current minute and answers how many were
    /// admitted: as many as keep the last minute's removals (the current minute plus the part of
    /// the one before still within 60 s) at or under `limit`, and none while reports are held.
    /// Decided and counted in one step, so replicas share the count.
    func admit(_ count: Int, limit: Int, app: DeadTokenKeys, nowMillis: Int64) async throws(StoreError) -> Int
    /// About how many installations the app's inventory holds (its last-seen index).
    func installationCount(app: AppInventoryKeys) async throws(StoreError) -> Int
    /// Keeps the reports (a report of a token already held replaces it).
    func hold(_ reports: [HeldReport], app: DeadTokenKeys) async throws(StoreError)
    /// Up to about `limit` held reports from `cursor` ("0" to start) and the cursor that goes on
    /// ("0" at the end).
    func held(app: DeadTokenKeys, cursor: String, limit: Int) async throws(StoreError) -> (next: String, reports: [HeldReport])
    func heldCount(app: DeadTokenKeys) async throws(StoreError) -> Int
    /// Drops a held report while it is still `record`; true when it went.
    func unhold(_ field: String, ifStill record: String, app: DeadTokenKeys) async throws(StoreError) -> Bool
}

extension DeadTokenStore {
    /// What the last minute already counts: all of the current minute and the share of the one
    /// before that is still within 60 s of now (the sliding-window estimate every replica makes alike).
    package static func admitted(requested: Int, limit: Int, current: Int, previous: Int, nowMillis: Int64) -> Int {
        let elapsed = Double(nowMillis - (nowMillis / 60_000) * 60_000) / 60_000
        let used = current + Int((Double(previous) * (1 - elapsed)).rounded(.up))
        return max(0, min(requested, limit - used))
    }
}

/// The embedded store's guard: one process counts alone, and what it holds goes with it.
package final class MemoryDeadTokenStore: DeadTokenStore {
    private struct State {
        /// Window key → removals counted.
        var windows: [String: Int] = [:]
        /// Held-reports key → token digest → record.
        var held: [String: [String: String]] = [:]
    }

    private let state = Mutex(State())
    private let inventory: MemoryInventoryStore?

    package init(inventory: MemoryInventoryStore?) {
        self.inventory = inventory
    }

    package func admit(_ count: Int, limit: Int, app: DeadTokenKeys, nowMillis: Int64) async throws(StoreError) -> Int {
        let minute = nowMillis / 60_000
        return state.withLock { state in
            guard state.held[app.held]?.isEmpty ?? true else { return 0 }
            let current = state.windows[app.window(minute)] ?? 0
            let admitted = Self.admitted(requested: count, limit: limit, current: current,
                                         previous: state.windows[app.window(minute - 1)] ?? 0, nowMillis: nowMillis)
            state.windows = state.windows.filter { $0.key == app.window(minute - 1) || !$0.key.hasPrefix(app.prefix) }
            state.windows[app.window(minute)] = current + admitted
            return admitted
        }
    }

    package func installationCount(app: AppInventoryKeys) async throws(StoreError) -> Int {
        inventory?.seenCount(app: app) ?? 0
    }

    package func hold(_ reports: [HeldReport], app: DeadTokenKeys) async throws(StoreError) {
        state.withLock { state in
            for report in reports { state.held[app.held, default: [:]][report.field] = report.record }
        }
    }

    package func held(app: DeadTokenKeys, cursor: String, limit: Int) async throws(StoreError) -> (next: String, reports: [HeldReport]) {
        let all = state.withLock { $0.held[app.held] ?? [:] }.sorted { $0.key < $1.key }
        let start = Int(cursor) ?? 0
        guard start < all.count else { return ("0", []) }
        let end = min(all.count, start + max(1, limit))
        return (end == all.count ? "0" : String(end), all[start..<end].map { HeldReport(field: $0.key, record: $0.value) })
    }

    package func heldCount(app: DeadTokenKeys) async throws(StoreError) -> Int {
        state.withLock { $0.held[app.held]?.count ?? 0 }
    }

    package func unhold(_ field: String, ifStill record: String, app: DeadTokenKeys) async throws(StoreError) -> Bool {
        state.withLock { state in
            guard state.held[app.held]?[field] == record else { return false }
            state.held[app.held]?[field] = nil
            return true
        }
    }
}
