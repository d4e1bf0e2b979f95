import PWCore

/// The server-to-server operations on one contact's installations (contract section 8), beneath
/// the admin listener's HTTP edge: what the edge calls once the admin token, the app and the
/// contact id are checked.
protocol ContactAdministration: Sendable {
    /// The installations the inventory holds for `contactID`, most recently seen first.
    func installations(of contactID: String, in app: AppRuntime) async throws(ContractError) -> [InstallationSummary]
    /// Unregisters every installation of `contactID` at every upstream that holds it and forgets
    /// everything kept about them; idempotent.
    func erase(_ contactID: String, in app: AppRuntime, requestID: String) async throws(ContractError) -> ErasureReport
}

/// One installation as the server-to-server API shows it: the token only as a short hash.
struct InstallationSummary: Sendable, Equatable {
    /// `tok:` and the first 8 hex digits of the token's SHA-256 (`Redact.token`).
    var token: String
    var platform: String
    var pushService: String
    var upstreams: [String]
    var firstSeenMillis: Int64
    var lastSeenMillis: Int64
}

/// What an erasure did: how many installations it found and, per upstream of the app, what
/// happened there (`forwarded`, `queued`, `skipped`, or the failure).
struct ErasureReport: Sendable {
    var installations: Int
    var upstreams: [(String, UpstreamOutcome)]
}
