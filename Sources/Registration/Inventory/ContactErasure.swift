import PWCore
import Providers

/// The server-to-server operations on a contact (contract section 8), by the registration
/// operations: list what the inventory holds, and erase it everywhere.
///
/// **An erasure racing a registration of the same contact** never leaves a provider registration
/// that the inventory does not list. The rule: a registration writes its record *after* the
/// upstream took it, and an erasure removes a record only while it is still the one it read
/// (compare and delete). A registration that finished before the erasure read is unregistered; one
/// that writes its record later rewrites it (a fresh record, or a changed one the erasure does not
/// delete), so it stays listed. The erasure then reads again and removes what was rewritten, up
/// to `passes` times.
extension Registrar: ContactAdministration {
    /// Reads after the first that an erasure makes for records rewritten while it ran.
    static let erasurePasses = 3

    package func installations(of contactID: String, in app: AppRuntime) async throws(ContractError) -> [InstallationSummary] {
        var kept: [Inventory.Kept] = []
        do {
            for contact in inventory.contactKeys(contactID, app: app.policy.id) {
                kept += try await inventory.all(of: contact, app: app.policy.id, on: nil)
            }
        } catch {
            throw Self.unavailable(error, logger: logger)
        }
        return kept
            .sorted { ($0.stored.lastSeenMillis, $0.stored.token.digest) > ($1.stored.lastSeenMillis, $1.stored.token.digest) }
            .map { kept in
                var odd: [String] = []
                let summary = InstallationSummary(kept, odd: &odd)
                if !odd.isEmpty {
                    // Listed and erasable still (an erasure must reach it), but never echoed as stored.
                    logger.bounded(.warning, "inventory record holds values PushWarden never writes; listed replaced", key: "odd" + app.policy.id, [
                        ("app", app.policy.id), ("contact", Redact.contact(contactID)), ("token", summary.token),
                        ("fields", odd.joined(separator: ",")),
                    ])
                }
                return summary
            }
    }

    package func erase(_ contactID: String, in app: AppRuntime, requestID: String) async throws(ContractError) -> ErasureReport {
        // Installations recorded before `store.digest_key` was set sit under the unkeyed names: erased too.
        try await removeInstallations(of: contactID, under: inventory.contactKeys(contactID, app: app.policy.id), in: app,
                                      requestID: requestID, reason: .erased) { _ in true }
    }

    /// Unregisters at every upstream that holds it, and forgets, each installation of `contactID`
    /// (kept under `contacts`) that `selected` picks, as an erasure does: records rewritten while
    /// it runs are read again, up to `erasurePasses` times. What erasure and back-channel logout share.
    func removeInstallations(of contactID: String, under contacts: [ContactKeys], in app: AppRuntime, requestID: String,
                             reason: Removal, selected: @escaping @Sendable (Inventory.Kept) -> Bool) async throws(ContractError) -> ErasureReport {
        // No client headers: a provider that takes only the user's own credential is skipped. No
        // request loop: the pools.
        let origin = Origin(app: app, context: CallContext(contactID: contactID), requestID: requestID, loop: nil)
        var attempted: Set<String> = []  // records as read (with their contact's digest), so a failed removal is not retried within one call
        var erased: Set<String> = []     // tokens (their digests when unreadable)
        var outcomes: [String: UpstreamOutcome] = [:]
        for caller in app.upstreams { outcomes[caller.adapter.name] = .skipped }
        for _ in 0...Self.erasurePasses {
            var kept: [(contact: ContactKeys, installation: Inventory.Kept)] = []
            do {
                for contact in contacts {
                    kept += try await inventory.all(of: contact, app: app.policy.id, on: origin.loop)
                        .filter { !attempted.contains(contact.digest + $0.stored.raw) && selected($0) }
                        .map { (contact, $0) }
                }
            } catch {
                throw Self.unavailable(error, logger: logger)
            }
            if kept.isEmpty { break }
            attempted.formUnion(kept.map { $0.contact.digest + $0.installation.stored.raw })
            let results = await mapConcurrently(kept) { [self] entry in
                let perUpstream = await retire(entry.installation, contact: entry.contact, origin: origin, reason: reason)
                return (entry.installation.pushToken ?? entry.installation.stored.token.digest, perUpstream)
            }
            for (digest, perUpstream) in results {
                guard let perUpstream else { continue }
                erased.insert(digest)
                for (name, outcome) in perUpstream { outcomes[name] = Self.worse(outcomes[name] ?? .skipped, outcome) }
            }
        }
        return ErasureReport(installations: erased.count,
                             upstreams: app.upstreams.map { ($0.adapter.name, outcomes[$0.adapter.name] ?? .skipped) })
    }

    /// The outcome an erasure reports for an upstream over several installations: a failure over a
    /// queued removal, over a forwarded one, over nothing to do.
    static func worse(_ a: UpstreamOutcome, _ b: UpstreamOutcome) -> UpstreamOutcome {
        func rank(_ outcome: UpstreamOutcome) -> Int {
            switch outcome {
            case .failed: return 3
            case .queued: return 2
            case .forwarded, .unchanged: return 1
            case .skipped: return 0
            }
        }
        return rank(b) > rank(a) ? b : a
    }

    private static func unavailable(_ error: StoreError, logger: Logger) -> ContractError {
        logger.bounded(.warning, "inventory store unavailable", key: "inventory-admin", [("error", error.detail)])
        return ContractError(.storeUnavailable, "the store did not answer; try again", retryAfter: 1)
    }
}
