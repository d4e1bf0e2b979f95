import ClientAPI
import HTTPClient
import Loops
import PWCore
import Providers

/// The registration operations, beneath the HTTP edge: what registering an installation,
/// removing a push token and reporting events mean at each upstream of an app (dedupe, the
/// identities providers hand back, rotation and retirement), with no HTTP request in sight.
///
/// The client API calls the whole-request operations (`register`, `unregister`, `report`),
/// which run every upstream of the app concurrently and return each one's outcome. A caller with
/// no HTTP context (an outbox worker, an erasure, a sweeper) calls the single-upstream ones
/// (`register(_:at:)`, `unregister(_:at:)`): the very same code.
///
/// Failures stay `UpstreamFailure`s here; only the edge renders them as contract errors.
package final class Registrar: Sendable {
    package let deduper: Deduper
    let identities: IdentityStore
    let metrics: Metrics
    let logger: Logger
    /// The durable outbox, with the Redis store; nil on the memory store.
    let outbox: Outbox?
    /// Each contact's installations: where an unregister goes, what an erasure removes.
    let inventory: Inventory

    package init(deduper: Deduper, identities: IdentityStore, metrics: Metrics, logger: Logger, outbox: Outbox? = nil,
         inventory: Inventory? = nil) {
        self.deduper = deduper
        self.identities = identities
        self.metrics = metrics
        self.logger = logger
        self.outbox = outbox
        self.inventory = inventory ?? Inventory(store: MemoryInventoryStore(), digests: .unkeyed)
    }

    /// What every key of a contact or a token is named by: the inventory's, so the two never differ.
    var digests: KeyDigest { inventory.digests }

    /// Who asks: the app, the session's contact (and the client's headers, for providers that
    /// take the user's own credential), the request id for the log, and where the work runs.
    package struct Origin: Sendable {
        let app: AppRuntime
        let context: CallContext
        let requestID: String
        /// The event loop of the request this work is for: every store command and upstream call
        /// goes over that loop's own connections (the task runs on it, so nothing hops). Nil for
        /// work with no request (an outbox worker, the expiry sweeper, an admin call): the pools.
        /// Named here, never read from the thread, so a task that happens to run on some loop
        /// does not take its connections.
        let loop: EventLoop?
        /// The session at the identity provider that the request came with (`backchannel_logout`),
        /// kept with the installations it registers.
        let sessionID: String?

        package init(app: AppRuntime, context: CallContext, requestID: String, loop: EventLoop?, sessionID: String? = nil) {
            self.app = app
            self.context = context
            self.requestID = requestID
            self.loop = loop
            self.sessionID = sessionID
        }

        var appID: String { app.policy.id }

        /// The same origin for work that leaves the request's loop (a task of its own): the pools.
        var offLoop: Origin { Origin(app: app, context: context, requestID: requestID, loop: nil, sessionID: sessionID) }
    }

    // MARK: Register

    /// Each provider's own rules first: when the primary would refuse, nothing is forwarded.
    /// The plan holds every key and fingerprint the registration needs later.
    ///
    /// - Throws: the primary's refusal.
    func plan(_ installation: Installation, for origin: Origin) throws(ContractError) -> RegisterPlan {
        var steps: [(caller: UpstreamCaller, step: RegisterPlan.Step)] = []
        steps.reserveCapacity(origin.app.upstreams.count)
        for caller in origin.app.upstreams {
            let step = step(installation, at: caller, origin: origin)
            if caller.policy.role == .primary, case .refused(.refusedBeforeCall(let error)) = step { throw error }
            steps.append((caller, step))
        }
        return RegisterPlan(steps: steps, expireAfterMillis: origin.app.policy.inventory.expireAfterMillis, sessionID: origin.sessionID)
    }

    private func step(_ installation: Installation, at caller: UpstreamCaller, origin: Origin) -> RegisterPlan.Step {
        let adapter = caller.adapter
        guard adapter.accepts(installation) else { return .skip }
        do throws(ContractError) {
            try adapter.validate(installation, context: origin.context)
        } catch {
            return .refused(.refusedBeforeCall(error))
        }
        return .dedupe(digests.registration(installation.pushToken, app: origin.appID, upstream: adapter.name),
                       fingerprint: Fingerprint.of(installation, contactID: origin.context.contactID, settings: adapter.settingsDigest,
                                                   credential: adapter.forwardedCredential(origin.context)))
    }

    /// A check a registration must pass before anything is forwarded (the per-contact rate
    /// limit). Started beside the dedupe lookups, its command leaves in the same write: it costs
    /// no round trip of its own. Calls `verdict` once, on `loop`: nil admits, else the refusal.
    package typealias Admission = (_ loop: EventLoop, _ verdict: @escaping (ContractError?) -> Void) -> Void

    /// A registration from the client API, its one entry: plans it, looks every dedupe entry up on
    /// `loop` (with the admission and, under a session id, the logged-out mark, all in one round
    /// trip), and when every upstream has it already answers right there, with no task or thread
    /// hop (the hot path of a registration storm); otherwise registers in a task that prefers
    /// `loop`. Refusals come in the order a client is told: a logged-out session (401), the
    /// admission (429), then a refusing primary (4xx). `completion` is called once: on `loop` for a
    /// refusal or a hit, from the task otherwise. Call on `loop`.
    package func register(_ installation: Installation, from origin: Origin, on loop: EventLoop, admission: Admission? = nil,
                  completion: @escaping @Sendable (Result<[(String, UpstreamOutcome)], ContractError>) -> Void) {
        let plan: RegisterPlan
        do throws(ContractError) {
            plan = try self.plan(installation, for: origin)
        } catch {
            guard let admission else {
                completion(.failure(error))
                return
            }
            admission(loop) { refusal in completion(.failure(refusal ?? error)) }
            return
        }
        let lookups = RegisterLookups(pending: 1 + (admission == nil ? 0 : 1) + (origin.sessionID == nil ? 0 : 1))
        let decide = { [self] in
            guard lookups.arrived() else { return }
            if lookups.loggedOut {
                logger.bounded(.info, "registration from a session logged out at the identity provider refused", key: "logged-out" + origin.appID,
                               [("app", origin.appID), ("request_id", origin.requestID), ("contact", Redact.contact(origin.context.contactID))])
                completion(.failure(ContractError(.unauthorized, "the session was logged out at the identity provider")))
                return
            }
            if let refusal = lookups.refusal {
                completion(.failure(refusal))
                return
            }
            let cached = lookups.cached
            if let unchanged = plan.outcomesIfUnchanged(cached) {
                for (name, outcome) in unchanged where outcome.isUnchanged {
                    metrics.dedupeHit(app: origin.appID, upstream: name)
                }
                logger.debug("registered", [("app", origin.appID), ("request_id", origin.requestID),
                                            ("token", Redact.token(installation.pushToken)),
                                            ("contact", Redact.contact(origin.context.contactID))])
                completion(.success(unchanged))
                seen(installation, plan: plan, outcomes: unchanged, origin: origin)
                return
            }
            Task(executorPreference: loop) { [self] in
                completion(.success(await register(installation, plan: plan, cached: cached, from: origin)))
            }
        }
        if let admission {
            admission(loop) { refusal in
                lookups.refusal = refusal
                decide()
            }
        }
        // A session the identity provider logged out registers nothing again (a stolen phone's app
        // still holds its token).
        if let sessionID = origin.sessionID {
            deduper.store.peek(digests.loggedOutSession(sessionID, app: origin.appID), on: loop) { result in
                // A store that does not answer refuses nothing: the dedupe lookups degrade the same way.
                if case .success(let value) = result { lookups.loggedOut = value != nil }
                decide()
            }
        }
        plan.lookUp(in: deduper.store, on: loop) { cached in
            lookups.cached = cached
            decide()
        }
    }

    /// What a registration's lookups found, joined on the request's loop (never shared beyond it).
    private final class RegisterLookups {
        private var pending: Int
        var loggedOut = false
        var refusal: ContractError?
        var cached: [String??] = []

        init(pending: Int) { self.pending = pending }

        /// Counts one lookup in: true for the last.
        func arrived() -> Bool {
            pending -= 1
            return pending == 0
        }
    }

    /// Registers `installation` at every upstream of the plan, through dedupe; `cached` holds what
    /// the request's loop already looked up (one value per step, or none). After a rotation that
    /// the primary took, the previous token is retired where the new one was forwarded.
    func register(_ installation: Installation, plan: RegisterPlan, cached: [String??] = [],
                  from origin: Origin) async -> [(String, UpstreamOutcome)] {
        var stepByName: [String: (RegisterPlan.Step, String??)] = [:]
        for (index, entry) in plan.steps.enumerated() {
            stepByName[entry.caller.adapter.name] = (entry.step, index < cached.count ? cached[index] : nil)
        }
        let steps = stepByName
        let results = await origin.app.eachUpstream { [self] caller -> Forward in
            guard let (step, cached) = steps[caller.adapter.name] else { return Forward(outcome: .skipped) }
            switch step {
            case .skip: return Forward(outcome: .skipped)
            case .refused(let failure): return Forward(outcome: .failed(failure))
            case .dedupe(let keys, let fingerprint):
                if caller.policy.delivery == .queued {
                    return await startEnqueue(installation, at: caller, keys: keys, fingerprint: fingerprint, cached: cached, origin: origin)
                }
                return await register(installation, at: caller, keys: keys, fingerprint: fingerprint, cached: cached, origin: origin)
            }
        }
        var outcomes = results.map { name, result in (name, result.outcome) }
        // The dedupe entries, the outbox appends and the inventory record leave in one write: one
        // round trip, not three. A queued upstream counts as holding the installation until its
        // append is answered.
        let committed = deduper.startCommits(results.compactMap(\.1.commit), on: origin.loop)
        await keep(installation, outcomes: outcomes, origin: origin)
        await committed.wait()
        for (index, (name, result)) in results.enumerated() {
            guard let append = result.append, !(await finish(append)) else { continue }
            outcomes[index].1 = .failed(.unavailable(upstream: name, retryAfterSeconds: 1))
        }
        // Just written: the dedupe hits that follow need not refresh it.
        if let key = plan.touchKey { inventory.touched(key) }
        logger.debug("registered", [("app", origin.appID), ("request_id", origin.requestID), ("token", Redact.token(installation.pushToken)),
                                    ("contact", Redact.contact(origin.context.contactID))])
        if let previous = installation.previousPushToken, origin.app.primarySucceeded(outcomes) {
            var retirements: [String: Retirement] = [:]
            for (name, result) in results { retirements[name] = result.retirement }
            await retire(previous, replacedBy: installation, retirements: retirements, origin: origin)
        }
        return outcomes
    }

    /// One registration at one upstream, called now through dedupe: forwarded at most once per
    /// change, however many replicas and requests carry it at once. After a rotation it took, the
    /// previous token is retired there too. What an outbox worker runs.
    func register(_ installation: Installation, at caller: UpstreamCaller, from origin: Origin) async -> UpstreamOutcome {
        switch step(installation, at: caller, origin: origin) {
        case .dedupe(let keys, let fingerprint):
            // A queued delivery is a change (the same one is not queued twice): no lookup first,
            // the check-and-lock looks at the entry anyway (one round trip, not two).
            let forward = await register(installation, at: caller, keys: keys, fingerprint: fingerprint, cached: .some(nil), origin: origin)
            let (outcome, retirement) = (forward.outcome, forward.retirement)
            if let commit = forward.commit { await deduper.commit([commit], on: origin.loop) }
            if let previous = installation.previousPushToken, let retirement {
                await retire(previous, replacedBy: installation, retirements: [caller.adapter.name: retirement], origin: origin)
            }
            return outcome
        case .refused(let failure):
            return .failed(failure)
        case .skip:
            return .skipped
        }
    }

    /// Queues a registration for a `delivery: queued` upstream: `unchanged` when the upstream has
    /// it already, `queued` (without queueing it twice) when the same registration already waits.
    /// Answered `queued` only once Redis holds the delivery.
    func enqueue(_ installation: Installation, at caller: UpstreamCaller, keys: RegistrationKeys, fingerprint: String,
                 cached: String??, origin: Origin) async -> UpstreamOutcome {
        guard let (entry, mark) = await queueing(installation, at: caller, keys: keys, fingerprint: fingerprint, cached: cached, origin: origin) else {
            return .unchanged
        }
        guard await enqueue(entry, mark: mark, on: origin.loop) else {
            return .failed(.unavailable(upstream: caller.adapter.name, retryAfterSeconds: 1))
        }
        return .queued
    }

    /// `enqueue` for a request on its loop: the append is sent now and answered `queued` at once,
    /// its `append` finished after the inventory record went in the same write.
    private func startEnqueue(_ installation: Installation, at caller: UpstreamCaller, keys: RegistrationKeys, fingerprint: String, cached: String??,
                              origin: Origin) async -> Forward {
        guard let (entry, mark) = await queueing(installation, at: caller, keys: keys, fingerprint: fingerprint, cached: cached, origin: origin) else {
            return Forward(outcome: .unchanged)
        }
        guard let outbox, let loop = origin.loop, loop.isCurrent else {
            let queued = await enqueue(entry, mark: mark, on: origin.loop)
            return Forward(outcome: queued ? .queued : .failed(.unavailable(upstream: caller.adapter.name, retryAfterSeconds: 1)))
        }
        return Forward(outcome: .queued, append: outbox.startEnqueue(entry, mark: mark, on: loop))
    }

    /// The delivery to queue, or nil when the upstream has this registration already (its dedupe
    /// entry holds the fingerprint: `cached`, or looked up when the request's loop did not).
    private func queueing(_ installation: Installation, at caller: UpstreamCaller, keys: RegistrationKeys, fingerprint: String, cached: String??,
                          origin: Origin) async -> (OutboxEntry, OutboxMark)? {
        var current: String?? = cached
        if current == nil { current = .some(try? await deduper.store.get(keys.entry, on: origin.loop)) }
        if case .some(.some(let value)) = current, value == fingerprint {
            metrics.dedupeHit(app: origin.appID, upstream: caller.adapter.name)
            return nil
        }
        let entry = OutboxEntry(operation: .register, app: origin.appID, upstream: caller.adapter.name, contactID: origin.context.contactID,
                                requestID: origin.requestID, acceptedAtMillis: Int64(SystemClock.epochMillis()),
                                pushToken: installation.pushToken, installation: installation)
        return (entry, .waiting(fingerprint: fingerprint, seconds: caller.policy.queue.maxAgeMillis / 1000))
    }

    /// Appends to the outbox; false (logged) when there is none or Redis did not take it.
    private func enqueue(_ entry: OutboxEntry, mark: OutboxMark, on loop: EventLoop?) async -> Bool {
        guard let outbox else { return false }
        do {
            try await outbox.enqueue(entry, mark: mark, on: loop)
            return true
        } catch {
            enqueueFailed(entry, error)
            return false
        }
    }

    /// Waits for an append `startEnqueue` sent; false (logged) when Redis did not take it.
    private func finish(_ append: StartedEnqueue) async -> Bool {
        do {
            try await append.finish()
            return true
        } catch {
            enqueueFailed(append.entry, error)
            return false
        }
    }

    private func enqueueFailed(_ entry: OutboxEntry, _ error: StoreError) {
        logger.bounded(.warning, "outbox unavailable; delivery not queued", key: entry.app + entry.upstream, [
            ("app", entry.app), ("upstream", entry.upstream), ("operation", entry.operation.rawValue), ("error", error.detail),
        ])
    }

    /// What a rotation needs to retire the previous token at an upstream that took the new one.
    struct Retirement: Sendable {
        let keys: RegistrationKeys
        /// The previous token's identity as the forward left it (nil after a stale one was dropped).
        let identity: UpstreamIdentity?
    }

    private func register(_ installation: Installation, at caller: UpstreamCaller, keys: RegistrationKeys, fingerprint: String,
                          cached: String??, origin: Origin) async -> Forward {
        let appID = origin.appID
        do throws(UpstreamFailure) {
            let (outcome, retirement, commit) = try await deduper.register(
                keys: keys, fingerprint: fingerprint, refreshAfterSeconds: origin.app.policy.dedupe.refreshAfterSeconds,
                lockMillis: caller.budgetMillis + 1000, app: appID, cached: cached, on: origin.loop
            ) { [self] () async throws(UpstreamFailure) -> Retirement? in
                try await forward(installation, keys: keys, at: caller, context: origin.context, app: appID, on: origin.loop)
            }
            if outcome == .unchanged {
                metrics.dedupeHit(app: appID, upstream: caller.adapter.name)
                return Forward(outcome: .unchanged)
            }
            return Forward(outcome: .forwarded, retirement: retirement ?? nil, commit: commit)
        } catch {
            return Forward(outcome: .failed(error))
        }
    }

    /// One upstream's part of a registration: its outcome, what a rotation's retirement needs, and
    /// the dedupe entry to write once the caller sends its other writes (the lock is held till then).
    struct Forward: Sendable {
        var outcome: UpstreamOutcome
        var retirement: Retirement? = nil
        var commit: DedupeCommit? = nil
        /// A queued upstream's append, sent and not yet answered.
        var append: StartedEnqueue? = nil
    }

    /// The call itself: the identity the provider handed back before (if it hands any back), the
    /// call, and the identity to keep. Returns what retiring the previous token needs, after a
    /// rotation.
    private func forward(_ installation: Installation, keys: RegistrationKeys, at caller: UpstreamCaller, context: CallContext,
                         app: String, on loop: EventLoop?) async throws(UpstreamFailure) -> Retirement? {
        let adapter = caller.adapter
        let previousKeys = installation.previousPushToken.map { digests.registration($0, app: app, upstream: adapter.name) }
        var identity: UpstreamIdentity?
        var previous: UpstreamIdentity?
        if adapter.keepsIdentity {
            identity = await identities.get(keys, upstream: adapter.name, on: loop)
            if let previousKeys { previous = await identities.get(previousKeys, upstream: adapter.name, on: loop) }
        }
        let request: HTTPClientRequest
        do throws(ContractError) {
            request = try adapter.registerRequest(installation, context: context, identity: identity, previous: previous)
        } catch {
            throw .refusedBeforeCall(error)
        }
        var response: HTTPClientResponse
        do throws(UpstreamFailure) {
            response = try await caller.call(request, operation: .register, on: loop)
        } catch .staleIdentity where previous != nil {
            // The previous token's identity is no good (moved, or another person's): forget it and
            // register the new token on its own.
            if let previousKeys { await identities.delete(previousKeys, upstream: adapter.name, on: loop) }
            previous = nil
            let fresh: HTTPClientRequest
            do throws(ContractError) {
                fresh = try adapter.registerRequest(installation, context: context, identity: identity, previous: nil)
            } catch {
                throw .refusedBeforeCall(error)
            }
            response = try await caller.call(fresh, operation: .register, on: loop)
        }
        if adapter.keepsIdentity,
           let kept = adapter.identity(after: response, installation: installation, current: identity, previous: previous) {
            await identities.set(kept, keys, upstream: adapter.name, on: loop)
            // The token moved (another device, platform or environment): remove what it leaves behind.
            if let identity, identity != kept,
               let cleanup = adapter.supersededRequest(pushToken: installation.pushToken, replaced: identity, by: kept, context: context) {
                _ = try? await caller.call(cleanup, operation: .unregister, on: loop)
            }
        }
        return previousKeys.map { Retirement(keys: $0, identity: previous) }
    }

    /// After a rotation the old token is dead: forget it, and let each provider that took the new
    /// one retire the old one (by default an unregister), best effort.
    private func retire(_ previous: String, replacedBy installation: Installation, retirements: [String: Retirement],
                        origin: Origin) async {
        let byName = retirements
        let appID = origin.appID
        let outcomes = await origin.app.eachUpstream { [self] caller -> UpstreamOutcome in
            let adapter = caller.adapter
            guard let retirement = byName[adapter.name] else { return .skipped }
            await deduper.forget(keys: retirement.keys, app: appID, on: origin.loop)
            var outcome = UpstreamOutcome.skipped
            if let request = adapter.retireRequest(previousToken: previous, installation: installation, context: origin.context,
                                                   identity: retirement.identity) {
                do throws(UpstreamFailure) {
                    _ = try await caller.call(request, operation: .unregister, on: origin.loop)
                    outcome = .forwarded
                } catch {
                    outcome = .failed(error)
                }
            }
            if adapter.keepsIdentity { await identities.delete(retirement.keys, upstream: adapter.name, on: origin.loop) }
            return outcome
        }
        for (name, outcome) in outcomes {
            if case .failed(let failure) = outcome {
                logger.bounded(.warning, "could not remove the rotated token", key: appID + "\u{0}" + name, [
                    ("app", appID), ("upstream", name), ("request_id", origin.requestID),
                    ("token", Redact.token(previous)), ("code", failure.code.rawValue),
                ])
            }
        }
    }

    // MARK: Unregister

    /// Removes the token where the inventory says it is registered (at every upstream that can
    /// address it when the inventory does not know it), and forgets it: queued for a `delivery:
    /// queued` upstream; a sync removal that fails after its retries is queued too when the outbox
    /// exists, so a logout is never lost. An unregister is bound to its contact: when another
    /// contact holds the token now, nothing is removed (`skipped` everywhere).
    package func unregister(_ pushToken: String, from origin: Origin) async -> [(String, UpstreamOutcome)] {
        let scope = await removalScope(of: pushToken, origin: origin)
        if case .anotherContact = scope {
            logger.info("unregister from a contact that no longer holds the token; nothing removed", [
                ("app", origin.appID), ("request_id", origin.requestID), ("token", Redact.token(pushToken)),
                ("contact", Redact.contact(origin.context.contactID)),
            ])
            return origin.app.upstreams.map { ($0.adapter.name, UpstreamOutcome.skipped) }
        }
        let outcomes = await origin.app.eachUpstream { [self] caller -> UpstreamOutcome in
            guard scope.includes(caller.adapter.name) else { return .skipped }
            return await remove(pushToken, at: caller, origin: origin)
        }
        if case .holder(let contact, let token, _) = scope, !outcomes.contains(where: { $0.1.isFailure }) {
            await forgetUnregistered(pushToken, contact: contact, token: token, origin: origin)
            emit(.unregistered, app: origin.appID, contactID: origin.context.contactID, token: Redact.token(pushToken), platform: nil,
                 upstreams: outcomes.map { ($0.0, $0.1.name) }, reason: nil, requestID: origin.requestID)
        }
        return outcomes
    }

    /// One token's removal at one upstream as an unregister makes it: queued for a `delivery:
    /// queued` upstream, called now otherwise, and queued after all when the call fails and the
    /// upstream has an outbox.
    func remove(_ pushToken: String, at caller: UpstreamCaller, origin: Origin) async -> UpstreamOutcome {
        if caller.policy.delivery == .queued {
            return await enqueueUnregister(pushToken, at: caller, origin: origin)
        }
        let outcome = await unregister(pushToken, at: caller, from: origin)
        if case .failed(.unavailable) = outcome, outbox?.takes(app: origin.appID, upstream: caller.adapter.name) == true {
            return await enqueueUnregister(pushToken, at: caller, origin: origin, after: outcome)
        }
        return outcome
    }

    /// Where an unregister goes, by the inventory.
    enum RemovalScope: Sendable {
        /// The inventory does not know the token (registered before PushWarden kept one, or the
        /// store did not answer): every upstream that can address it.
        case everywhere
        /// The contact holds it, at these upstreams (the keys: keyed ones, or the unkeyed ones of a
        /// record a build without `store.digest_key` wrote).
        case holder(ContactKeys, TokenKeys, upstreams: Set<String>)
        /// Another contact holds it now.
        case anotherContact

        func includes(_ upstream: String) -> Bool {
            switch self {
            case .everywhere: return true
            case .holder(_, _, let upstreams): return upstreams.contains(upstream)
            case .anotherContact: return false
            }
        }
    }

    private func removalScope(of pushToken: String, origin: Origin) async -> RemovalScope {
        let contact = digests.contact(origin.context.contactID, app: origin.appID)
        do {
            guard let holder = try await inventory.holder(of: pushToken, app: origin.appID, on: origin.loop) else {
                return try await legacyRemovalScope(of: pushToken, origin: origin)
            }
            guard holder == contact else { return .anotherContact }
            guard let kept = try await inventory.kept(pushToken, contact: contact, app: origin.appID, on: origin.loop) else { return .everywhere }
            return .holder(contact, digests.token(pushToken, app: origin.appID), upstreams: Set(kept.stored.upstreams))
        } catch {
            inventoryUnavailable(error, app: origin.appID)
            return .everywhere
        }
    }

    /// The scope by a record a build without `store.digest_key` wrote, so that an unregister stays
    /// bound to its contact, and forgets that record, until the token registers again.
    private func legacyRemovalScope(of pushToken: String, origin: Origin) async throws(StoreError) -> RemovalScope {
        guard let legacy = digests.legacy,
              let (holder, token) = try await inventory.legacyHolding(pushToken, app: origin.appID, on: origin.loop) else { return .everywhere }
        guard holder == legacy.contact(origin.context.contactID, app: origin.appID) else { return .anotherContact }
        guard let kept = try await inventory.kept(token, contact: holder, app: origin.appID, on: origin.loop) else { return .everywhere }
        return .holder(holder, token, upstreams: Set(kept.stored.upstreams))
    }

    /// Forgets the token at once (so a registration accepted after this one is queued behind it,
    /// never answered `unchanged`), and queues its removal.
    private func enqueueUnregister(_ pushToken: String, at caller: UpstreamCaller, origin: Origin,
                                   after failure: UpstreamOutcome? = nil) async -> UpstreamOutcome {
        let keys = digests.registration(pushToken, app: origin.appID, upstream: caller.adapter.name)
        await deduper.forget(keys: keys, app: origin.appID, on: origin.loop)
        let entry = OutboxEntry(operation: .unregister, app: origin.appID, upstream: caller.adapter.name, contactID: origin.context.contactID,
                                requestID: origin.requestID, acceptedAtMillis: Int64(SystemClock.epochMillis()), pushToken: pushToken,
                                installation: nil)
        guard await enqueue(entry, mark: .cleared, on: origin.loop) else { return failure ?? .failed(.unavailable(upstream: caller.adapter.name, retryAfterSeconds: 1)) }
        return .queued
    }

    /// Forgets the token at one upstream and removes it there, by the identity that upstream
    /// handed back when it needs one (`skipped` when none was kept).
    func unregister(_ pushToken: String, at caller: UpstreamCaller, from origin: Origin) async -> UpstreamOutcome {
        let adapter = caller.adapter
        let keys = digests.registration(pushToken, app: origin.appID, upstream: adapter.name)
        await deduper.forget(keys: keys, app: origin.appID, on: origin.loop)
        let identity = adapter.keepsIdentity ? await identities.get(keys, upstream: adapter.name, on: origin.loop) : nil
        let request: HTTPClientRequest
        do throws(ContractError) {
            guard let built = try adapter.unregisterRequest(pushToken: pushToken, context: origin.context, identity: identity) else {
                return .skipped
            }
            request = built
        } catch {
            return .failed(.refusedBeforeCall(error))
        }
        do throws(UpstreamFailure) {
            _ = try await caller.call(request, operation: .unregister, on: origin.loop)
        } catch {
            return .failed(error)
        }
        if adapter.keepsIdentity { await identities.delete(keys, upstream: adapter.name, on: origin.loop) }
        return .forwarded
    }

    // MARK: Events

    /// Reports `events` to every upstream whose settings take events.
    package func report(_ events: [EngagementEvent], from origin: Origin) async -> [(String, UpstreamOutcome)] {
        await origin.app.eachUpstream { caller -> UpstreamOutcome in
            guard caller.takesEvents, let request = caller.adapter.eventsRequest(events, context: origin.context) else { return .skipped }
            do throws(UpstreamFailure) {
                _ = try await caller.call(request, operation: .events, on: origin.loop)
                return .forwarded
            } catch {
                return .failed(error)
            }
        }
    }
}
