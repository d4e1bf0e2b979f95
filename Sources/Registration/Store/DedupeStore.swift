import Loops

/// Why the store could not answer. Callers degrade (forward without dedupe) rather than fail.
public struct StoreError: Error, Sendable, Equatable {
    /// What failed; code branches on this, never on `detail`.
    public enum Kind: Sendable, Equatable {
        /// No answer: no connection, a broken one, or the reconnect backoff.
        case unavailable
        /// No answer in time.
        case timeout
        /// The store does not know the script it was asked to run by its hash (Redis `NOSCRIPT`,
        /// after a restart or `SCRIPT FLUSH`): send its source.
        case missingScript
        /// What was asked to be created exists already (Redis `BUSYGROUP`).
        case alreadyExists
        /// A stream's consumer group is gone (Redis `NOGROUP`: the stream was deleted, or Redis
        /// restarted empty): make it again.
        case missingGroup
        /// The store answered with an error of its own.
        case refused
        /// An answer of a shape the command never gives.
        case unexpectedReply
    }

    public var kind: Kind
    /// For the log only.
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }
}

/// What `checkAndLock` found.
public enum LockAttempt: Sendable, Equatable {
    case current, acquired, busy
}

/// The key-value operations dedupe needs, with the semantics Redis gives them.
///
/// Keys are always hashes (see `DedupeKeys`), never raw push tokens. Every async operation takes
/// the loop it is made for: a request's loop (`Registrar.Origin.loop`), whose own connection a
/// shared store uses, or nil off the loops (an outbox worker, the sweeper, an admin call), for
/// the store's pool. The caller says which; a store never reads it from the thread it runs on.
public protocol DedupeStore: Sendable {
    func get(_ key: String, on loop: EventLoop?) async throws(StoreError) -> String?
    /// `get` for the hot path: looked up from `loop`'s thread without leaving it, `completion`
    /// called on that thread (before returning, when the answer is at hand). Call on `loop`.
    func peek(_ key: String, on loop: EventLoop, completion: @escaping (Result<String?, StoreError>) -> Void)
    /// Sets `key` to `value`, expiring after `ttlSeconds`.
    func set(_ key: String, _ value: String, ttlSeconds: Int, on loop: EventLoop?) async throws(StoreError)
    func delete(_ key: String, on loop: EventLoop?) async throws(StoreError)
    /// Deletes `key` only while it still holds `owner`, so an expired lock taken over by another
    /// process is never released by the old holder.
    func release(_ key: String, owner: String, on loop: EventLoop?) async throws(StoreError)
    /// In one step: `.current` when `entry` already holds `fingerprint`, otherwise tries to take
    /// `lock` for `owner` (set only when absent, expiring after `ttlMillis`): `.acquired` or `.busy`.
    func checkAndLock(entry: String, fingerprint: String, lock: String, owner: String, ttlMillis: Int,
                      on loop: EventLoop?) async throws(StoreError) -> LockAttempt
    /// In one step: writes `entry` = `fingerprint` for `ttlSeconds` and releases `lock` if
    /// `owner` still holds it.
    func commitAndUnlock(entry: String, fingerprint: String, ttlSeconds: Int, lock: String, owner: String,
                         on loop: EventLoop?) async throws(StoreError)
    /// `commitAndUnlock` sent from `loop`'s thread without leaving it: its command goes in this
    /// turn's write; `completion` is called on that thread. Call on `loop`.
    func commitAndUnlock(entry: String, fingerprint: String, ttlSeconds: Int, lock: String, owner: String,
                         on loop: EventLoop, completion: @escaping (Result<Void, StoreError>) -> Void)
    /// True when the store answers now (for `/readyz`).
    func isReachable() async -> Bool
    /// A short name for logs and metrics (`memory`, `redis`).
    var kind: String { get }
}
