import Loops
import PWCore

/// How a worker reads one shard of an outbox so that a pass costs one round trip, busy or idle:
/// the lease is renewed once a third of it has gone (not on every pass), entries other consumers
/// left pending are looked for every quarter of `claim_after` (at least a second apart), and the
/// worker's own unfinished entries are read again only while it has some.
///
/// One per shard task, never shared: a value the task mutates.
struct ShardReader {
    let shard: Int
    /// When the lease next needs renewing (monotonic ms); 0: not held.
    private var renewAt: UInt64 = 0
    /// When stale entries of other consumers are next looked for.
    private var claimAt: UInt64 = 0
    /// Whether this consumer may hold entries it read and has not finished: true at start (a
    /// restarted process's consumer name is new, but a takeover makes entries its own).
    private var ownUnfinished = true

    init(shard: Int) { self.shard = shard }

    /// The lease, then up to `count` entries (own unfinished ones first); nil when another
    /// replica holds the lease.
    mutating func read(_ streams: any OutboxQueue, of target: OutboxTarget, consumer: String, count: Int,
                       claimAfterMillis: Int, on loop: EventLoop?) async throws(StoreError) -> [OutboxMessage]? {
        let now = MonotonicClock.nowMillis()
        let lease = UInt64(max(1, claimAfterMillis))
        if now >= renewAt {
            renewAt = 0
            do {
                guard try await streams.hold(shard, of: target, owner: consumer, millis: claimAfterMillis, on: loop) else { return nil }
            } catch {
                ownUnfinished = true
                throw error
            }
            // Timed from before the command: the lease cannot have been set earlier than that.
            renewAt = now + max(1, lease / 3)
        }
        var claimAfter: Int?
        if now >= claimAt {
            claimAfter = claimAfterMillis
            claimAt = now + max(1000, lease / 4)
        }
        do {
            let messages = try await streams.read(shard, of: target, consumer: consumer, count: count, claimAfterMillis: claimAfter,
                                                  own: ownUnfinished, on: loop)
            // Every read entry stays unfinished until the pass says otherwise.
            ownUnfinished = ownUnfinished || !messages.isEmpty
            return messages
        } catch {
            ownUnfinished = true
            throw error
        }
    }

    /// After a pass over what `read` returned: entries that did not leave the shard (waiting for a
    /// retry, or a store failure mid-way) are read again first next time; so is a full batch,
    /// which may have left more of this consumer's behind it.
    mutating func finished(read: Int, left: Int, count: Int) {
        ownUnfinished = left < read || read >= count
    }

    /// The lease lapses here at once: the next pass takes it again first (after the store failed).
    mutating func forget() {
        renewAt = 0
        ownUnfinished = true
    }
}
