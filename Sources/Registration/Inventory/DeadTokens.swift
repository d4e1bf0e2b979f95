import ClientAPI
import PWCore
import PWPolicy
import Providers
import Synchronization

/// What became of one report.
package enum DeadTokenResult: Sendable {
    /// Unregistered at every upstream that held it (or queued there) and forgotten.
    case removed(DeadTokenRemoval)
    /// Registered again after the sender saw it die: kept.
    case stale
    /// No installation of the app holds it.
    case unknown
    /// Held by the mass-death guard.
    case quarantined
    /// A removal an upstream refused or could not take (no outbox to fall back on): the
    /// installation is kept, so the same report can be sent again.
    case failed(ContractError)

    package var name: String {
        switch self {
        case .removed: return "removed"
        case .stale: return "stale"
        case .unknown: return "unknown"
        case .quarantined: return "quarantined"
        case .failed: return "failed"
        }
    }
}

/// One removal made on a report: whose installation it was, and each upstream's outcome.
package struct DeadTokenRemoval: Sendable {
    package let contact: ContactKeys
    /// The token as logs show it (`tok:…`), and its digest in the store.
    package let token: String
    package let digest: String
    package let upstreams: [(String, UpstreamOutcome)]
}

/// A report the guard holds, as `pushwarden tokens quarantine list` shows it.
package struct HeldSummary: Sendable {
    /// `tok:` and 8 hex digits; the digest's when the token cannot be opened.
    package let token: String
    package let reason: String
    package let observedMillis: Int64?
    package let heldMillis: Int64
    package let requestID: String
}

/// Dead-token reports from the backend's sender, over the registration operations: each reported
/// token is removed as an erasure removes one installation (`Registrar.retire`), unless it was
/// registered again after the sender saw it die, and only as long as the **mass-death guard**
/// lets it: within a minute an app's reports remove at most `dead_tokens.max_share` of its
/// installations or `dead_tokens.min_count`, whichever is more. Past that, and from then on while
/// any report is held, reports are held in the store for an operator to release or drop: a
/// misconfigured sender makes every token look dead, and an inventory erased on its word could
/// not be rebuilt.
///
/// Thread-safe: the state it keeps itself (the installation counts, the warnings) is locked.
package final class DeadTokens: Sendable {
    let registrar: Registrar
    let store: any DeadTokenStore
    private let clock: @Sendable () -> Int64
    /// Each app's installation count and when it was read: read again at most once a minute.
    private let counts = Mutex<[String: (count: Int, atMillis: Int64)]>([:])
    /// When each app's guard last logged its warning.
    private let warned = Mutex<[String: Int64]>([:])

    /// Lookups of one request run this many at a time.
    static let width = 16

    package init(registrar: Registrar, store: any DeadTokenStore,
                 clock: @escaping @Sendable () -> Int64 = { Int64(SystemClock.epochMillis()) }) {
        self.registrar = registrar
        self.store = store
        self.clock = clock
    }

    private var logger: Logger { registrar.logger }
    private var metrics: Metrics { registrar.metrics }
    private var inventory: Inventory { registrar.inventory }

    // MARK: Reports

    /// Judges and carries out the reports of one request, in their order.
    ///
    /// - Throws: `store_unavailable` when the store cannot say what holds the tokens or count the
    ///   removals: then nothing was removed.
    package func report(_ reports: [DeadTokenReport], in app: AppRuntime, requestID: String) async throws(ContractError) -> [DeadTokenResult] {
        let appID = app.policy.id
        let found = try await lookUp(reports, app: app)
        var results = [DeadTokenResult?](repeating: nil, count: reports.count)
        // Indices of the reports to remove, one per token (a token reported twice shares its fate).
        var candidates: [Int] = []
        var firstOf: [String: Int] = [:]
        var sameAs: [Int: Int] = [:]
        for (index, report) in reports.enumerated() {
            guard let held = found[index] else {
                results[index] = .unknown
                continue
            }
            if let observed = report.observedMillis, held.kept.stored.lastSeenMillis > observed {
                results[index] = .stale
                continue
            }
            if let first = firstOf[held.kept.stored.token.digest] {
                sameAs[index] = first
                continue
            }
            firstOf[held.kept.stored.token.digest] = index
            candidates.append(index)
        }
        var admitted = 0
        if !candidates.isEmpty {
            let limit = app.policy.deadTokens.removalLimit(installations: await installationCount(app: appID))
            do {
                admitted = try await store.admit(candidates.count, limit: limit, app: DeadTokenKeys(app: appID), nowMillis: clock())
                let held = candidates.dropFirst(admitted)
                if !held.isEmpty {
                    try await store.hold(held.map { heldReport(reports[$0], app: appID, requestID: requestID) }, app: DeadTokenKeys(app: appID))
                }
            } catch {
                throw unavailable(error, app: appID)
            }
        }
        for index in candidates.dropFirst(admitted) { results[index] = .quarantined }
        let removing = Array(candidates.prefix(admitted))
        let removals = await mapConcurrently(removing, width: Self.width) { [self] index -> DeadTokenResult in
            guard let held = found[index] else { return .unknown }
            return await remove(held, report: reports[index], app: app, requestID: requestID)
        }
        for (index, result) in zip(removing, removals) { results[index] = result }
        for (index, first) in sameAs { results[index] = results[first] }
        let final = results.map { $0 ?? .unknown }
        for result in final { metrics.deadToken(app: appID, result: result.name) }
        let quarantined = final.filter { if case .quarantined = $0 { return true } else { return false } }.count
        if quarantined > 0 { await warnHeld(app: appID, quarantined: quarantined, limit: app.policy.deadTokens) }
        return final
    }

    /// Where each report's token is held (nil: no installation of the app holds it).
    private func lookUp(_ reports: [DeadTokenReport], app: AppRuntime) async throws(ContractError) -> [Held?] {
        let appID = app.policy.id
        let looked = await mapConcurrently(reports, width: Self.width) { [self] report in
            await capture { () async throws(StoreError) in try await holding(report.pushToken, app: appID) }
        }
        var found: [Held?] = []
        found.reserveCapacity(looked.count)
        for result in looked {
            switch result {
            case .success(let held): found.append(held)
            case .failure(let error): throw unavailable(error, app: appID)
            }
        }
        return found
    }

    /// A token's installation and the contact holding it, by the keyed names or those of a build
    /// without `store.digest_key`.
    struct Held: Sendable {
        let contact: ContactKeys
        let kept: Inventory.Kept
    }

    private func holding(_ pushToken: String, app: String) async throws(StoreError) -> Held? {
        if let contact = try await inventory.holder(of: pushToken, app: app, on: nil) {
            return try await inventory.kept(pushToken, contact: contact, app: app, on: nil).map { Held(contact: contact, kept: $0) }
        }
        guard let (contact, token) = try await inventory.legacyHolding(pushToken, app: app, on: nil) else { return nil }
        return try await inventory.kept(token, contact: contact, app: app, on: nil).map { Held(contact: contact, kept: $0) }
    }

    /// The one removal of an installation that erasure, eviction and expiry make too.
    private func remove(_ held: Held, report: DeadTokenReport, app: AppRuntime, requestID: String) async -> DeadTokenResult {
        let origin = Registrar.Origin(app: app, context: CallContext(contactID: held.kept.contactID ?? ""), requestID: requestID, loop: nil)
        guard let outcomes = await registrar.retire(held.kept, contact: held.contact, origin: origin, reason: .dead) else {
            // Another removal holds it, or a registration rewrote it meanwhile: then it lives on.
            let now = try? await inventory.kept(held.kept.stored.token, contact: held.contact, app: app.policy.id, on: nil)
            return now == nil ? .unknown : .stale
        }
        if let failure = outcomes.lazy.compactMap({ outcome -> UpstreamFailure? in
            if case .failed(let failure) = outcome.1 { return failure } else { return nil }
        }).first {
            return .failed(failure.contractError)
        }
        return .removed(DeadTokenRemoval(contact: held.contact, token: held.kept.summaryToken, digest: held.kept.stored.token.digest,
                                         upstreams: outcomes))
    }

    /// The app's installation count for the guard's share, read at most once a minute. A count
    /// the store cannot give counts as none: the guard then lets `min_count` through, no more.
    private func installationCount(app: String) async -> Int {
        let now = clock()
        if let cached = counts.withLock({ $0[app] }), now - cached.atMillis < 60_000 { return cached.count }
        do {
            let count = try await store.installationCount(app: inventory.keys(of: app))
            counts.withLock { $0[app] = (count, now) }
            return count
        } catch {
            registrar.inventoryUnavailable(error, app: app)
            return 0
        }
    }

    private func warnHeld(app: String, quarantined: Int, limit: DeadTokenPolicy) async {
        let now = clock()
        let due = warned.withLock { last -> Bool in
            if let at = last[app], now - at < 60_000 { return false }
            last[app] = now
            return true
        }
        guard due else { return }
        let held = (try? await store.heldCount(app: DeadTokenKeys(app: app))).map(String.init) ?? "?"
        logger.warning("dead-token reports held by the mass-death guard: check the sender, then release or drop them (pushwarden tokens quarantine)", [
            ("app", app), ("quarantined", String(quarantined)), ("held", held), ("max_share", limit.maxShareText),
            ("min_count", String(limit.minCount)),
        ])
    }

    private func unavailable(_ error: StoreError, app: String) -> ContractError {
        registrar.inventoryUnavailable(error, app: app)
        return ContractError(.storeUnavailable, "the store did not answer; try again", retryAfter: 1)
    }

    // MARK: The quarantine

    /// `{"x": sealed token, "r": reason, "o": observed (ms), "h": held (ms), "q": request id}`.
    private func heldReport(_ report: DeadTokenReport, app: String, requestID: String) -> HeldReport {
        let keys = DeadTokenKeys(app: app)
        let field = inventory.digests.token(report.pushToken, app: app).digest
        var members = [
            JSONMember("x", .string(inventory.sealer.seal(report.pushToken, boundTo: Self.place(field, keys)))),
            JSONMember("r", .string(report.reason.rawValue)),
            JSONMember("h", .number(String(clock()))),
            JSONMember("q", .string(requestID)),
        ]
        if let observed = report.observedMillis { members.append(JSONMember("o", .number(String(observed)))) }
        return HeldReport(field: field, record: JSONValue.object(JSONObject(members)).encodedString())
    }

    private static func place(_ field: String, _ keys: DeadTokenKeys) -> String { keys.held + "\u{0}" + field }

    /// A held report opened: its report, or nil when its token cannot be opened here.
    private func open(_ held: HeldReport, app: String) -> (report: DeadTokenReport?, summary: HeldSummary) {
        let object = (try? JSONValue.parse(Array(held.record.utf8)))?.objectValue
        let token = object?["x"]?.stringValue.flatMap { inventory.sealer.open($0, boundTo: Self.place(held.field, DeadTokenKeys(app: app))) }
        // Only a token whose digest is the field it sits under is the one reported there.
        let pushToken = token.flatMap { inventory.digests.token($0, app: app).digest == held.field ? $0 : nil }
        let reason = object?["r"]?.stringValue.flatMap(DeadReason.init(rawValue:))
        let observed = object?["o"].flatMap(Self.millis)
        let summary = HeldSummary(token: pushToken.map(Redact.token) ?? "tok:" + String(held.field.prefix(8)),
                                  reason: reason?.rawValue ?? "?", observedMillis: observed,
                                  heldMillis: object?["h"].flatMap(Self.millis) ?? 0, requestID: object?["q"]?.stringValue ?? "-")
        guard let pushToken, let reason else { return (nil, summary) }
        return (DeadTokenReport(pushToken: pushToken, reason: reason, observedMillis: observed), summary)
    }

    private static func millis(_ value: JSONValue) -> Int64? {
        guard case .number(let text) = value else { return nil }
        return Int64(text)
    }

    /// Every report the guard holds for the app, oldest first.
    package func held(app: String) async throws(StoreError) -> [HeldSummary] {
        var summaries: [HeldSummary] = []
        try await eachHeld(app: app) { held in summaries.append(open(held, app: app).summary) }
        return summaries.sorted { ($0.heldMillis, $0.token) < ($1.heldMillis, $1.token) }
    }

    /// What a release or a drop did.
    package struct QuarantineOutcome: Sendable {
        /// Each report handled: its token as shown, and its result's name (`removed`, `stale`,
        /// `unknown`, `failed:<code>`, `dropped`, `unreadable`).
        package var reports: [(token: String, result: String)] = []
        package var removals: [DeadTokenRemoval] = []
    }

    /// Removes the held reports' tokens (all, or those `selected` names by their short hash) as
    /// a report would, past the guard: a token registered again since is stale and kept. A report
    /// whose removal failed stays held; the others leave the quarantine.
    package func release(app: AppRuntime, requestID: String, selected: Set<String>? = nil) async throws(StoreError) -> QuarantineOutcome {
        let appID = app.policy.id
        var outcome = QuarantineOutcome()
        var all: [HeldReport] = []
        try await eachHeld(app: appID) { all.append($0) }
        for held in all {
            let (report, summary) = open(held, app: appID)
            guard selected.map({ $0.contains(summary.token) }) ?? true else { continue }
            guard let report else {
                outcome.reports.append((summary.token, "unreadable"))
                continue
            }
            let result: DeadTokenResult
            // Without the sender's time, the time it was held: a device seen since then is alive.
            let observed = report.observedMillis ?? summary.heldMillis
            if let found = try await holding(report.pushToken, app: appID) {
                if found.kept.stored.lastSeenMillis > observed {
                    result = .stale
                } else {
                    result = await remove(found, report: report, app: app, requestID: requestID)
                }
            } else {
                result = .unknown
            }
            switch result {
            case .failed(let error):
                outcome.reports.append((summary.token, "failed:" + error.code.rawValue))
                continue
            case .removed(let removal):
                outcome.removals.append(removal)
            default:
                break
            }
            outcome.reports.append((summary.token, result.name))
            _ = try await store.unhold(held.field, ifStill: held.record, app: DeadTokenKeys(app: appID))
        }
        return outcome
    }

    /// Forgets the held reports (all, or those `selected` names) without removing anything.
    package func drop(app: String, selected: Set<String>? = nil) async throws(StoreError) -> QuarantineOutcome {
        var outcome = QuarantineOutcome()
        var all: [HeldReport] = []
        try await eachHeld(app: app) { all.append($0) }
        for held in all {
            let summary = open(held, app: app).summary
            guard selected.map({ $0.contains(summary.token) }) ?? true else { continue }
            if try await store.unhold(held.field, ifStill: held.record, app: DeadTokenKeys(app: app)) {
                outcome.reports.append((summary.token, "dropped"))
            }
        }
        return outcome
    }

    /// Each held report once (a scan of a changing hash may return one twice).
    private func eachHeld(app: String, _ body: (HeldReport) -> Void) async throws(StoreError) {
        var cursor = "0"
        var seen: Set<String> = []
        repeat {
            let page = try await store.held(app: DeadTokenKeys(app: app), cursor: cursor, limit: 500)
            for report in page.reports where seen.insert(report.field).inserted { body(report) }
            cursor = page.next
        } while cursor != "0"
    }
}
