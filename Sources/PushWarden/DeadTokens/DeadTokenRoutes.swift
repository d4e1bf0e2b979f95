import ClientAPI
import HTTPServer
import PWCore
import Providers
import RedisStores
import Registration

/// The HTTP edge of dead-token reports, on the admin listener beside the contact routes and
/// behind the same admin tokens: `POST /v1/apps/{app}/tokens/dead` → `202 {"request_id",
/// "removed", "stale", "unknown", "quarantined", "refused": [{"index", "code", "field",
/// "message"}]}`. The operation itself is `DeadTokens`'.
///
/// A head is judged as the contact routes judge theirs: the route (`404` while no admin token is
/// in force), the admin token (`401`), the app (`404`), the method (`405`), the media type
/// (`415`); then the body (at most `maxBody` bytes, `413`).
final class DeadTokenRoutes: Sendable {
    /// A thousand reports of the longest tokens, with room for their fields.
    static let maxBody = 1_536 * 1024
    static let route = "tokens_dead"

    private let contacts: ContactRoutes
    private let deadTokens: DeadTokens
    private let apps: AppTable
    private let metrics: Metrics
    private let logger: Logger
    private let audit: Logger
    private let digests: KeyDigest

    init(contacts: ContactRoutes, deadTokens: DeadTokens, apps: AppTable, metrics: Metrics, logger: Logger, digests: KeyDigest) {
        self.contacts = contacts
        self.deadTokens = deadTokens
        self.apps = apps
        self.metrics = metrics
        self.logger = logger.with(label: "admin-api")
        audit = logger.with(label: "audit")
        self.digests = digests
    }

    /// What `decide` resolved from a head; it travels with the request.
    struct Resolved: Sendable {
        let app: AppRuntime
        let remoteAddress: String
        let grant: AdminTokens.Grant
    }

    /// `/v1/apps/{app}/tokens/dead`, split at `/` byte by byte; the app segment as sent.
    static func match(_ path: String) -> Substring? {
        let parts = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0].isEmpty, parts[1].elementsEqual("v1".utf8), parts[2].elementsEqual("apps".utf8),
              parts[4].elementsEqual("tokens".utf8), parts[5].elementsEqual("dead".utf8) else { return nil }
        return Substring(parts[3])
    }

    func decide(_ head: HTTPRequestHead) -> HeadDecision? {
        guard let appSegment = Self.match(head.path) else { return nil }
        let requestID = RequestID.from(head.headers)
        let tokens = contacts.tokensInForce
        guard !tokens.isEmpty else {
            return .respond(Responses.error(ContractError(.notFound, "no such route"), requestID: requestID))
        }
        let id = String(appSegment)
        let grant: AdminTokens.Grant
        switch ContactRoutes.authorize(head.headers, tokens: tokens, app: id) {
        case .success(let granted):
            grant = granted
        case .failure(let refusal):
            logger.bounded(.warning, "admin token refused", key: refusal.rawValue, [("reason", refusal.rawValue), ("remote", head.remoteAddress),
                                                                                   ("request_id", requestID)])
            metrics.request(app: "-", route: "-", status: 401)
            return .respond(Responses.error(ContractError(.unauthorized, "a valid admin token is required"), requestID: requestID))
        }
        guard let app = apps[id: id], TextRules.bytesEqual(app.policy.id, id) else {
            metrics.request(app: "-", route: "-", status: 404)
            return .respond(Responses.error(ContractError(.notFound, "unknown app"), requestID: requestID))
        }
        func refuse(_ error: ContractError, allow: String? = nil) -> HeadDecision {
            metrics.request(app: app.policy.id, route: Self.route, status: error.status)
            var response = Responses.error(error, requestID: requestID)
            if let allow { response.headers.set("Allow", allow) }
            return .respond(response)
        }
        guard head.method == "POST" else { return refuse(ContractError(.methodNotAllowed, "use POST for this route"), allow: "POST") }
        guard ClientAPIHandler.isJSON(head.headers["Content-Type"]) else {
            return refuse(ContractError(.unsupportedMediaType, "Content-Type must be application/json"))
        }
        return .readBody(limit: Self.maxBody, context: Resolved(app: app, remoteAddress: head.remoteAddress, grant: grant))
    }

    func payloadTooLarge(_ head: HTTPRequestHead) -> HTTPResponse {
        Responses.error(ContractError(.payloadTooLarge, "a dead-token report body holds at most \(Self.maxBody / 1024) KiB"),
                        requestID: RequestID.from(head.headers))
    }

    func handle(_ resolved: Resolved, body: [UInt8], requestID: String) async -> HTTPResponse {
        let appID = resolved.app.policy.id
        let response = await answer(resolved, body: body, requestID: requestID)
        metrics.request(app: appID, route: Self.route, status: response.status)
        return response
    }

    private func answer(_ resolved: Resolved, body: [UInt8], requestID: String) async -> HTTPResponse {
        let appID = resolved.app.policy.id
        let parsed: [Result<DeadTokenReport, ContractError>]
        do throws(ContractError) {
            parsed = try DeadTokenRequest.parse(body)
        } catch {
            return Responses.error(error, requestID: requestID)
        }
        var accepted: [(index: Int, report: DeadTokenReport)] = []
        var refused: [(index: Int, error: ContractError)] = []
        for (index, result) in parsed.enumerated() {
            switch result {
            case .success(let report): accepted.append((index, report))
            case .failure(let error): refused.append((index, error))
            }
        }
        let results: [DeadTokenResult]
        do throws(ContractError) {
            results = try await deadTokens.report(accepted.map(\.report), in: resolved.app, requestID: requestID)
        } catch {
            logger.log(error.code == .internal ? .error : .warning, "dead-token reports failed", [
                ("app", appID), ("request_id", requestID), ("code", error.code.rawValue), ("detail", error.message),
            ])
            return Responses.error(error, requestID: requestID)
        }
        for _ in refused { metrics.deadToken(app: appID, result: "refused") }
        var counts: [String: Int] = ["removed": 0, "stale": 0, "unknown": 0, "quarantined": 0]
        for ((index, _), result) in zip(accepted, results) {
            if case .failed(let error) = result {
                refused.append((index, error))
            } else {
                counts[result.name, default: 0] += 1
            }
        }
        refused.sort { $0.index < $1.index }
        // A token reported twice was removed once: one receipt, one mention.
        var seen: Set<String> = []
        let removals = results.compactMap { result -> DeadTokenRemoval? in
            guard case .removed(let removal) = result, seen.insert(removal.contact.digest + removal.digest).inserted else { return nil }
            return removal
        }
        let receipts = await Self.appendReceipts(removals, to: contacts.receiptsInForce, app: appID, requestID: requestID, logger: logger)
        audit.info("dead tokens reported", [
            ("app", appID), ("request_id", requestID), ("reports", String(parsed.count)),
            ("removed", String(counts["removed"] ?? 0)), ("stale", String(counts["stale"] ?? 0)), ("unknown", String(counts["unknown"] ?? 0)),
            ("quarantined", String(counts["quarantined"] ?? 0)), ("refused", String(refused.count)),
            ("tokens", removals.map(\.token).joined(separator: ",")),
            ("remote", resolved.remoteAddress), ("credential", resolved.grant.credential), ("receipts", receipts),
        ])
        var members = [JSONMember("request_id", .string(requestID))]
        for name in ["removed", "stale", "unknown", "quarantined"] {
            members.append(JSONMember(name, .number(String(counts[name] ?? 0))))
        }
        members.append(JSONMember("refused", .array(refused.map { index, error in
            var fields = [JSONMember("index", .number(String(index))), JSONMember("code", .string(error.code.rawValue)),
                          JSONMember("message", .string(error.message))]
            if let field = error.field { fields.insert(JSONMember("field", .string(field)), at: 2) }
            if let upstreamCode = error.upstreamCode { fields.append(JSONMember("upstream_code", .string(upstreamCode))) }
            return .object(JSONObject(fields))
        })))
        return Responses.json(202, .object(JSONObject(members)), requestID: requestID)
    }

    /// One receipt per removal on the app's evidence trail, when the policy keeps one: the
    /// sequence numbers appended (`-` for none). A receipt that cannot be appended is logged at
    /// error; the removal has happened whatever this says.
    static func appendReceipts(_ removals: [DeadTokenRemoval], to trail: AuditTrail?, app: String, requestID: String,
                               logger: Logger) async -> String {
        guard let trail, !removals.isEmpty else { return "-" }
        var appended: [String] = []
        for removal in removals {
            let outcomes = removal.upstreams.map { name, outcome -> (String, String) in
                if case .failed(let failure) = outcome { return (name, "failed:" + failure.code.rawValue) }
                return (name, outcome.name)
            }
            do {
                let receipt = try await trail.append(kind: "dead_token", app: app, contact: removal.contact, requestID: requestID,
                                                     installations: 1, upstreams: outcomes)
                appended.append(String(receipt.receipt.seq))
            } catch {
                logger.error("dead-token receipt not appended to the evidence trail", [
                    ("app", app), ("token", removal.token), ("request_id", requestID),
                    ("upstreams", ContactRoutes.auditOutcomes(removal.upstreams)), ("error", error.detail),
                ])
            }
        }
        return appended.isEmpty ? "-" : appended.joined(separator: ",")
    }
}
