import Loops
import PWCore
import PWCrypto
import PWPolicy
import Providers
import Synchronization

/// Delivers one upstream's outbox: in every shard whose lease it holds, it reads what waits (its
/// own unacknowledged entries first while it has some, then new ones, after taking over entries a
/// stopped replica left pending past `claim_after`; `ShardReader` says how often each is looked
/// for) and delivers them through the registrar's single-upstream operations, the very code a sync
/// request runs.
///
/// Order: one token's deliveries share a shard and are delivered one after another, in the order
/// they were accepted; a delivery waiting to be retried holds back the later ones of its token
/// (other tokens go on). An entry is acknowledged only once the upstream took it, refused it
/// finally (dead-lettered with its answer), or it outlived `queue.max_age` (dead-lettered).
///
/// Thread-safety: `run` runs one child task per shard, on its loop when there are loops; each
/// shard's state (its reader, retry times per token) is that task's own.
package final class OutboxWorker: Sendable {
    let streams: any OutboxQueue
    let target: OutboxTarget
    /// The apps in force: the worker's app is looked up on every pass, so a reloaded policy's
    /// keys are the ones used.
    let apps: AppTable
    let registrar: Registrar
    let consumer: String
    let metrics: Metrics
    let logger: Logger
    /// Wakes the worker at once when this process queued something.
    let signal: OutboxSignal
    /// How many entries one pass reads from a shard.
    let batch: Int
    /// The event loops that run the shards' tasks and whose connections carry their reads and
    /// deliveries (shard by shard, round robin), as a sync request rides its loop; none: the pool.
    let loops: [EventLoop]

    package init(streams: any OutboxQueue, target: OutboxTarget, apps: AppTable, registrar: Registrar,
         consumer: String, metrics: Metrics, logger: Logger, signal: OutboxSignal, loops: [EventLoop] = [], batch: Int = 256) {
        self.streams = streams
        self.target = target
        self.apps = apps
        self.registrar = registrar
        self.consumer = consumer
        self.metrics = metrics
        self.logger = logger
        self.signal = signal
        self.batch = batch
        self.loops = loops
    }

    /// Until the task is cancelled (shutdown): then in-flight deliveries finish, leases are given
    /// back, and what was read but not delivered stays pending for the next holder.
    ///
    /// Shards are independent (a token lives in one), so each runs its own loop: one shard's slow
    /// batch does not hold back the others.
    package func run() async {
        guard await prepare() else { return }
        await withTaskGroup(of: Void.self) { group in
            for shard in 0..<target.shards {
                // On the loop whose connections carry the shard's deliveries: their awaits resume
                // on a thread that runs anyway, not on a pool thread woken for each.
                if let loop = loop(of: shard) {
                    group.addTask(executorPreference: loop) { [self] in await run(shard) }
                } else {
                    group.addTask { [self] in await run(shard) }
                }
            }
        }
    }

    /// The loop a shard's deliveries ride (nil: the clients' own threads).
    private func loop(of shard: Int) -> EventLoop? { loops.isEmpty ? nil : loops[shard % loops.count] }

    /// Creates the shards' streams and group, retrying until Redis takes it; false if cancelled first.
    private func prepare() async -> Bool {
        while !Task.isCancelled {
            do {
                try await streams.prepare(target)
                return true
            } catch {
                logger.bounded(.warning, "outbox unavailable", key: target.app + target.upstream, [
                    ("app", target.app), ("upstream", target.upstream), ("error", error.detail)])
                await signal.wait(upTo: 1000)
            }
        }
        return false
    }

    /// One shard's loop: while its lease is held, read what waits and deliver it; then give the
    /// lease back.
    private func run(_ shard: Int) async {
        var retries = RetrySchedule()
        var reader = ShardReader(shard: shard)
        var idle: UInt64 = 25
        while !Task.isCancelled {
            guard let app = apps[id: target.app], let caller = app.upstreams.first(where: { $0.adapter.name == target.upstream }) else {
                try? await Task.sleep(for: .seconds(1))
                continue
            }
            // An open circuit: queued deliveries wait instead of hammering, however often this
            // process enqueues; the first call after `open_for` is the probe.
            if let wait = caller.circuitWaitMillis {
                try? await Task.sleep(for: .milliseconds(max(1, wait)))
                continue
            }
            let pass = await pass(over: &reader, app: app, caller: caller, claimAfterMillis: caller.policy.queue.claimAfterMillis,
                                  retries: &retries)
            // Busy: go straight on. Idle: wait for this process's next enqueue, or a while
            // (other replicas' entries, retries coming due), longer the longer it stays idle.
            if pass.left > 0 {
                idle = 25
            } else if pass.read > 0, pass.tried == 0, let due = retries.nextDueIn() {
                // Everything read waits for its retry (an outage): no pass before the soonest is
                // due (at most a second, for tokens queued meanwhile), however often this process
                // enqueues; re-reading the same waiting batch on every enqueue only burns CPU.
                try? await Task.sleep(for: .milliseconds(min(max(1, due), 1000)))
            } else {
                await signal.wait(upTo: min(idle, retries.nextDueIn().map { max(1, $0) } ?? idle), shard: shard)
                idle = min(idle * 2, 1000)
            }
        }
        await streams.release(shard, of: target, owner: consumer)
    }

    /// One shard's turn: its lease, what waits in it, and delivering that.
    private func pass(over reader: inout ShardReader, app: AppRuntime, caller: UpstreamCaller, claimAfterMillis: Int,
                      retries: inout RetrySchedule) async -> Pass {
        do {
            guard let messages = try await reader.read(streams, of: target, consumer: consumer, count: batch,
                                                       claimAfterMillis: claimAfterMillis, on: loop(of: reader.shard)) else { return Pass() }
            var pass = await deliver(messages, shard: reader.shard, app: app, caller: caller, retries: &retries)
            pass.read = messages.count
            reader.finished(read: pass.read, left: pass.left, count: batch)
            return pass
        } catch where error.kind == .missingGroup {
            // Redis lost the stream and its group (restarted empty, a key deleted): entries
            // appended since make the stream again, and only a group reads them.
            reader.forget()
            logger.bounded(.warning, "outbox stream had no consumer group; made again", key: target.app + target.upstream + "group", [
                ("app", target.app), ("upstream", target.upstream), ("shard", String(reader.shard))])
            // Made: read again at once; not made (Redis went away meanwhile): wait as for an outage.
            let made: Bool
            do { try await streams.prepare(target); made = true } catch { made = false }
            return Pass(left: made ? 1 : 0)
        } catch {
            reader.forget()
            logger.bounded(.warning, "outbox unavailable", key: target.app + target.upstream, [
                ("app", target.app), ("upstream", target.upstream), ("error", error.detail)])
            return Pass()
        }
    }

    /// What one turn of a shard did.
    struct Pass {
        /// Entries read.
        var read = 0
        /// Tokens whose next delivery was due and was tried.
        var tried = 0
        /// Entries that left their shard (delivered or dead-lettered).
        var left = 0
    }

    /// Delivers one shard's batch: tokens concurrently, each token's entries in order.
    private func deliver(_ messages: [OutboxMessage], shard: Int, app: AppRuntime, caller: UpstreamCaller,
                         retries: inout RetrySchedule) async -> Pass {
        guard !messages.isEmpty else { return Pass() }
        var byToken: [String: [(OutboxMessage, Result<OutboxEntry, OutboxEntry.DecodingFailure>)]] = [:]
        var order: [String] = []
        for message in messages {
            // An entry whose body names another outbox than the stream it sits in was written by
            // hand: delivered here it would reach this upstream for another app or provider.
            let decoded = streams.decode(message).flatMap { entry -> Result<OutboxEntry, OutboxEntry.DecodingFailure> in
                if entry.app != target.app { return .failure(.invalid("app")) }
                if entry.upstream != target.upstream { return .failure(.invalid("upstream")) }
                if entry.operation == .webhook { return .failure(.invalid("op")) }  // an event is never sent to a provider
                return .success(entry)
            }
            let key = (try? decoded.get())?.pushToken ?? "\u{0}" + message.id  // a malformed entry stands alone
            if byToken[key] == nil { order.append(key) }
            byToken[key, default: []].append((message, decoded))
        }
        let now = MonotonicClock.nowMillis()
        let due = order.filter { retries.isDue($0, now: now) }
        let schedule = retries
        let entriesByToken = byToken
        let results = await mapConcurrently(due) { [self] token in
            let result = await deliver(entriesByToken[token] ?? [], shard: shard, app: app, caller: caller, schedule: schedule, token: token)
            return (token, result)
        }
        var pass = Pass(tried: due.count)
        for (token, result) in results {
            pass.left += result.left
            if let failure = result.retry {
                retries.failed(token, now: MonotonicClock.nowMillis(), policy: caller.policy.retry, retryAfterSeconds: failure)
            } else {
                retries.succeeded(token)
            }
        }
        return pass
    }

    struct TokenResult: Sendable {
        var left = 0
        /// Set when the token's next entry must wait: the upstream's `Retry-After` (seconds) if any.
        var retry: Int?? = nil
    }

    private func deliver(_ entries: [(OutboxMessage, Result<OutboxEntry, OutboxEntry.DecodingFailure>)], shard: Int, app: AppRuntime,
                         caller: UpstreamCaller, schedule: RetrySchedule, token: String) async -> TokenResult {
        var result = TokenResult()
        for (message, decoded) in entries {
            do {
                let entry: OutboxEntry
                switch decoded {
                case .success(let value):
                    entry = value
                case .failure(let failure):
                    // Kept as it was stored (still sealed): `pushwarden outbox replay` with the right key brings it back.
                    let reason: String
                    if case .unreadable = failure {
                        reason = "unreadable"
                        logger.warning("outbox entry cannot be opened (a store key this process does not hold, or altered): dead-lettered",
                                       [("app", target.app), ("upstream", target.upstream), ("id", message.id)])
                    } else {
                        reason = "malformed"
                        logger.warning("outbox entry malformed: dead-lettered", [("app", target.app), ("upstream", target.upstream), ("id", message.id),
                                                                                 ("field", failure.field)])
                    }
                    try await streams.deadLetter(message, shard: shard, of: target, reason: reason, status: nil, code: nil, clearing: nil, on: loop(of: shard))
                    metrics.outboxDead(app: target.app, upstream: target.upstream)
                    result.left += 1
                    continue
                }
                if Self.age(now: SystemClock.epochMillis(), accepted: entry.acceptedAtMillis) > caller.policy.queue.maxAgeMillis {
                    logger.bounded(.warning, "outbox delivery outlived max_age: dead-lettered", key: target.app + target.upstream, [
                        ("app", target.app), ("upstream", target.upstream), ("token", Redact.token(entry.pushToken)),
                        ("operation", entry.operation.rawValue), ("request_id", entry.requestID)])
                    try await streams.deadLetter(message, shard: shard, of: target, reason: "max_age", status: nil, code: nil,
                                                 clearing: entry.registeredToken, on: loop(of: shard))
                    metrics.outboxDead(app: target.app, upstream: target.upstream)
                    registrar.emitDeadLettered(entry, reason: "max_age")
                    result.left += 1
                    continue
                }
                let origin = Registrar.Origin(app: app, context: CallContext(contactID: entry.contactID), requestID: entry.requestID,
                                              loop: loop(of: shard))
                let outcome: UpstreamOutcome
                switch entry.operation {
                case .register:
                    guard let installation = entry.installation else { continue }
                    outcome = await registrar.register(installation, at: caller, from: origin)
                case .unregister:
                    outcome = await registrar.unregister(entry.pushToken, at: caller, from: origin)
                case .webhook:
                    continue
                }
                switch outcome {
                case .forwarded, .unchanged, .skipped, .queued:
                    try await streams.done(message.id, shard: shard, of: target, clearing: entry.registeredToken, on: loop(of: shard))
                    result.left += 1
                case .failed(.unavailable(_, let retryAfter)):
                    result.retry = .some(retryAfter)
                    return result  // the token's later entries wait behind this one
                case .failed(let failure):
                    // A final refusal: kept with the provider's answer for `pushwarden outbox`.
                    var status: Int?
                    var code: String?
                    if case .rejected(_, let s, let c) = failure { status = s; code = c }
                    if case .credentialRefused(_, let s) = failure { status = s }
                    logger.bounded(.warning, "outbox delivery refused: dead-lettered", key: target.app + target.upstream, [
                        ("app", target.app), ("upstream", target.upstream), ("token", Redact.token(entry.pushToken)),
                        ("operation", entry.operation.rawValue), ("code", failure.code.rawValue), ("request_id", entry.requestID)])
                    try await streams.deadLetter(message, shard: shard, of: target, reason: failure.code.rawValue, status: status, code: code,
                                                 clearing: entry.registeredToken, on: loop(of: shard))
                    metrics.outboxDead(app: target.app, upstream: target.upstream)
                    registrar.emitDeadLettered(entry, reason: failure.code.rawValue)
                    result.left += 1
                }
            } catch {
                // The store failed mid-way: the entry stays pending and is read again.
                result.retry = .some(nil)
                return result
            }
        }
        return result
    }

    /// Milliseconds since `accepted`, saturated: the accept time comes from Redis, and an overflow
    /// there would trap on every replica that claims the entry.
    package static func age(now: Int, accepted: Int64) -> Int {
        let (age, overflow) = Int64(now).subtractingReportingOverflow(accepted)
        guard !overflow else { return accepted < 0 ? Int.max : Int.min }
        return Int(age)
    }
}

/// When each token's next delivery attempt is due: full-jitter exponential backoff from the
/// upstream's `retry` settings, or the provider's `Retry-After`.
package struct RetrySchedule: Sendable {
    private var attempts: [String: Int] = [:]
    private var dueAt: [String: UInt64] = [:]

    func isDue(_ token: String, now: UInt64) -> Bool { (dueAt[token] ?? 0) <= now }

    /// Milliseconds until the soonest retry, if any waits.
    func nextDueIn() -> UInt64? {
        guard let soonest = dueAt.values.min() else { return nil }
        let now = MonotonicClock.nowMillis()
        return soonest > now ? soonest - now : 0
    }

    mutating func succeeded(_ token: String) {
        attempts[token] = nil
        dueAt[token] = nil
    }

    mutating func failed(_ token: String, now: UInt64, policy: RetryPolicy, retryAfterSeconds: Int??) {
        let attempt = (attempts[token] ?? 0) + 1
        attempts[token] = attempt
        let wait: Int
        if case .some(.some(let seconds)) = retryAfterSeconds, seconds > 0 {
            wait = min(seconds, 3600) * 1000
        } else {
            let exponential = policy.backoffMillis << min(attempt - 1, 16)
            let bound = max(1, min(max(policy.maxBackoffMillis, policy.backoffMillis), exponential))
            wait = Int.random(in: 1...bound)
        }
        dueAt[token] = now + UInt64(wait)
    }
}

/// Wakes the worker of a shard when this process queued something there; otherwise it sleeps
/// its interval. Only that shard's wait is cut short: a storm of accepts wakes each shard's worker
/// once per pass, not every worker once per accept.
package final class OutboxSignal: Sendable {
    private struct Sleeper {
        let shard: Int
        let task: Task<Void, Never>
    }

    private struct State {
        var next = 0
        /// The waits in progress: a wake cancels their sleeps.
        var sleepers: [Int: Sleeper] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    /// Cuts short the wait of `shard`'s worker (nil: every worker's).
    func wake(shard: Int? = nil) {
        let woken = state.withLock { state -> [Task<Void, Never>] in
            var woken: [Task<Void, Never>] = []
            for (id, sleeper) in state.sleepers where shard == nil || sleeper.shard == shard {
                woken.append(sleeper.task)
                state.sleepers[id] = nil
            }
            return woken
        }
        for task in woken { task.cancel() }
    }

    /// Returns after `millis`, soon after the next `wake` of `shard`, or at cancellation.
    func wait(upTo millis: UInt64, shard: Int = 0) async {
        // One timer for the whole wait (an idle worker wakes once per interval, not every few
        // milliseconds), cut short by `wake` or by cancelling the waiting task.
        let sleeper = Task<Void, Never> { _ = try? await Task.sleep(for: .milliseconds(min(millis, 86_400_000))) }
        let id = state.withLock { state -> Int in
            state.next &+= 1
            state.sleepers[state.next] = Sleeper(shard: shard, task: sleeper)
            return state.next
        }
        await withTaskCancellationHandler { await sleeper.value } onCancel: { sleeper.cancel() }
        state.withLock { _ = $0.sleepers.removeValue(forKey: id) }
    }
}
