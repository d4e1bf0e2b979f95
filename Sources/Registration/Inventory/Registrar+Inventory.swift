import ClientAPI
import Loops
import PWCore
import Providers

/// What the registration operations keep in, and take from, each contact's inventory: the record
/// of a registration, the last-seen time of a dedupe hit, and the removal of installations a
/// contact no longer has (evicted over its cap, expired, erased).
extension Registrar {
    // MARK: Keeping

    /// Records which upstreams hold `installation` after a registration; the token leaves the
    /// inventory of a contact that held it before; over `client.max_installations`, the least
    /// recently seen other installation is evicted. The upstreams hold it already, so a store
    /// failure is retried through `pending` until the store answers.
    func keep(_ installation: Installation, outcomes: [(String, UpstreamOutcome)], origin: Origin) async {
        let holding = outcomes.filter { $0.1.holdsRegistration }.map(\.0)
        guard !holding.isEmpty else { return }
        let key = Self.pendingKey(app: origin.appID, contactID: origin.context.contactID, pushToken: installation.pushToken)
        deduper.pending.cancel(key)
        let states = Dictionary(outcomes.map { ($0.0, $0.1.name) }, uniquingKeysWith: { first, _ in first })
        do {
            try await keep(installation, at: holding, states: states, origin: origin)
        } catch {
            inventoryUnavailable(error, app: origin.appID)
            let later = origin.offLoop
            deduper.pending.add(.inventory, key: key, error: error) { [self] () async throws(StoreError) in
                try await keep(installation, at: holding, states: states, origin: later)
            }
        }
    }

    private func keep(_ installation: Installation, at holding: [String], states: [String: String] = [:],
                      origin: Origin) async throws(StoreError) {
        let appID = origin.appID
        // Every upstream had it already (a dedupe hit's last-seen touch): a record that exists.
        let known = !states.isEmpty && holding.allSatisfy { states[$0] == UpstreamOutcome.unchanged.name }
        let result = try await inventory.keep(installation, contactID: origin.context.contactID, app: appID, upstreams: holding,
                                              sessionID: origin.sessionID, sessionTTLMillis: Self.sessionIndexMillis(origin.app.policy),
                                              likelyNew: !known, on: origin.loop)
        if let previous = result.previousOwner {
            _ = try await inventory.forget(digests.token(installation.pushToken, app: appID), contact: previous, app: appID,
                                           on: origin.loop)
        }
        if result.previousOwner != nil || result.isNew {
            emit(result.previousOwner != nil ? .moved : .registered, app: appID, contactID: origin.context.contactID,
                 token: Redact.token(installation.pushToken), platform: installation.platform.rawValue,
                 upstreams: holding.map { ($0, states[$0] ?? "forwarded") }, reason: nil, requestID: origin.requestID)
        }
        // The record a build without `store.digest_key` wrote goes, this contact's or the one it
        // moved from: the installation lives under the keyed names now.
        if result.isNew, let (holder, token) = try await inventory.legacyHolding(installation.pushToken, app: appID, on: origin.loop) {
            _ = try await inventory.forget(token, contact: holder, app: appID, on: origin.loop)
        }
        if let cap = origin.app.policy.client.maxInstallations, result.isNew, result.count > cap {
            await evict(result.count - cap, keeping: installation.pushToken, origin: origin)
        }
    }

    /// Forgets `pushToken` in `contact`'s inventory after its device unregistered it everywhere;
    /// retried through `pending` (replacing a waiting record of it) when the store fails.
    func forgetUnregistered(_ pushToken: String, contact: ContactKeys, token: TokenKeys, origin: Origin) async {
        let key = Self.pendingKey(app: origin.appID, contactID: origin.context.contactID, pushToken: pushToken)
        deduper.pending.cancel(key)
        let inventory = inventory
        let appID = origin.appID
        do {
            _ = try await inventory.forget(token, contact: contact, app: appID, on: origin.loop)
        } catch {
            inventoryUnavailable(error, app: appID)
            deduper.pending.add(.inventory, key: key, error: error) { () async throws(StoreError) in
                _ = try await inventory.forget(token, contact: contact, app: appID, on: nil)
            }
        }
    }

    /// Names one contact's record of one token among the pending writes (never stored).
    private static func pendingKey(app: String, contactID: String, pushToken: String) -> String {
        "inventory\u{0}" + app + "\u{0}" + contactID + "\u{0}" + pushToken
    }

    /// A registration every upstream already had: its last-seen time is written at most once per
    /// `Inventory.touchIntervalMillis` per installation and process, off the answer's path, so a
    /// dedupe hit costs one dictionary lookup here, not a store write.
    func seen(_ installation: Installation, plan: RegisterPlan, outcomes: [(String, UpstreamOutcome)], origin: @autoclosure () -> Origin) {
        guard let key = plan.touchKey else { return }
        let interval = Inventory.touchIntervalMillis(expireAfterMillis: plan.expireAfterMillis)
        guard inventory.touchDue(key, intervalMillis: interval) else { return }
        // Off the answer's path, in a task of its own on no loop: through the store's pool.
        let origin = origin().offLoop
        Task { [self] in await keep(installation, outcomes: outcomes, origin: origin) }
    }

    func inventoryUnavailable(_ error: StoreError, app: String) {
        logger.bounded(.warning, "inventory store unavailable", key: "inventory" + app, [("app", app), ("error", error.detail)])
    }

    // MARK: Removing

    /// Why an installation leaves the inventory without its device asking: the metric's `reason`.
    enum Removal: String, Sendable {
        case evicted, expired, erased, dead
        case loggedOut = "logged_out"
    }

    /// Evicts the `count` least recently seen installations of the origin's contact other than
    /// `keeping`, unregistering them upstream with the request's own context (so a provider that
    /// takes the user's credential is called with it).
    private func evict(_ count: Int, keeping pushToken: String, origin: Origin) async {
        let contact = digests.contact(origin.context.contactID, app: origin.appID)
        let current = digests.token(pushToken, app: origin.appID)
        do {
            let victims = try await inventory.all(of: contact, app: origin.appID, on: origin.loop)
                .filter { $0.stored.token != current }
                .sorted { ($0.stored.lastSeenMillis, $0.stored.token.digest) < ($1.stored.lastSeenMillis, $1.stored.token.digest) }
                .prefix(count)
            for victim in victims {
                _ = await retire(victim, contact: contact, origin: origin, reason: .evicted)
            }
        } catch {
            inventoryUnavailable(error, app: origin.appID)
        }
    }

    /// One installation leaving a contact's inventory without its device asking (erased, evicted,
    /// expired): removed everywhere its record names, unless the token has moved to another
    /// contact (then only this contact's record goes, nothing is called upstream: nil). A move is
    /// normally found when the token is registered again and the old record goes then; this check
    /// covers a move the inventory did not see (a record that outlived the holder it was written
    /// with), so that no stale record unregisters the new holder's device.
    ///
    /// Removals of one installation that overlap (two erasures, an erasure and the sweeper) remove
    /// it once: each claims it first, and one that finds it claimed, or changed or gone once
    /// claimed, leaves it to the other (nil).
    func retire(_ kept: Inventory.Kept, contact: ContactKeys, origin: Origin, reason: Removal) async -> [(String, UpstreamOutcome)]? {
        let claim = contact.removalClaim(of: kept.stored.token)
        let owner = ProcessUnique.next()
        // Long enough for every upstream's whole budget, so a claim outlives the calls it guards.
        let claimMillis = origin.app.upstreams.map(\.budgetMillis).reduce(5_000, +)
        var claimed = false
        do {
            guard try await inventory.store.lease(claim, owner: owner, ttlMillis: claimMillis) else { return nil }
            claimed = true
            guard let current = try await inventory.kept(kept.stored.token, contact: contact, app: origin.appID, on: origin.loop),
                  current.stored.raw == kept.stored.raw else {
                try? await inventory.store.releaseLease(claim, owner: owner)
                return nil
            }
        } catch {
            // Without the store the claim cannot be had; the removal goes on as it would alone.
            inventoryUnavailable(error, app: origin.appID)
        }
        let outcomes = await retireClaimed(kept, contact: contact, origin: origin, reason: reason)
        if claimed { try? await inventory.store.releaseLease(claim, owner: owner) }
        return outcomes
    }

    private func retireClaimed(_ kept: Inventory.Kept, contact: ContactKeys, origin: Origin, reason: Removal) async -> [(String, UpstreamOutcome)]? {
        do {
            if let holder = try await inventory.holder(of: kept.stored.token, app: origin.appID, on: origin.loop), holder != contact {
                _ = try await inventory.forget(kept.stored.token, contact: contact, app: origin.appID, ifStill: kept.stored.raw,
                                               on: origin.loop)
                return nil
            }
        } catch {
            inventoryUnavailable(error, app: origin.appID)
        }
        return await remove(kept, contact: contact, origin: origin, reason: reason)
    }

    /// Unregisters one kept installation at every upstream its record names (through the outbox
    /// when one is down), forgets its dedupe entries and identities at every upstream, and removes
    /// its record unless a removal failed (so the next attempt finds it) or a registration rewrote
    /// it meanwhile. An upstream that takes only the user's own credential is `skipped` when the
    /// origin carries none. Returns each upstream's outcome.
    private func remove(_ kept: Inventory.Kept, contact: ContactKeys, origin: Origin, reason: Removal) async -> [(String, UpstreamOutcome)] {
        let listed = Set(kept.stored.upstreams)
        let outcomes: [(String, UpstreamOutcome)]
        if let pushToken = kept.pushToken {
            outcomes = await origin.app.eachUpstream { [self] caller -> UpstreamOutcome in
                let name = caller.adapter.name
                let callable = !caller.adapter.needsCallerCredential || caller.adapter.forwardedCredential(origin.context) != nil
                guard listed.contains(name), callable else {
                    await forgetState(pushToken, at: caller, app: origin.appID, on: origin.loop)
                    return .skipped
                }
                return await remove(pushToken, at: caller, origin: origin)
            }
        } else {
            // Sealed under a key this process does not hold: nothing can be called; the record goes.
            outcomes = origin.app.upstreams.map { ($0.adapter.name, UpstreamOutcome.skipped) }
        }
        if !outcomes.contains(where: { $0.1.isFailure }) {
            do {
                if try await inventory.forget(kept.stored.token, contact: contact, app: origin.appID, ifStill: kept.stored.raw,
                                              on: origin.loop) {
                    metrics.inventoryRemoved(app: origin.appID, reason: reason.rawValue)
                    emit(Self.event(of: reason), app: origin.appID, contactID: kept.contactID ?? origin.context.contactID,
                         token: kept.summaryToken, platform: kept.stored.platform, upstreams: outcomes.map { ($0.0, $0.1.name) },
                         reason: reason.rawValue, requestID: origin.requestID)
                }
            } catch {
                inventoryUnavailable(error, app: origin.appID)
            }
        }
        logger.info("installation removed", [
            ("app", origin.appID), ("reason", reason.rawValue), ("request_id", origin.requestID), ("token", kept.summaryToken),
            ("contact", Redact.contact(kept.contactID ?? origin.context.contactID)),
            ("upstreams", outcomes.map { $0.0 + "=" + $0.1.name }.joined(separator: ",")),
        ])
        return outcomes
    }

    /// Forgets what is kept for a token at an upstream that is not called.
    private func forgetState(_ pushToken: String, at caller: UpstreamCaller, app: String, on loop: EventLoop?) async {
        let keys = digests.registration(pushToken, app: app, upstream: caller.adapter.name)
        await deduper.forget(keys: keys, app: app, on: loop)
        if caller.adapter.keepsIdentity { await identities.delete(keys, upstream: caller.adapter.name, on: loop) }
    }
}
