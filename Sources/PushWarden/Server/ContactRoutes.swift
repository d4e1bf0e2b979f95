import HTTPServer
import PWCore
import Providers
import RedisStores
import Registration
import SessionAuth
import Synchronization

/// The HTTP edge of the server-to-server API (contract section 8), served by the admin listener
/// only (`AdminHandler`; the client listener has no such routes):
///
/// - `GET /v1/apps/{app}/contacts/{contact}/installations`: `200 {"installations": [...]}`;
/// - `DELETE` on the same path: the erasure, `202 {"request_id", "installations", "upstreams"}`,
///   and one audit log line.
///
/// A head is judged in this order, each refusal in the contract's envelope with `X-Request-Id`:
/// the route (`404`, also while the policy names no admin token or no `ContactAdministration` is
/// wired: as if the routes did not exist), the admin token (`401` with `WWW-Authenticate:
/// Bearer`: before anything that would tell a stranger which apps exist; an app's own token sent
/// for any other app, known or not, gets the very same `401`), the app (`404`, so only for the
/// operator's token), the method (`405` with `Allow`), the contact (`400 invalid_request`), then
/// the body (none is taken: `413`). The operations themselves are `ContactAdministration`'s.
final class ContactRoutes: Sendable {
    /// The longest contact id, in bytes of UTF-8 after percent-decoding.
    static let maxContactBytes = 256

    /// The tokens in force, replaced together by a policy reload.
    private let tokens: Mutex<AdminTokens>
    private let administration: (any ContactAdministration)?
    /// The apps in force, looked up on every request so that a reload is seen.
    private let apps: AppTable
    private let metrics: Metrics
    private let logger: Logger
    /// Where the one line per erasure goes (label `audit`), at info, never bounded.
    private let audit: Logger
    /// The signed evidence trail in force (policy `audit`), replaced by a reload.
    private let receipts: Mutex<AuditTrail?>
    /// Names the contact in a receipt as the store names it, so a receipt gives no more away than a key.
    private let digests: KeyDigest

    init(tokens: AdminTokens, administration: (any ContactAdministration)?, apps: AppTable,
         metrics: Metrics, logger: Logger, receipts: AuditTrail? = nil, digests: KeyDigest) {
        self.tokens = Mutex(tokens)
        self.digests = digests
        self.receipts = Mutex(receipts)
        self.administration = administration
        self.apps = apps
        self.metrics = metrics
        self.logger = logger.with(label: "admin-api")
        audit = logger.with(label: "audit")
    }

    /// Puts the evidence trail a reload resolved in force for the erasures that start from now on.
    func replaceReceipts(_ trail: AuditTrail?) {
        receipts.withLock { $0 = trail }
    }

    /// The tokens in force, which the dead-token routes share.
    var tokensInForce: AdminTokens { tokens.withLock { $0 } }

    /// The evidence trail in force, which the dead-token routes append to as well.
    var receiptsInForce: AuditTrail? { receipts.withLock { $0 } }

    /// Puts `tokens` in force for requests whose head arrives from now on.
    func replaceTokens(_ tokens: AdminTokens) {
        self.tokens.withLock { $0 = tokens }
    }

    enum Operation: String, Sendable {
        case list = "contact_installations"
        case erase = "contact_erase"
    }

    /// What `decide` resolved from a head; it travels with the request.
    struct Resolved: Sendable {
        let operation: Operation
        let app: AppRuntime
        let contactID: String
        let administration: any ContactAdministration
        let remoteAddress: String
        /// Which token let the request in (the audit line's `credential`).
        let grant: AdminTokens.Grant
    }

    // MARK: The head

    /// The decision for a head on one of these routes, or nil when the path is none of them.
    func decide(_ head: HTTPRequestHead) -> HeadDecision? {
        guard let (appSegment, contactSegment) = Self.match(head.path) else { return nil }
        let requestID = RequestID.from(head.headers)
        let tokens = tokens.withLock { $0 }
        guard let administration, !tokens.isEmpty else {
            return .respond(Responses.error(ContractError(.notFound, "no such route"), requestID: requestID))
        }
        switch resolve(head, app: appSegment, contact: contactSegment, tokens: tokens, administration: administration) {
        case .success(let resolved):
            return .readBody(limit: 0, context: resolved)
        case .failure(let refusal):
            metrics.request(app: refusal.app, route: refusal.route, status: refusal.error.status)
            var response = Responses.error(refusal.error, requestID: requestID)
            if refusal.error.code == .methodNotAllowed { response.headers.set("Allow", "GET, DELETE") }
            return .respond(response)
        }
    }

    private struct Refusal: Error {
        var error: ContractError
        var app = "-"
        var route = "-"
    }

    private func resolve(_ head: HTTPRequestHead, app appSegment: Substring, contact contactSegment: Substring, tokens: AdminTokens,
                         administration: any ContactAdministration) -> Result<Resolved, Refusal> {
        let id = String(appSegment)
        let grant: AdminTokens.Grant
        switch Self.authorize(head.headers, tokens: tokens, app: id) {
        case .success(let granted):
            grant = granted
        case .failure(let refusal):
            logger.bounded(.warning, "admin token refused", key: refusal.rawValue, [("reason", refusal.rawValue), ("remote", head.remoteAddress),
                                                                                   ("request_id", RequestID.from(head.headers))])
            return .failure(Refusal(error: ContractError(.unauthorized, "a valid admin token is required")))
        }
        // A String-keyed dictionary matches canonically equivalent spellings; the id must be the bytes.
        guard let app = apps[id: id], TextRules.bytesEqual(app.policy.id, id) else {
            return .failure(Refusal(error: ContractError(.notFound, "unknown app")))
        }
        let operation: Operation
        switch head.method {
        case "GET": operation = .list
        case "DELETE": operation = .erase
        default:
            return .failure(Refusal(error: ContractError(.methodNotAllowed, "use GET or DELETE for this route"), app: app.policy.id))
        }
        switch Self.decodeContact(contactSegment) {
        case .success(let contactID):
            return .success(Resolved(operation: operation, app: app, contactID: contactID, administration: administration,
                                     remoteAddress: head.remoteAddress, grant: grant))
        case .failure(let error):
            return .failure(Refusal(error: error, app: app.policy.id, route: operation.rawValue))
        }
    }

    /// Why a request is refused the server-to-server API (its raw value is the log's `reason`;
    /// the caller gets one and the same `401` for each).
    enum AuthorizationRefusal: String, Sendable, Error {
        case missing = "no Authorization header"
        case several = "several Authorization headers"
        case notBearer = "not a Bearer token"
        case wrongToken = "wrong token"
        case anotherApp = "token of another app"
    }

    /// What the request's token reaches, or why it may not call `/v1/apps/{app}/...`: exactly
    /// one `Authorization` field, `Bearer <token>` with the scheme in any case (RFC 9110, section
    /// 11.1), a token in force (compared in constant time), and, for an app's own token, `app`
    /// (as sent, compared by its bytes) being that app.
    static func authorize(_ headers: HTTPHeaders, tokens: AdminTokens, app: String) -> Result<AdminTokens.Grant, AuthorizationRefusal> {
        let values = headers.values("Authorization")
        guard !values.isEmpty else { return .failure(.missing) }
        guard values.count == 1 else { return .failure(.several) }
        guard let presented = SessionVerifier.bearerCredentials(values[0]) else { return .failure(.notBearer) }
        guard let grant = tokens.grant(presented) else { return .failure(.wrongToken) }
        if case .app(let own) = grant, !TextRules.bytesEqual(own, app) { return .failure(.anotherApp) }
        return .success(grant)
    }

    /// `/v1/apps/{app}/contacts/{contact}/installations`, split at `/` byte by byte; the segments
    /// are returned as sent (not decoded).
    static func match(_ path: String) -> (app: Substring, contact: Substring)? {
        let parts = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard parts.count == 7, parts[0].isEmpty, parts[1].elementsEqual("v1".utf8), parts[2].elementsEqual("apps".utf8),
              parts[4].elementsEqual("contacts".utf8), parts[6].elementsEqual("installations".utf8) else { return nil }
        return (Substring(parts[3]), Substring(parts[5]))
    }

    /// The contact id of a path segment, decoded strictly: every byte is an RFC 3986 `pchar`
    /// (unreserved, sub-delims, `:` or `@`) or a `%` with two hex digits; the decoded bytes are
    /// valid UTF-8, 1 to `maxContactBytes` long, not blank, and hold no character a session's
    /// contact may not hold (`TextRules.isForbidden`: controls, `%00` included, format
    /// characters, line separators). Anything else is `400 invalid_request` (field `contact`),
    /// whose message never echoes the id.
    static func decodeContact(_ segment: Substring) -> Result<String, ContractError> {
        func refused(_ message: String) -> Result<String, ContractError> {
            .failure(ContractError(.invalidRequest, message, field: "contact"))
        }
        var bytes: [UInt8] = []
        var rest = segment.utf8[...]
        while let byte = rest.popFirst() {
            if byte == UInt8(ascii: "%") {
                guard let high = rest.popFirst().flatMap(hexValue), let low = rest.popFirst().flatMap(hexValue) else {
                    return refused("contact has a malformed percent-encoding (% must be followed by two hex digits)")
                }
                bytes.append(high << 4 | low)
            } else if isPathCharacter(byte) {
                bytes.append(byte)
            } else {
                return refused("contact must be percent-encoded (RFC 3986: only unreserved characters, sub-delims, : and @ may appear as they are)")
            }
            guard bytes.count <= maxContactBytes else { return refused("contact exceeds \(maxContactBytes) bytes") }
        }
        guard !bytes.isEmpty else { return refused("contact must not be empty") }
        guard let contact = String(validating: bytes, as: UTF8.self) else {
            return refused("contact is not valid UTF-8 once percent-decoded")
        }
        if let scalar = TextRules.firstForbidden(in: contact) {
            return refused("contact must not contain \(TextRules.codePoint(scalar))")
        }
        guard !TextRules.isBlank(contact) else { return refused("contact must not be blank") }
        return .success(contact)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// RFC 3986 `pchar` other than a percent-encoding.
    private static func isPathCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "-._~!$&'()*+,;=:@".utf8.contains(byte)
        }
    }

    // MARK: The request

    func handle(_ resolved: Resolved, requestID: String) async -> HTTPResponse {
        let appID = resolved.app.policy.id
        let response: HTTPResponse
        switch resolved.operation {
        case .list:
            do throws(ContractError) {
                let installations = try await resolved.administration.installations(of: resolved.contactID, in: resolved.app)
                logger.debug("installations listed", [("app", appID), ("contact", Redact.contact(resolved.contactID)),
                                                      ("installations", String(installations.count)), ("request_id", requestID)])
                response = Responses.json(200, .object(Self.listBody(installations)), requestID: requestID)
            } catch {
                response = failed(error, resolved, requestID: requestID)
            }
        case .erase:
            do throws(ContractError) {
                let report = try await resolved.administration.erase(resolved.contactID, in: resolved.app, requestID: requestID)
                let receipt = await receipt(of: report, resolved, requestID: requestID)
                audit.info("contact erased", [
                    ("app", appID), ("contact", Redact.contact(resolved.contactID)), ("installations", String(report.installations)),
                    ("request_id", requestID), ("upstreams", Self.auditOutcomes(report.upstreams)), ("remote", resolved.remoteAddress),
                    ("credential", resolved.grant.credential),
                    ("receipt", receipt.map { String($0.receipt.seq) } ?? "-"),
                ])
                var body = Self.erasureBody(report, requestID: requestID)
                if let receipt { body.members.append(JSONMember("receipt", receipt.json)) }
                response = Responses.json(202, .object(body), requestID: requestID)
            } catch {
                response = failed(error, resolved, requestID: requestID)
            }
        }
        metrics.request(app: appID, route: resolved.operation.rawValue, status: response.status)
        return response
    }

    /// The erasure's receipt on the app's evidence trail, when the policy keeps one. The erasure
    /// has happened whatever this says: a receipt that cannot be appended is logged at error with
    /// its content, and the answer goes without it.
    private func receipt(of report: ErasureReport, _ resolved: Resolved, requestID: String) async -> AuditTrail.Appended? {
        guard let trail = receipts.withLock({ $0 }) else { return nil }
        let appID = resolved.app.policy.id
        let outcomes = report.upstreams.map { name, outcome -> (String, String) in
            if case .failed(let failure) = outcome { return (name, "failed:" + failure.code.rawValue) }
            return (name, outcome.name)
        }
        let contact = digests.contact(resolved.contactID, app: appID)
        do {
            return try await trail.append(kind: "erasure", app: appID, contact: contact, requestID: requestID,
                                          installations: report.installations, upstreams: outcomes)
        } catch {
            logger.error("erasure receipt not appended to the evidence trail", [
                ("app", appID), ("contact", Redact.contact(resolved.contactID)), ("request_id", requestID),
                ("installations", String(report.installations)), ("upstreams", Self.auditOutcomes(report.upstreams)), ("error", error.detail),
            ])
            return nil
        }
    }

    /// An operation that did not run (the store unavailable, say): the contract's envelope, logged.
    private func failed(_ error: ContractError, _ resolved: Resolved, requestID: String) -> HTTPResponse {
        logger.log(error.code == .internal ? .error : .warning, resolved.operation == .erase ? "contact erase failed" : "installations list failed", [
            ("app", resolved.app.policy.id), ("contact", Redact.contact(resolved.contactID)), ("request_id", requestID),
            ("code", error.code.rawValue), ("detail", error.message),
        ])
        return Responses.error(error, requestID: requestID)
    }

    /// `{"installations": [{"token", "platform", "push_service", "upstreams", "first_seen", "last_seen"}]}`.
    static func listBody(_ installations: [InstallationSummary]) -> JSONObject {
        let items = installations.map { installation -> JSONValue in
            .object(JSONObject([
                JSONMember("token", .string(installation.token)),
                JSONMember("platform", .string(installation.platform)),
                JSONMember("push_service", .string(installation.pushService)),
                JSONMember("upstreams", .array(installation.upstreams.map { .string($0) })),
                JSONMember("first_seen", .string(RFC3339.utc(epochMillis: installation.firstSeenMillis))),
                JSONMember("last_seen", .string(RFC3339.utc(epochMillis: installation.lastSeenMillis))),
            ]))
        }
        return JSONObject([JSONMember("installations", .array(items))])
    }

    /// `{"request_id", "installations": N, "upstreams": {name: outcome}}`, and `"failures":
    /// {name: {"code", "message", "upstream_code"?}}` for each upstream whose outcome is `failed`:
    /// one provider's failure does not fail the erasure of the others.
    static func erasureBody(_ report: ErasureReport, requestID: String) -> JSONObject {
        var upstreams = JSONObject()
        var failures = JSONObject()
        for (name, outcome) in report.upstreams {
            upstreams.members.append(JSONMember(name, .string(outcome.name)))
            if case .failed(let failure) = outcome {
                let error = failure.contractError
                var members = [JSONMember("code", .string(error.code.rawValue)), JSONMember("message", .string(error.message))]
                if let upstreamCode = error.upstreamCode { members.append(JSONMember("upstream_code", .string(upstreamCode))) }
                failures.members.append(JSONMember(name, .object(JSONObject(members))))
            }
        }
        var body = JSONObject([
            JSONMember("request_id", .string(requestID)),
            JSONMember("installations", .number(String(report.installations))),
            JSONMember("upstreams", .object(upstreams)),
        ])
        if !failures.members.isEmpty { body.members.append(JSONMember("failures", .object(failures))) }
        return body
    }

    /// `voyado=forwarded,pushnotice=failed:upstream_unavailable`: every upstream's outcome in one
    /// log field.
    static func auditOutcomes(_ outcomes: [(String, UpstreamOutcome)]) -> String {
        outcomes.map { name, outcome in
            if case .failed(let failure) = outcome { return "\(name)=failed:\(failure.code.rawValue)" }
            return "\(name)=\(outcome.name)"
        }.joined(separator: ",")
    }
}
