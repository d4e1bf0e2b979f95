import Loops
import PWCore
import PWCrypto

/// Where one upstream's deliveries live: its shards and the keys of each, under one hash tag per
/// shard (see `OutboxStreams` for the layout).
package struct OutboxTarget: Sendable, Hashable {
    package let app: String
    package let upstream: String
    package let shards: Int

    package init(app: String, upstream: String, shards: Int) {
        self.app = app
        self.upstream = upstream
        self.shards = shards
    }

    package func stream(_ shard: Int) -> String { "pw:v2:{outbox:\(app):\(upstream):\(shard)}:s" }
    package func lease(_ shard: Int) -> String { "pw:v2:{outbox:\(app):\(upstream):\(shard)}:lease" }
    package var dead: String { "pw:v2:{outbox:\(app):\(upstream):dead}:s" }
    /// One process's record of how many shards it reads (`consumer`: the process).
    package func layout(_ consumer: String) -> String { "pw:v2:{outbox:\(app):\(upstream):dead}:layout:\(consumer)" }

    /// The shard a token's deliveries go to: the first bytes of its hash.
    package func shard(of pushToken: String) -> Int { place(of: pushToken, digests: .unkeyed).shard }

    /// The token's shard and the key of its waiting mark there. The shard comes from the plain
    /// hash of the token whatever `digests` is (a token's deliveries stay in one shard, in
    /// order, when `store.digest_key` is turned on); the mark is named by the keyed digest
    /// when there is one.
    package func place(of pushToken: String, digests: KeyDigest) -> (shard: Int, mark: String) {
        let digest = SHA256.hash(Array(pushToken.utf8))
        let value = UInt32(digest[0]) << 24 | UInt32(digest[1]) << 16 | UInt32(digest[2]) << 8 | UInt32(digest[3])
        let shard = Int(value % UInt32(clamping: max(1, shards)))  // a count from outside never divides by zero
        let name = digests.isKeyed ? digests.hex(app, upstream, pushToken) : Hex.encode(digest)
        return (shard, "pw:v2:{outbox:\(app):\(upstream):\(shard)}:q:" + name)
    }
}

/// What an append does to the token's waiting mark.
package enum OutboxMark: Sendable, Equatable {
    /// A registration: not appended when `fingerprint` already waits; else appended and
    /// marked for `seconds`.
    case waiting(fingerprint: String, seconds: Int)
    /// An unregister or a replay: the mark is cleared, so a registration accepted after it
    /// is queued behind it.
    case cleared
}

/// A stream entry as read back: its id and its `e` field.
package struct OutboxMessage: Sendable, Equatable {
    package let id: String
    package let body: String?

    package init(id: String, body: String?) {
        self.id = id
        self.body = body
    }

    /// Milliseconds since the epoch from the id (`<ms>-<seq>`).
    package var idMillis: Int64 { Int64(id.prefix { $0 != "-" }) ?? 0 }
}

/// The durable queue the outbox keeps its deliveries in: one group of shards per upstream, read
/// by one replica at a time per shard under a lease. The Redis store's streams implement it
/// (`OutboxStreams`); nothing else can keep deliveries across a restart.
package protocol OutboxQueue: Sendable {
    /// Appends `entry` and sets or clears the token's waiting mark in one step: the shard it went
    /// to, nil when the same registration already waited (nothing written). Over `loop`'s own
    /// connection when given.
    func append(_ entry: OutboxEntry, to target: OutboxTarget, mark: OutboxMark, on loop: EventLoop?) async throws(StoreError) -> Int?
    /// `append`, sent now on `loop`'s own connection (called on the loop's thread): it leaves in
    /// the loop turn's write together with what the caller sends before it waits.
    func startAppend(_ entry: OutboxEntry, to target: OutboxTarget, mark: OutboxMark, on loop: EventLoop) -> Started<Result<Int?, StoreError>>
    /// Makes the shards' consumer group, once per process.
    func prepare(_ target: OutboxTarget) async throws(StoreError)
    /// Takes or renews the shard's lease for `owner`; true while `owner` holds it. This and the
    /// reading and finishing below go over `loop`'s own connection when given (a worker's shard
    /// rides a loop), else the pool.
    func hold(_ shard: Int, of target: OutboxTarget, owner: String, millis: Int, on loop: EventLoop?) async throws(StoreError) -> Bool
    /// Gives the lease back (only while `owner` still holds it).
    func release(_ shard: Int, of target: OutboxTarget, owner: String) async
    /// Up to `count` entries: with `claimAfterMillis`, those another consumer left pending that
    /// long are taken over first; then, with `own` (or after a takeover), what `consumer` read and
    /// did not acknowledge; then new ones.
    func read(_ shard: Int, of target: OutboxTarget, consumer: String, count: Int, claimAfterMillis: Int?,
              own: Bool, on loop: EventLoop?) async throws(StoreError) -> [OutboxMessage]
    /// The entry a message holds, its sealed fields opened.
    func decode(_ message: OutboxMessage) -> Result<OutboxEntry, OutboxEntry.DecodingFailure>
    /// Acknowledges and removes an entry, clearing a registration's waiting mark.
    func done(_ id: String, shard: Int, of target: OutboxTarget, clearing pushToken: String?, on loop: EventLoop?) async throws(StoreError)
    /// Moves an entry to the dead letters with why, then removes it from its shard.
    func deadLetter(_ message: OutboxMessage, shard: Int, of target: OutboxTarget, reason: String, status: Int?, code: String?,
                    clearing pushToken: String?, on loop: EventLoop?) async throws(StoreError)
    /// What waits in every shard, and the oldest entry's time (ms since the epoch).
    func depth(of target: OutboxTarget) async throws(StoreError) -> (count: Int, oldestMillis: Int64?)
    /// Records for `seconds` that `consumer` reads `target` in its shard count.
    func record(_ target: OutboxTarget, consumer: String, seconds: Int) async throws(StoreError)
}
