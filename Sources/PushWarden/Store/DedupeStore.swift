/// Why the store could not answer. Callers degrade (forward without dedupe) rather than fail.
public struct StoreError: Error, Sendable, Equatable {
    public var detail: String
    public init(_ detail: String) { self.detail = detail }
}

/// The key-value operations dedupe needs, with the semantics Redis gives them.
///
/// Keys are always hashes (see `DedupeKeys`), never raw push tokens.
public protocol DedupeStore: Sendable {
    func get(_ key: String) async throws(StoreError) -> String?
    /// Sets `key` to `value`, expiring after `ttlSeconds`.
    func set(_ key: String, _ value: String, ttlSeconds: Int) async throws(StoreError)
    func delete(_ key: String) async throws(StoreError)
    /// Sets `key` to `owner` only when it is absent, expiring after `ttlMillis`. True when this
    /// call took the lock.
    func acquire(_ key: String, owner: String, ttlMillis: Int) async throws(StoreError) -> Bool
    /// Deletes `key` only while it still holds `owner`, so an expired lock taken over by another
    /// process is never released by the old holder.
    func release(_ key: String, owner: String) async throws(StoreError)
    /// True when the store answers now (for `/readyz`).
    func isReachable() async -> Bool
    /// A short name for logs and metrics (`memory`, `redis`).
    var kind: String { get }
}
