import Loops
import PWCore
import Providers
import Registration

/// The work a running sidecar does besides answering requests: one outbox worker per upstream and
/// the outbox's metrics sampler, the inventory's expiry sweeper, and the heap trim. Each is a
/// detached task the sidecar cancels at shutdown.
enum BackgroundTasks {
    /// One worker per upstream the outbox delivers for, and a sampler for its metrics (which also
    /// renews this process's layout record). Workers look their app up in the running policy on
    /// every pass.
    static func startOutbox(_ outbox: Outbox, apps: AppTable, registrar: Registrar, metrics: Metrics,
                            loops: [EventLoop], transport: any UpstreamTransport, inFlight: Int, logger: Logger) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        let inForce = apps.all
        for target in outbox.watched {
            if let endpoint = outbox.webhook(for: target) {
                let worker = WebhookWorker(streams: outbox.streams, endpoint: endpoint, app: target.app, transport: transport,
                                           consumer: outbox.consumer, metrics: metrics, logger: logger, signal: outbox.signal(for: target))
                tasks.append(Task.detached { await worker.run() })
                continue
            }
            if inForce[target.app]?.upstreams.first(where: { $0.adapter.name == target.upstream })?.policy.delivery == .queued {
                metrics.outboxWatched(app: target.app, upstream: target.upstream)
            }
            let worker = OutboxWorker(streams: outbox.streams, target: target, apps: apps, registrar: registrar,
                                      consumer: outbox.consumer, metrics: metrics, logger: logger, signal: outbox.signal(for: target),
                                      loops: loops, batch: Self.batch(inFlight: inFlight, shards: target.shards))
            tasks.append(Task.detached { await worker.run() })
        }
        let streams = outbox.streams
        let sampled = outbox.watched
        let consumer = outbox.consumer
        tasks.append(Task.detached {
            while !Task.isCancelled {
                for target in sampled {
                    // While this process runs, `outbox replay` without a policy knows where its workers read.
                    try? await streams.record(target, consumer: consumer, seconds: Outbox.layoutRecordSeconds)
                    guard let (depth, oldest) = try? await streams.depth(of: target) else { continue }
                    let age = oldest.map { max(0, Double(OutboxWorker.age(now: SystemClock.epochMillis(), accepted: $0)) / 1000) } ?? 0
                    metrics.outbox(app: target.app, upstream: target.upstream, depth: depth, oldestSeconds: age)
                }
                try? await Task.sleep(for: .seconds(2))
            }
        })
        return tasks
    }

    /// Entries one shard reads at a time: an upstream's shards together hold at most twice as many
    /// deliveries in flight as there are connections to its host, because a shard waits for its
    /// whole batch before it reads again (fewer leave connections idle behind the slowest call;
    /// more only wait inside the HTTP client, holding memory).
    static func batch(inFlight: Int, shards: Int) -> Int {
        max(16, 2 * inFlight / max(1, shards))
    }

    /// Every 2 s, what the allocator holds free goes back to the system, so RSS falls back after a
    /// burst instead of staying at its high-water mark; under load there is little to give back.
    static func startHeapTrim() -> Task<Void, Never> {
        Task.detached {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(2))
                HeapTrim.release()
            }
        }
    }

    /// The inventory's expiry sweeper (it idles while no app sets `inventory.expire_after`).
    static func startSweeper(registrar: Registrar, apps: AppTable, metrics: Metrics, logger: Logger) -> Task<Void, Never> {
        for app in apps.all.values where app.policy.inventory.expireAfterMillis != nil { metrics.inventoryWatched(app: app.policy.id) }
        let sweeper = ExpirySweeper(registrar: registrar, apps: apps, metrics: metrics, logger: logger)
        return Task.detached { await sweeper.run() }
    }
}
