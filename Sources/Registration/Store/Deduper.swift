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
    public func register<Forwarded: Sendable>(
        keys: RegistrationKeys, fingerprint: String, refreshAfterSeconds: Int, lockMillis: Int, app: String,
        cached: String?? = nil, on loop: EventLoop?,
        forward: @Sendable () async throws(UpstreamFailure) -> Forwarded
    ) async throws(UpstreamFailure) -> (DedupeOutcome, Forwarded?) {
        // The common case, a hit, costs one GET and nothing else.
        do {
            let current: String?
            if let cached { current = cached } else { current = try await store.get(keys.entry, on: loop) }
            if current == fingerprint { return (.unchanged, nil) }
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
                return (.unchanged, nil)
            case .acquired:
                let forwarded: Forwarded
                do throws(UpstreamFailure) {
                    forwarded = try await forward()
                } catch {
                    try? await store.release(keys.lock, owner: owner, on: loop)
                    throw error
                }
                await commit(keys, fingerprint: fingerprint, ttlSeconds: refreshAfterSeconds, owner: owner, on: loop)
                return (.forwarded, forwarded)
            case .busy:
                // Another request holds the lock: wait for it to finish, then look again.
                if MonotonicClock.nowMillis() >= deadline {
                    // The holder outlived its budget; forwarding twice beats losing a registration.
                    let forwarded = try await forward()
                    await commit(keys, fingerprint: fingerprint, ttlSeconds: refreshAfterSeconds, owner: owner, on: loop)
                    return (.forwarded, forwarded)
                }
                try? await Task.sleep(for: .milliseconds(pollMillis))
            }
        }
    }

    private func forwardDegraded<Forwarded: Sendable>(
        _ error: StoreError, keys: RegistrationKeys, fingerprint: String, refreshAfterSeconds: Int, app: String, on loop: EventLoop?,
        forward: @Sendable () async throws(UpstreamFailure) -> Forwarded
    ) async throws(UpstreamFailure) -> (DedupeOutcome, Forwarded?) {
        degrade(error, app: app)
        let forwarded = try await forward()
        // The upstream has it now: remembered as soon as the store answers again.
        await commit(keys, fingerprint: fingerprint, ttlSeconds: refreshAfterSeconds, owner: ProcessUnique.next(), on: loop)
        return (.forwarded, forwarded)
    }

    /// Remembers a registration the upstream took and frees the lock (one round trip); retried
    /// through `pending` until the store answers when it fails.
    private func commit(_ keys: RegistrationKeys, fingerprint: String, ttlSeconds: Int, owner: String, on loop: EventLoop?) async {
        pending.cancel(keys.entry)
        do {
            try await store.commitAndUnlock(entry: keys.entry, fingerprint: fingerprint, ttlSeconds: ttlSeconds, lock: keys.lock, owner: owner, on: loop)
        } catch {
            let store = store
            pending.add(.dedupe, key: keys.entry, error: error) { () async throws(StoreError) in
                try await store.commitAndUnlock(entry: keys.entry, fingerprint: fingerprint, ttlSeconds: ttlSeconds, lock: keys.lock, owner: owner,
                                                on: nil)
            }
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
