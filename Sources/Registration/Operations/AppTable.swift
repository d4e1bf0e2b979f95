import Synchronization

/// The apps in force, swapped whole by a policy reload: what the client API, the server-to-server
/// API, the outbox workers and the expiry sweeper look apps up in.
///
/// A request resolves its `AppRuntime` once and keeps it, so requests in flight finish on the
/// policy they began with; the workers and the sweeper look again on every pass.
///
/// Thread-safety: one lock, held only to copy or swap the table.
package final class AppTable: Sendable {
    private let table: Mutex<[String: AppRuntime]>

    package init(_ apps: [String: AppRuntime]) {
        table = Mutex(apps)
    }

    /// Every app in force, by id.
    package var all: [String: AppRuntime] { table.withLock { $0 } }

    package subscript(id id: String) -> AppRuntime? { table.withLock { $0[id] } }

    /// Puts `apps` in force for lookups from now on; returns the apps they replace.
    package func replace(with apps: [String: AppRuntime]) -> [String: AppRuntime] {
        table.withLock { table in
            defer { table = apps }
            return table
        }
    }
}
