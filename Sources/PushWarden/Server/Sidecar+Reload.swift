import PWCore
import PWPolicy
import RedisStores
import Registration

/// Reloading the policy in force, and the versions a signed policy is judged by.
extension Sidecar {
    /// Why a reload was refused; the running policy stays.
    public struct ReloadError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Builds the apps of `policy` completely (secrets resolved, upstreams made, `jwks_url` keys
    /// fetched) and only then puts them in force; requests in flight finish on the apps they
    /// began with. On any failure nothing switches. Counted in `pushwarden_policy_reloads_total`.
    ///
    /// A signed policy (`signed`) must also have a serial above the running one's (or be the very
    /// file in force), and the store must admit it (`PolicySerialRecord`): checked first against
    /// the running version, then, once everything is built, in the store, which records it.
    ///
    /// - Important: callers serialize reloads (`PolicyReloader` does).
    public func reload(_ policy: Policy, sha256: String, signed: Bool = false) async -> Result<Void, ReloadError> {
        let apps: [String: AppRuntime]
        let adminTokens: AdminTokens
        let version = Self.version(of: policy, sha256: sha256)
        let trail: AuditTrail?
        do throws(ConfigurationError) {
            if signed {
                guard let version else { throw ConfigurationError(policy.diagnostic(at: "serial", PolicyFile.missingSerial).description) }
                if let refusal = version.refusal(after: running.withLock({ $0 }), .running) {
                    throw ConfigurationError(policy.diagnostic(at: "serial", refusal).description)
                }
            }
            try Self.checkQueued(policy, hasOutbox: hasOutbox)
            guard policy.store == storePolicy else {
                throw ConfigurationError("the store block (store.encryption_key, store.previous_encryption_keys, store.digest_key) changed: "
                                   + "the store keys are read at start only; restart to change them")
            }
            guard policy.webhooks == webhookPolicies else {
                throw ConfigurationError("the webhooks block changed: webhook receivers and their secrets are read at start only; restart to change them")
            }
            adminTokens = try AdminTokens.resolve(policy, secrets: builder.secrets)
            trail = try Self.auditTrail(policy, store: store, secrets: builder.secrets)
            apps = try await builder.build(policy)
            if signed, let version { try await Self.admit(version, policy: policy, record: serials) }
        } catch {
            reloadFailed([error.description], policy: policy.sourcePath)
            return .failure(ReloadError(description: error.description))
        }
        let old = self.apps.replace(with: apps)
        contactRoutes.replaceTokens(adminTokens)
        contactRoutes.replaceReceipts(trail)
        handler.receipts.withLock { $0 = trail }
        for app in apps.values { app.jwks?.start() }
        for app in old.values { app.jwks?.stop() }
        metrics.keepJWKSAges(of: Set(apps.values.filter { $0.jwks != nil }.map(\.policy.id)))
        running.withLock { $0 = version }
        metrics.policyInForce(sha256: sha256, serial: policy.serial)
        metrics.policyReload(result: "ok")
        let added = apps.keys.filter { old[$0] == nil }.sorted()
        let removed = old.keys.filter { apps[$0] == nil }.sorted()
        logger.info("policy reloaded", [("policy", policy.sourcePath), ("policy_sha256", sha256),
                                        ("policy_serial", policy.serial.map(String.init) ?? ""),
                                        ("apps", policy.apps.map(\.id).joined(separator: ",")),
                                        ("added", added.joined(separator: ",")), ("removed", removed.joined(separator: ","))])
        return .success(())
    }

    /// A reload refused before it reached `reload` (unreadable, invalid or badly signed file):
    /// logged with every diagnostic line and counted; the running policy stays.
    public func reloadFailed(_ diagnostics: [String], policy: String) {
        metrics.policyReload(result: "error")
        logger.error("policy reload refused; the running policy stays", [("policy", policy),
                                                                         ("diagnostics", diagnostics.joined(separator: "\n"))])
        for line in diagnostics { logger.error("policy diagnostic", [("policy", policy), ("diagnostic", line)]) }
    }

    /// The version of `policy` read from a file whose SHA-256 is `sha256`; nil without a serial.
    static func version(of policy: Policy, sha256: String?) -> PolicyVersion? {
        guard let serial = policy.serial, let sha256 else { return nil }
        return PolicyVersion(serial: serial, sha256: sha256)
    }

    /// Records `version` as put in force, or says why the store refuses it (a higher serial was
    /// seen, or this one with other bytes), or that it could not answer: a signed policy is put
    /// in force only once the store has judged it.
    static func admit(_ version: PolicyVersion, policy: Policy, record: any PolicySerialRecord) async throws(ConfigurationError) {
        let seen: PolicyVersion?
        do throws(StoreError) {
            seen = try await record.admit(version)
        } catch {
            throw ConfigurationError(policy.diagnostic(at: "serial", "the store could not check the serial against the highest it has seen "
                + "(\(error.detail)): a signed policy is put in force only once it has").description)
        }
        if let refusal = version.refusal(after: seen, .store) {
            throw ConfigurationError(policy.diagnostic(at: "serial", refusal).description)
        }
    }

    /// `admit` at start, for up to 10 s while the store does not answer (a Redis starting beside
    /// the sidecar); a refusal is final at once.
    static func admitAtStart(_ policy: Policy, sha256: String?, record: any PolicySerialRecord, logger: Logger) async throws(ConfigurationError) {
        guard let version = version(of: policy, sha256: sha256) else {
            throw ConfigurationError(policy.diagnostic(at: "serial", PolicyFile.missingSerial).description)
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let seen: PolicyVersion?
            do throws(StoreError) {
                seen = try await record.admit(version)
            } catch {
                guard error.kind == .unavailable || error.kind == .timeout, ContinuousClock.now < deadline else {
                    throw ConfigurationError(policy.diagnostic(at: "serial", "the store could not check the serial against the highest it has "
                        + "seen (\(error.detail)): a signed policy is put in force only once it has").description)
                }
                logger.warning("waiting for the store to check the policy serial", [("detail", error.detail)])
                try? await Task.sleep(for: .milliseconds(500))
                continue
            }
            if let refusal = version.refusal(after: seen, .store) {
                throw ConfigurationError(policy.diagnostic(at: "serial", refusal).description)
            }
            return
        }
    }
}
