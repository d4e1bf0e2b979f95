import PWCore
import PWPolicy
import Providers
import SessionAuth
import Synchronization

/// The session ids of the installations a logout removes, collected as they are picked.
private final class EndedSessions: Sendable {
    private let sessions = Mutex<Set<String>>([])

    func insert(_ sid: String) { sessions.withLock { _ = $0.insert(sid) } }
    var all: Set<String> { sessions.withLock { $0 } }
}

/// What a back-channel logout did, or why it did nothing.
package enum LogoutOutcome: Sendable {
    /// The logout ran: the installations it found (perhaps none) were removed as `report` says;
    /// `contact` is whose they were, when the token named a contact or its session was found.
    case loggedOut(ErasureReport, contact: ContactKeys?)
    /// The token's `jti` was used before (on any replica sharing the store): nothing was done.
    case replayed
}

/// OpenID Connect Back-Channel Logout (contract section 10): a logout token that passed its
/// checks (`SessionVerifier.verifyLogout`) ends its session here. Its installations are found
/// by the session id each registration kept: in the inventory of the contact the token names,
/// or, for a token carrying only `sid`, of the contact the session index names. A token with
/// only `sub` (or `scope: contact`) removes every installation of the contact. Removal is
/// erasure's, installation by installation.
extension Registrar {
    /// How long a session index entry lives past its registration: `inventory.expire_after` and
    /// a day (the record is gone by then), else 400 days; every write of the record renews it.
    static func sessionIndexMillis(_ policy: AppPolicy) -> Int {
        let day = 86_400_000
        guard let expire = policy.inventory.expireAfterMillis else { return 400 * day }
        return expire + day
    }

    /// Refuses a replayed `jti`, then removes what the token logs out.
    ///
    /// - Throws: `store_unavailable` when the store does not answer; the `jti` is then released,
    ///   so the identity provider's retry is not refused as a replay.
    package func logOut(_ token: LogoutToken, scope: BackchannelLogoutPolicy.Scope, in app: AppRuntime,
                        requestID: String) async throws(ContractError) -> LogoutOutcome {
        let appID = app.policy.id
        let jtiKey = digests.logoutToken(token.jti, app: appID)
        let owner = ProcessUnique.next()
        let nowMillis = SystemClock.epochMillis()
        let ttl = max(1000, Int(token.rememberUntil * 1000) - nowMillis + 1000)
        do {
            // Held by no one: the first use. A lease with a fresh owner is `SET NX PX`, across replicas.
            guard try await inventory.store.lease(jtiKey, owner: owner, ttlMillis: ttl) else { return .replayed }
        } catch {
            throw storeUnavailable(error, app: appID)
        }
        do throws(ContractError) {
            let (report, contact) = try await removeLoggedOut(token, scope: scope, in: app, requestID: requestID)
            return .loggedOut(report, contact: contact)
        } catch {
            try? await inventory.store.releaseLease(jtiKey, owner: owner)
            throw error
        }
    }

    private func removeLoggedOut(_ token: LogoutToken, scope: BackchannelLogoutPolicy.Scope, in app: AppRuntime,
                                 requestID: String) async throws(ContractError) -> (ErasureReport, ContactKeys?) {
        let appID = app.policy.id
        let nothing = ErasureReport(installations: 0, upstreams: app.upstreams.map { ($0.adapter.name, UpstreamOutcome.skipped) })
        // The session ends here before anything is removed, so a registration under it cannot slip back in.
        if let sid = token.sessionID { try await markLoggedOut([sid], app: app) }
        // Only the session's installations when the token names one and the policy asks for no more.
        let sessionID = scope == .session ? token.sessionID : nil
        let ended = EndedSessions()
        let selected: @Sendable (Inventory.Kept) -> Bool = { kept in
            guard sessionID.map({ kept.sessionID == $0 }) ?? true else { return false }
            if let sid = kept.sessionID { ended.insert(sid) }
            return true
        }
        // Every other session whose devices went (a token with only `sub`, `scope: contact`) ends too;
        // the devices are gone already, so a failure here is logged, not answered.
        let endOthers = { [self] () async in
            let others = ended.all.subtracting(token.sessionID.map { [$0] } ?? [])
            guard !others.isEmpty else { return }
            do throws(ContractError) { try await markLoggedOut(others, app: app) } catch {}
        }
        if let contactID = token.contactID {
            let report = try await removeInstallations(of: contactID, under: inventory.contactKeys(contactID, app: appID), in: app,
                                                       requestID: requestID, reason: .loggedOut, selected: selected)
            await endOthers()
            return (report, digests.contact(contactID, app: appID))
        }
        // Only `sid` (or a `sub` that is not the contact claim): the contact that registered under it.
        guard let sid = token.sessionID else { return (nothing, nil) }
        let contact: ContactKeys
        let contactID: String
        do {
            guard let holder = try await inventory.sessionHolder(sid, app: appID, on: nil) else { return (nothing, nil) }
            let kept = try await inventory.all(of: holder, app: appID, on: nil)
            guard let named = kept.first(where: { $0.sessionID == sid })?.contactID ?? kept.first(where: { $0.contactID != nil })?.contactID else {
                return (nothing, holder)
            }
            contact = holder
            contactID = named
        } catch {
            throw storeUnavailable(error, app: appID)
        }
        let report = try await removeInstallations(of: contactID, under: [contact], in: app, requestID: requestID, reason: .loggedOut,
                                                   selected: selected)
        await endOthers()
        return (report, contact)
    }

    /// Marks sessions logged out: a registration under one is refused from now on, on every
    /// replica, for as long as the session index would name it.
    private func markLoggedOut(_ sessions: Set<String>, app: AppRuntime) async throws(ContractError) {
        let seconds = Self.sessionIndexMillis(app.policy) / 1000
        for sid in sessions {
            do {
                try await deduper.store.set(digests.loggedOutSession(sid, app: app.policy.id), "1", ttlSeconds: seconds, on: nil)
            } catch {
                throw storeUnavailable(error, app: app.policy.id)
            }
        }
    }

    private func storeUnavailable(_ error: StoreError, app: String) -> ContractError {
        inventoryUnavailable(error, app: app)
        return ContractError(.storeUnavailable, "the store did not answer; try again", retryAfter: 1)
    }
}
