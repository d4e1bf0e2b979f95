import Loops
import PWCore
import PWCrypto
import Providers
import Synchronization

/// The outcome of one upstream for one registration.
public enum DedupeOutcome: Sendable, Equatable {
    /// The upstream took it; the fingerprint is now cached.
    case forwarded
    /// The same content was already accepted within `refresh_after`: no upstream call.
    case unchanged
}

/// What remembering a forwarded registration takes: written by `Deduper.commit` once the caller
/// has its other writes ready, so that they share one round trip.
public struct DedupeCommit: Sendable {
    let keys: RegistrationKeys
    let fingerprint: String
    let ttlSeconds: Int
    let owner: String
}

/// Commits under way: `wait()` returns once every one is answered.
public final class StartedCommits: Sendable {
    private let state: Mutex<(remaining: Int, waiter: CheckedContinuation<Void, Never>?)>

    init(count: Int) { state = Mutex((count, nil)) }

    func done() {
        let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
            state.remaining -= 1
            guard state.remaining == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    public func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state in
                guard state.remaining > 0 else { return true }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// Decides whether a registration must reach an upstream, and makes sure concurrent identical
/// registrations (in this process or in others sharing the store) produce exactly one call.
///
/// The cache is written only after the upstream accepted, so a failure is never remembered as a
/// success. When the store fails, dedupe degrades to a no-op: the registration is forwarded, the
/// failure logged and counted.
public struct Deduper: Sendable {
    public let store: any DedupeStore
    let metrics: Metrics
    let logger: Logger
    /// How long a waiter sleeps between looks at a lock held by someone else.
    let pollMillis: Int
    /// Where a commit that failed after the upstream took the registration waits for the store.
    public let pending: PendingWrites

    public init(store: any DedupeStore, metrics: Metrics, logger: Logger, pollMillis: Int = 10, pending: PendingWrites? = nil) {
        self.store = store
        self.metrics = metrics
        self.logger = logger
        self.pollMillis = pollMillis
        self.pending = pending ?? PendingWrites(metrics: metrics, logger: logger)
    }

    /// Runs `forward` unless `fingerprint` is already current for `keys`.
    ///
    /// - Parameters:
    ///   - lockMillis: how long the in-flight lock may live: at least the upstream call's whole
    ///     budget, so that a crashed holder's lock expires and waiters take over.
    ///   - cached: what the entry held when the caller already looked (`peek` on the request's
    ///     loop), so that the lookup is not repeated; nil when it did not look.
    ///   - loop: the request's loop, whose own store connection every step uses; nil off the loops.
    ///   - forward: the upstream call; its error is rethrown and nothing is cached. What it
    ///     returns comes back with `.forwarded` (nil with `.unchanged`).
    /// - Returns: with `.forwarded`, the commit the caller must hand to `commit(_:on:)` (the
    ///   in-flight lock is held until then): the caller sends it with its own writes.
    public func register<Forwarded: Sendable>(
        keys: RegistrationKeys, fingerprint: String, refreshAfterSeconds: Int, lockMillis: Int, app: String,
        cached: String?? = nil, on loop: EventLoop?,
        forward: @Sendable () async throws(UpstreamFailure) -> Forwarded
    ) async throws(UpstreamFailure) -> (DedupeOutcome, Forwarded?, DedupeCommit?) {
        // The common case, a hit, costs one GET and nothing else.
        do {
            let current: String?
            if let cached { current = cached } else { current = try await store.get(keys.entry, on: loop) }
            if current == fingerprint { return (.unchanged, nil, nil) }
        } catch {
            return try await forwardDegraded(error, keys: keys, fingerprint: fingerprint, refreshAfterSeconds: refreshAfterSeconds, app: app, on: loop,
                                                 forward: forward)
        }
        let deadline = MonotonicClock.nowMillis() + UInt64(lockMillis)
        let owner = ProcessUnique.next()
        while true {
            // One round trip: still a miss? then take the in-flight lock.
            let attempt: LockAttempt
            do {
                attempt = try await store.checkAndLock(entry: keys.entry, fingerprint: fingerprint, lock: keys.lock,
                                                       owner: owner, ttlMillis: lockMillis, on: loop)
            } catch {
                return try await forwardDegraded(error, keys: keys, fingerprint: fingerprint, refreshAfterSeconds: refreshAfterSeconds, app: app, on: loop,
                                                 forward: forward)
            }
            switch attempt {
            case .current:
                return (.unchanged, nil, nil)
            case .acquired:
                let forwarded: Forwarded
                do throws(UpstreamFailure) {
                    forwarded = try await forward()
                } catch {
                    try? await store.release(keys.lock, owner: owner, on: loop)
                    throw error
                }
                return (.forwarded, forwarded, DedupeCommit(keys: keys, fingerprint: fingerprint, ttlSeconds: refreshAfterSeconds, owner: owner))
            case .busy:
                // Another request holds the lock: wait for it to finish, then look again.
                if MonotonicClock.nowMillis() >= deadline {
                    // The holder outlived its budget; forwarding twice beats losing a registration.
                    let forwarded = try await forward()
                    return (.forwarded, forwarded, DedupeCommit(keys: keys, fingerprint: fingerprint, ttlSeconds: refreshAfterSeconds, owner: owner))
                }
                try? await Task.sleep(for: .milliseconds(pollMillis))
            }
        }
    }

    private func forwardDegraded<Forwarded: Sendable>(
        _ error: StoreError, keys: RegistrationKeys, fingerprint: String, refreshAfterSeconds: Int, app: String, on loop: EventLoop?,
        forward: @Sendable () async throws(UpstreamFailure) -> Forwarded
    ) async throws(UpstreamFailure) -> (DedupeOutcome, Forwarded?, DedupeCommit?) {
        degrade(error, app: app)
        let forwarded = try await forward()
        // The upstream has it now: remembered as soon as the store answers again.
        return (.forwarded, forwarded, DedupeCommit(keys: keys, fingerprint: fingerprint, ttlSeconds: refreshAfterSeconds, owner: ProcessUnique.next()))
    }

    /// Starts remembering registrations upstreams took and freeing their locks: called on
    /// `loop`'s thread (the request's), their commands go in this turn's write, beside whatever
    /// the caller sends before it next waits (one round trip for both); off the loops, each in a
    /// task of its own. A commit that fails is retried through `pending` until the store answers.
    public func startCommits(_ commits: [DedupeCommit], on loop: EventLoop?) -> StartedCommits {
        let started = StartedCommits(count: commits.count)
        for commit in commits {
            guard let loop, loop.isCurrent else {
                Task {
                    await self.commit(commit, on: loop)
                    started.done()
                }
                continue
            }
            pending.cancel(commit.keys.entry)
            store.commitAndUnlock(entry: commit.keys.entry, fingerprint: commit.fingerprint, ttlSeconds: commit.ttlSeconds,
                                  lock: commit.keys.lock, owner: commit.owner, on: loop) { [self] result in
                if case .failure(let error) = result { retryLater(commit, after: error) }
                started.done()
            }
        }
        return started
    }

    /// Remembers a registration an upstream took and frees its lock, now.
    public func commit(_ commits: [DedupeCommit], on loop: EventLoop?) async {
        for commit in commits { await self.commit(commit, on: loop) }
    }

    private func commit(_ commit: DedupeCommit, on loop: EventLoop?) async {
        let (keys, fingerprint, ttlSeconds, owner) = (commit.keys, commit.fingerprint, commit.ttlSeconds, commit.owner)
        pending.cancel(keys.entry)
        do {
            try await store.commitAndUnlock(entry: keys.entry, fingerprint: fingerprint, ttlSeconds: ttlSeconds, lock: keys.lock, owner: owner, on: loop)
        } catch {
            retryLater(commit, after: error)
        }
    }

    private func retryLater(_ commit: DedupeCommit, after error: StoreError) {
        let store = store
        pending.add(.dedupe, key: commit.keys.entry, error: error) { () async throws(StoreError) in
            try await store.commitAndUnlock(entry: commit.keys.entry, fingerprint: commit.fingerprint, ttlSeconds: commit.ttlSeconds,
                                            lock: commit.keys.lock, owner: commit.owner, on: nil)
        }
    }

    /// Forgets the token so that the next registration is forwarded.
    public func forget(keys: RegistrationKeys, app: String, on loop: EventLoop?) async {
        pending.cancel(keys.entry)
        let store = store
        // An entry a build without `store.digest_key` wrote goes too: a forgotten token leaves nothing behind.
        let delete = { @Sendable (loop: EventLoop?) async throws(StoreError) in
            try await store.delete(keys.entry, on: loop)
            if let legacy = keys.legacyEntry { try await store.delete(legacy, on: loop) }
        }
        do {
            try await delete(loop)
        } catch {
            degrade(error, app: app)
            pending.add(.dedupe, key: keys.entry, error: error) { () async throws(StoreError) in try await delete(nil) }
        }
    }

    private func degrade(_ error: StoreError, app: String) {
        metrics.dedupeDegraded(app: app)
        logger.bounded(.warning, "dedupe store unavailable; forwarding without dedupe", key: app, [("app", app), ("store", store.kind), ("error", error.detail)])
    }
}
