import PWCore
import PWPolicy
import Providers

/// The server-to-server operations on one contact's installations (contract section 8), beneath
/// the admin listener's HTTP edge: what the edge calls once the admin token, the app and the
/// contact id are checked.
package protocol ContactAdministration: Sendable {
    /// The installations the inventory holds for `contactID`, most recently seen first.
    func installations(of contactID: String, in app: AppRuntime) async throws(ContractError) -> [InstallationSummary]
    /// Unregisters every installation of `contactID` at every upstream that holds it and forgets
    /// everything kept about them; idempotent.
    func erase(_ contactID: String, in app: AppRuntime, requestID: String) async throws(ContractError) -> ErasureReport
}

/// One installation as the server-to-server API shows it: the token only as a short hash.
package struct InstallationSummary: Sendable, Equatable {
    /// `tok:` and the first 8 hex digits of the token's SHA-256 (`Redact.token`).
    package var token: String
    package var platform: String
    package var pushService: String
    package var upstreams: [String]
    package var firstSeenMillis: Int64
    package var lastSeenMillis: Int64
}

/// What an erasure did: how many installations it found and, per upstream of the app, what
/// happened there (`forwarded`, `queued`, `skipped`, or the failure).
package struct ErasureReport: Sendable {
    package var installations: Int
    package var upstreams: [(String, UpstreamOutcome)]
}

extension InstallationSummary {
    /// What the list shows of a kept record. The record comes back from a store other writers can
    /// reach, so a value PushWarden never writes is not echoed: a platform or push service outside
    /// the contract's values, or an upstream name outside the policy's rule, shows as `unknown:` and
    /// the first 8 hex digits of its SHA-256 (as an undocumented provider code does); a time outside
    /// RFC 3339's years 0000-9999 is clamped to the nearest end. `odd` gets the fields so shown.
    init(_ kept: Inventory.Kept, odd: inout [String]) {
        let stored = kept.stored
        func shown(_ value: String, _ field: String, expected: Bool) -> String {
            if expected { return value }
            odd.append(field)
            return "unknown:" + Redact.shortHash(value)
        }
        func clamped(_ millis: Int64, _ field: String) -> Int64 {
            if RFC3339.representableMillis.contains(millis) { return millis }
            odd.append(field)
            return min(max(millis, RFC3339.representableMillis.lowerBound), RFC3339.representableMillis.upperBound)
        }
        let upstreams = stored.upstreams.map { shown($0, "upstreams", expected: PolicyLoader.isSafeID($0)) }
        self.init(token: kept.summaryToken,
                  platform: shown(stored.platform, "platform", expected: Platform(rawValue: stored.platform) != nil),
                  pushService: shown(stored.pushService, "push_service", expected: PushService(rawValue: stored.pushService) != nil),
                  upstreams: upstreams,
                  firstSeenMillis: clamped(stored.firstSeenMillis, "first_seen"), lastSeenMillis: clamped(stored.lastSeenMillis, "last_seen"))
    }
}
