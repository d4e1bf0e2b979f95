import HTTPServer
import PWCore
import Registration

/// The fleet view of an app's inventory on the admin listener, behind the same admin tokens as
/// the contact routes (`ContactRoutes`, whose tokens in force these read):
///
/// - `GET /v1/apps/{app}/coverage`: `200 {"installations", "contacts", "upstreams": {name:
///   {"installations", "share"}}, "as_of"}`, counted at most once a minute;
/// - `GET /v1/apps/{app}/installations?cursor=C&limit=N`: one page of the export walk,
///   `200 {"installations": [...], "next_cursor": "..." | null}`.
///
/// A head is judged as the contact routes judge theirs: the route (`404`, also while the policy
/// names no admin token), the admin token (`401`), the app (`404`), the method (`405`), the query
/// (`400 invalid_request`), then the body (none is taken: `413`).
final class FleetRoutes: Sendable {
    /// Whose admin tokens are in force (a reload replaces them there).
    private let contacts: ContactRoutes
    private let census: Census
    private let apps: AppTable
    private let metrics: Metrics
    private let logger: Logger
    /// The page size when `limit` is not given.
    static let defaultLimit = 100

    init(contacts: ContactRoutes, census: Census, apps: AppTable, metrics: Metrics, logger: Logger) {
        self.contacts = contacts
        self.census = census
        self.apps = apps
        self.metrics = metrics
        self.logger = logger.with(label: "admin-api")
    }

    enum Operation: String, Sendable {
        case coverage
        case export = "installations_export"
    }

    /// What `decide` resolved from a head; it travels with the request.
    struct Resolved: Sendable {
        let operation: Operation
        let app: AppRuntime
        let cursor: InventoryPosition?
        let limit: Int
    }

    // MARK: The head

    /// The decision for a head on one of these routes, or nil when the path is none of them.
    func decide(_ head: HTTPRequestHead) -> HeadDecision? {
        guard let (appSegment, operation) = Self.match(head.path) else { return nil }
        let requestID = RequestID.from(head.headers)
        let tokens = contacts.tokensInForce
        guard !tokens.isEmpty else {
            return .respond(Responses.error(ContractError(.notFound, "no such route"), requestID: requestID))
        }
        let id = String(appSegment)
        var app = "-"
        let error: ContractError
        switch ContactRoutes.authorize(head.headers, tokens: tokens, app: id) {
        case .failure(let refusal):
            logger.bounded(.warning, "admin token refused", key: refusal.rawValue, [("reason", refusal.rawValue), ("remote", head.remoteAddress),
                                                                                   ("request_id", requestID)])
            error = ContractError(.unauthorized, "a valid admin token is required")
        case .success:
            guard let runtime = apps[id: id], TextRules.bytesEqual(runtime.policy.id, id) else {
                error = ContractError(.notFound, "unknown app")
                break
            }
            app = runtime.policy.id
            guard head.method == "GET" else {
                error = ContractError(.methodNotAllowed, "use GET for this route")
                break
            }
            switch Self.query(head.query, for: operation) {
            case .success(let (cursor, limit)):
                return .readBody(limit: 0, context: Resolved(operation: operation, app: runtime, cursor: cursor, limit: limit))
            case .failure(let refusal):
                error = refusal
            }
        }
        metrics.request(app: app, route: app == "-" ? "-" : operation.rawValue, status: error.status)
        var response = Responses.error(error, requestID: requestID)
        if error.code == .methodNotAllowed { response.headers.set("Allow", "GET") }
        return .respond(response)
    }

    /// `/v1/apps/{app}/coverage` or `/v1/apps/{app}/installations`, split at `/` byte by byte; the
    /// app segment as sent.
    static func match(_ path: String) -> (app: Substring, operation: Operation)? {
        let parts = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1].elementsEqual("v1".utf8), parts[2].elementsEqual("apps".utf8) else { return nil }
        if parts[4].elementsEqual("coverage".utf8) { return (Substring(parts[3]), .coverage) }
        if parts[4].elementsEqual("installations".utf8) { return (Substring(parts[3]), .export) }
        return nil
    }

    /// The export's `cursor` (as a previous page gave it) and `limit` (1 to 1,000, default 100);
    /// the coverage takes no parameter. Any other parameter, or one given twice, is refused.
    static func query(_ raw: String, for operation: Operation) -> Result<(InventoryPosition?, Int), ContractError> {
        func refused(_ field: String, _ message: String) -> Result<(InventoryPosition?, Int), ContractError> {
            .failure(ContractError(.invalidRequest, message, field: field))
        }
        var cursor: InventoryPosition?
        var limit: Int?
        var seen: Set<Substring> = []
        for pair in raw.split(separator: "&", omittingEmptySubsequences: true) {
            let name = pair.prefix { $0 != "=" }
            let value = pair.dropFirst(name.count + 1)
            guard operation == .export, name == "cursor" || name == "limit" else {
                return refused("query", "unknown query parameter (this route takes " + (operation == .export ? "cursor and limit)" : "none)"))
            }
            guard seen.insert(name).inserted else { return refused(String(name), "\(name) is given more than once") }
            if name == "limit" {
                guard value.utf8.count <= 4, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let number = Int(value),
                      (1...Census.maxPage).contains(number) else {
                    return refused("limit", "limit must be an integer from 1 to \(Census.maxPage)")
                }
                limit = number
            } else if !value.isEmpty {
                guard let position = decodeCursor(value) else {
                    return refused("cursor", "cursor is not one a previous page gave (pass next_cursor as it came)")
                }
                cursor = position
            }
        }
        return .success((cursor, limit ?? defaultLimit))
    }

    /// A cursor: base64url of `1:<token digest>:<contact digest>`, where the walk stands.
    static func encodeCursor(_ position: InventoryPosition) -> String {
        Base64URL.encode(Array(("1:" + position.token.digest + ":" + position.contact.digest).utf8))
    }

    static func decodeCursor(_ text: Substring) -> InventoryPosition? {
        guard text.utf8.count <= 200, let bytes = Base64URL.decode(text), let plain = String(validating: bytes, as: UTF8.self) else { return nil }
        let parts = plain.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "1", InventoryPosition.isDigest(parts[1]), InventoryPosition.isDigest(parts[2]) else { return nil }
        return InventoryPosition(token: TokenKeys(digest: String(parts[1])), contact: ContactKeys(digest: String(parts[2])))
    }

    // MARK: The request

    func handle(_ resolved: Resolved, requestID: String) async -> HTTPResponse {
        let appID = resolved.app.policy.id
        let response: HTTPResponse
        do throws(StoreError) {
            switch resolved.operation {
            case .coverage:
                let coverage = try await census.coverage(of: resolved.app)
                response = Responses.json(200, .object(Self.coverageBody(coverage)), requestID: requestID)
            case .export:
                let (installations, next) = try await census.export(resolved.app, after: resolved.cursor, limit: resolved.limit)
                logger.debug("installations exported", [("app", appID), ("installations", String(installations.count)), ("request_id", requestID)])
                response = Responses.json(200, .object(Self.exportBody(installations, next: next)), requestID: requestID)
            }
        } catch {
            logger.bounded(.warning, "inventory store unavailable", key: "fleet" + appID, [("app", appID), ("error", error.detail),
                                                                                         ("request_id", requestID)])
            response = Responses.error(ContractError(.storeUnavailable, "the store did not answer; try again", retryAfter: 1), requestID: requestID)
        }
        metrics.request(app: appID, route: resolved.operation.rawValue, status: response.status)
        return response
    }

    /// `{"installations", "contacts", "upstreams": {name: {"installations", "share"}}, "as_of"}`.
    static func coverageBody(_ coverage: CoverageSnapshot) -> JSONObject {
        let upstreams = coverage.upstreams.map { name, count in
            JSONMember(name, .object(JSONObject([
                JSONMember("installations", .number(String(count))),
                JSONMember("share", .number(number(coverage.share(count)))),
            ])))
        }
        return JSONObject([
            JSONMember("installations", .number(String(coverage.installations))),
            JSONMember("contacts", .number(String(coverage.contacts))),
            JSONMember("upstreams", .object(JSONObject(upstreams))),
            JSONMember("as_of", .string(RFC3339.utc(epochMillis: coverage.asOfMillis))),
        ])
    }

    /// A share as JSON writes it: `1`, `0`, `0.75`.
    private static func number(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }

    /// `{"installations": [{"contact_id", "token", "platform", "push_service", "upstreams",
    /// "first_seen", "last_seen"}], "next_cursor"}`.
    static func exportBody(_ installations: [ExportedInstallation], next: InventoryPosition?) -> JSONObject {
        let items = installations.map { installation -> JSONValue in
            let summary = installation.summary
            return .object(JSONObject([
                JSONMember("contact_id", installation.contactID.map { .string($0) } ?? .null),
                JSONMember("token", .string(summary.token)),
                JSONMember("platform", .string(summary.platform)),
                JSONMember("push_service", .string(summary.pushService)),
                JSONMember("upstreams", .array(summary.upstreams.map { .string($0) })),
                JSONMember("first_seen", .string(RFC3339.utc(epochMillis: summary.firstSeenMillis))),
                JSONMember("last_seen", .string(RFC3339.utc(epochMillis: summary.lastSeenMillis))),
            ]))
        }
        return JSONObject([
            JSONMember("installations", .array(items)),
            JSONMember("next_cursor", next.map { .string(encodeCursor($0)) } ?? .null),
        ])
    }
}
