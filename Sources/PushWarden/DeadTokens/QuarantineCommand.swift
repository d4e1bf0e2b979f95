import HTTPClient
import PWCore
import PWPolicy
import Providers
import RedisClient
import RedisStores
import Registration

/// `pushwarden tokens quarantine list|release|drop --policy FILE --redis URL --app A [--token
/// tok:…,…]`: the dead-token reports the mass-death guard holds for an app, tokens as short
/// hashes; removed as a report would remove them (past the guard); or forgotten.
///
/// The policy is the one the sidecars serve: its store keys open the held tokens and name them in
/// the store, its upstreams (and their credentials) are where a release unregisters them, and its
/// evidence trail receives a receipt per removal. A release goes through the outbox where an
/// upstream is down, which the running sidecars' workers deliver.
public enum QuarantineCommand {
    public enum Action: String, Sendable { case list, release, drop }

    /// What a run did: the reports handled, and those that could not be (still held); the
    /// command exits non-zero when `failed` is not 0.
    public struct Report: Sendable, Equatable {
        public var handled = 0
        public var failed = 0
    }

    /// - Parameters:
    ///   - tokens: the short hashes (`tok:1a2b3c4d`) of the reports to act on; nil: all of the app's.
    ///   - write: one line per report, then a count line.
    public static func run(_ action: Action, policy: Policy, redisURL: String, app appID: String, tokens: Set<String>? = nil,
                           secrets: some SecretResolving = SecretResolver(), logger: Logger,
                           write: (String) -> Void) async throws(ConfigurationError) -> Report {
        guard let appPolicy = policy.apps.first(where: { TextRules.bytesEqual($0.id, appID) }) else {
            throw ConfigurationError("the policy has no app \(appID)")
        }
        let runtime = try await CommandRuntime(policy: policy, app: appPolicy, redisURL: redisURL, secrets: secrets, logger: logger)
        defer { runtime.close() }
        let (app, redis, registrar, outbox, pending) = (runtime.app, runtime.redis, runtime.registrar, runtime.outbox, runtime.pending)
        let trail = action == .release ? try Sidecar.auditTrail(policy, store: redis, secrets: secrets) : nil
        let deadTokens = DeadTokens(registrar: registrar, store: RedisDeadTokenStore(store: redis))
        var report = Report()
        do throws(StoreError) {
            switch action {
            case .list:
                for held in try await deadTokens.held(app: appPolicy.id) where tokens.map({ $0.contains(held.token) }) ?? true {
                    write([held.token, "reason " + held.reason,
                           "observed " + (held.observedMillis.map { RFC3339.utc(epochMillis: $0) } ?? "-"),
                           "held " + RFC3339.utc(epochMillis: held.heldMillis), "request " + OutboxCommand.shown(held.requestID)]
                        .joined(separator: "  "))
                    report.handled += 1
                }
                write("\(report.handled) held")
            case .release:
                let requestID = "quarantine-release-" + RequestID.from(HTTPHeaders())
                let outcome = try await deadTokens.release(app: app, requestID: requestID, selected: tokens)
                for (token, result) in outcome.reports {
                    write(token + "  " + result)
                    if result.hasPrefix("failed") || result == "unreadable" { report.failed += 1 } else { report.handled += 1 }
                }
                _ = await DeadTokenRoutes.appendReceipts(outcome.removals, to: trail, app: appPolicy.id, requestID: requestID, logger: logger)
                if await !outbox.webhooksSettled(withinMillis: 10_000) {
                    logger.error("webhook events still waiting at exit: they are lost")
                }
                if await !pending.flushed(withinMillis: 10_000) {
                    logger.error("store writes still waiting at exit: their records are lost", [("writes", String(pending.count))])
                }
                write("\(report.handled) released (\(outcome.removals.count) removed)"
                      + (report.failed > 0 ? ", \(report.failed) still held (failed or unreadable)" : ""))
            case .drop:
                let outcome = try await deadTokens.drop(app: appPolicy.id, selected: tokens)
                for (token, result) in outcome.reports { write(token + "  " + result) }
                report.handled = outcome.reports.count
                write("\(report.handled) dropped")
            }
        } catch {
            throw ConfigurationError("\(action.rawValue): the store did not answer: \(error.detail)")
        }
        return report
    }
}
