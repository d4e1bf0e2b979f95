import Loops
import PWCore
import PWPolicy
import Providers
import Synchronization

/// The durable outbox of one process: where deliveries are queued (`enqueue`) and the workers that
/// deliver them, one per upstream, all replicas sharing one consumer group per shard stream.
///
/// A queued upstream's deliveries are spread over `queuedShards` streams; a sync upstream keeps one
/// stream, for the unregisters that failed at once (a logout is never lost). Providers that take
/// only the user's own credential (Fluxer) have none: PushWarden never stores that credential.
package final class Outbox: Sendable {
    static let queuedShards = 8
    static let syncShards = 1
    /// How long a process's layout record lives unless renewed (the sampler renews it every 2 s).
    package static let layoutRecordSeconds = 30

    /// How many streams an upstream's outbox is spread over: the one place that says so.
    static func shards(for delivery: UpstreamPolicy.Delivery) -> Int { delivery == .queued ? queuedShards : syncShards }

    /// The outboxes workers read under `policy`, without building a client: what
    /// `pushwarden outbox replay` places entries by when it is given the policy. An upstream whose
    /// provider takes the user's own credential has none (its traits say so, for a dry run as for
    /// the provider it emulates).
    package static func targets(of policy: Policy) -> [OutboxTarget] {
        policy.apps.flatMap { app in
            app.upstreams.compactMap { upstream -> OutboxTarget? in
                guard !upstream.provider.traits.needsCallerCredential else { return nil }
                return OutboxTarget(app: app.id, upstream: upstream.name, shards: shards(for: upstream.delivery))
            }
            + policy.webhooks.indices.map { OutboxTarget(app: app.id, upstream: WebhookEndpoint.upstreamName($0), shards: 1) }
        }
    }

    package let streams: any OutboxQueue
    /// This process's consumer name in every group: unique per process.
    package let consumer: String
    private let signals: [String: OutboxSignal]
    private let targets: [String: OutboxTarget]
    /// The webhook receivers, with their signing keys: each has an outbox per app.
    package let webhooks: [WebhookEndpoint]
    /// Events handed over and not yet queued.
    let emitting = Atomic<Int>(0)

    package init(queue: any OutboxQueue, apps: [AppRuntime], webhooks: [WebhookEndpoint] = []) {
        self.webhooks = webhooks
        streams = queue
        consumer = "pw-" + ProcessUnique.next()
        var signals: [String: OutboxSignal] = [:]
        var targets: [String: OutboxTarget] = [:]
        for app in apps {
            for caller in app.upstreams where !caller.adapter.needsCallerCredential {
                let key = Self.key(app.policy.id, caller.adapter.name)
                targets[key] = OutboxTarget(app: app.policy.id, upstream: caller.adapter.name, shards: Self.shards(for: caller.policy.delivery))
                signals[key] = OutboxSignal()
            }
            for endpoint in webhooks {
                let target = endpoint.target(app: app.policy.id)
                targets[Self.key(target.app, target.upstream)] = target
                signals[Self.key(target.app, target.upstream)] = OutboxSignal()
            }
        }
        self.signals = signals
        self.targets = targets
    }

    private static func key(_ app: String, _ upstream: String) -> String { app + "\u{0}" + upstream }

    /// Every upstream this process delivers for, with its streams.
    package var watched: [OutboxTarget] { Array(targets.values) }

    /// The webhook receiver whose events `target` holds; nil for an upstream's outbox.
    package func webhook(for target: OutboxTarget) -> WebhookEndpoint? {
        webhooks.first { WebhookEndpoint.upstreamName($0.index) == target.upstream }
    }

    package func signal(for target: OutboxTarget) -> OutboxSignal {
        signals[Self.key(target.app, target.upstream)] ?? OutboxSignal()
    }

    /// Whether deliveries for this upstream can be queued at all.
    func takes(app: String, upstream: String) -> Bool { targets[Self.key(app, upstream)] != nil }

    /// Appends the delivery; once this returns, Redis holds it (the client may be told `queued`).
    /// A registration whose fingerprint (`mark`) already waits is not appended again.
    /// - Parameter loop: the request's loop, whose own Redis connection carries it; nil off the loops.
    func enqueue(_ entry: OutboxEntry, mark: OutboxMark, on loop: EventLoop?) async throws(StoreError) {
        let target = try target(of: entry)
        if let shard = try await streams.append(entry, to: target, mark: mark, on: loop) {
            signals[Self.key(entry.app, entry.upstream)]?.wake(shard: shard)
        }
    }

    /// `enqueue`, its append sent now on `loop`'s own connection (call on the loop's thread), so
    /// that it leaves with what the request writes next; Redis holds the delivery once `finish`
    /// returns.
    func startEnqueue(_ entry: OutboxEntry, mark: OutboxMark, on loop: EventLoop) -> StartedEnqueue {
        do throws(StoreError) {
            let target = try target(of: entry)
            return StartedEnqueue(entry: entry, appended: streams.startAppend(entry, to: target, mark: mark, on: loop),
                                  signal: signals[Self.key(entry.app, entry.upstream)])
        } catch {
            return StartedEnqueue(entry: entry, appended: Started(.failure(error)), signal: nil)
        }
    }

    private func target(of entry: OutboxEntry) throws(StoreError) -> OutboxTarget {
        guard let target = targets[Self.key(entry.app, entry.upstream)] else {
            throw StoreError(.refused, "no outbox for \(entry.app)/\(entry.upstream)")
        }
        return target
    }
}

/// An outbox append under way (`Outbox.startEnqueue`).
struct StartedEnqueue: Sendable {
    let entry: OutboxEntry
    let appended: Started<Result<Int?, StoreError>>
    let signal: OutboxSignal?

    /// Waits for Redis's answer: once this returns, Redis holds the delivery (or held it already).
    func finish() async throws(StoreError) {
        if let shard = try await appended.value().get() { signal?.wake(shard: shard) }
    }
}
