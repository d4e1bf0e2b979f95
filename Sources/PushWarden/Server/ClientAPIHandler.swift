import ClientAPI
import HTTPClient
import HTTPServer
import Loops
import PWCore
import PWCrypto
import PWPolicy
import Providers
import RedisStores
import Registration
import SessionAuth
import Synchronization

/// The HTTP edge of the client API, top to bottom:
///
/// 1. `decide` (on the connection's loop, before the body is read): route, app, method and media
///    type, and the app's body cap.
/// 2. `start` (on the same loop, the body read): authenticate the session (decided on the loop,
///    except for an introspected token the cache does not know: the request then continues
///    on its loop when the endpoint answers), validate the body against the contract and apply
///    the per-contact rate limit; then hand the accepted request to the `Registrar` (the
///    registration operations beneath this layer) and answer with its outcomes. A registration
///    every upstream already has is answered on the loop.
///
/// Every refusal is a `ContractError` rendered in the contract's envelope; every answer is
/// counted in metrics here.
public final class ClientAPIHandler: HTTPHandler {
    /// The apps in force. A request resolves its `AppRuntime` once, in `decide`, and keeps it.
    let apps: AppTable
    let registrar: Registrar
    let rateLimiter: RateLimiter
    let metrics: Metrics
    let logger: Logger
    /// The evidence trail back-channel logouts append to (policy `audit`), replaced by a reload.
    let receipts = Mutex<AuditTrail?>(nil)

    init(apps: AppTable, registrar: Registrar, rateLimiter: RateLimiter, metrics: Metrics, logger: Logger) {
        self.apps = apps
        self.registrar = registrar
        self.rateLimiter = rateLimiter
        self.metrics = metrics
        self.logger = logger
    }

    // MARK: 1. Before the body

    public func decide(_ head: HTTPRequestHead) -> HeadDecision {
        switch resolve(head) {
        case .success(let resolved):
            // The route and app travel with the request: nothing resolves them again.
            return .readBody(limit: resolved.bodyLimit, context: resolved)
        case .failure(let error):
            let requestID = RequestID.from(head.headers)
            metrics.request(app: "-", route: "-", status: error.status)
            return .respond(Responses.error(error, requestID: requestID))
        }
    }

    public func payloadTooLarge(_ head: HTTPRequestHead, context: (any Sendable)?) -> HTTPResponse {
        let resolved = context as? Resolved
        let error = ContractError(.payloadTooLarge, "request body exceeds \(resolved?.bodyLimit ?? 0) bytes")
        metrics.request(app: resolved?.app.policy.id ?? "-", route: resolved?.route.rawValue ?? "-", status: error.status)
        return Responses.error(error, requestID: RequestID.from(head.headers))
    }

    /// A head the server refused before routing (framing, syntax): `invalid_request` in the
    /// envelope, with the server's status (400, or 501 for an unsupported transfer coding, for
    /// which the contract has no code of its own).
    public func refuse(_ head: HTTPRequestHead, _ refusal: HTTPRefusal) -> HTTPResponse {
        metrics.request(app: "-", route: "-", status: refusal.status)
        return Responses.refusal(refusal, requestID: RequestID.from(head.headers))
    }

    // MARK: 2. The request, on the loop that read it

    /// Runs on the request's loop: authentication, validation and, for a registration, the dedupe
    /// lookups. A registration every upstream already has is answered right here, without a task
    /// or a thread hop: the hot path of a registration storm. Everything else continues in a
    /// task, which prefers the request's loop: its Redis commands go over the loop's own
    /// connection and it resumes there, instead of crossing to the pool and back.
    public func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder) {
        let requestID = RequestID.from(request.head.headers)
        // `decide` resolved the route and app; the server hands them back with every request it reads.
        guard let resolved = request.context as? Resolved else {
            let error = ContractError(.internal, "request without the route its head resolved to")
            responder.respond(answer(.failure(error), app: "-", route: "-", requestID: requestID))
            return
        }
        if resolved.route == .backchannelLogout {
            // The identity provider calls, not a client: no client session, its own checks.
            backchannelLogout(request, resolved.app, requestID: requestID, on: loop, responder: responder)
            return
        }
        switch resolved.app.sessions.check(request.head.headers) {
        case .decided(let session):
            authenticated(request, resolved, session, requestID: requestID, on: loop, responder: responder)
        case .lookUp(let lookup):
            // An introspected token the cache does not know: the endpoint's answer continues the request here.
            lookup.run(on: loop) { [self] session in
                authenticated(request, resolved, session, requestID: requestID, on: loop, responder: responder)
            }
        }
    }

    /// The request once its session is known: the body, then the rate limit, then the route.
    private func authenticated(_ request: HTTPRequest, _ resolved: Resolved, _ session: Result<Session, SessionRefusal>, requestID: String,
                               on loop: EventLoop, responder: HTTPResponder) {
        let accepted: Accepted
        switch accept(request, resolved, session, requestID: requestID, on: loop) {
        case .failure(let refusal):
            responder.respond(answer(.failure(refusal.error), app: refusal.app, route: refusal.route, requestID: requestID))
            return
        case .success(let value):
            accepted = value
        }
        if case .register(let installation) = accepted.body {
            // The rate limit goes to Redis with the registration's dedupe lookups: one round trip.
            register(installation, accepted, on: loop, responder: responder)
            return
        }
        // With Redis the check is a script on this loop's connection: no task, no thread hop.
        rateLimiter.admit(app: accepted.app.policy, route: accepted.routeLabel, contactID: accepted.session.contactID,
                          on: loop) { [self] refusal in
            if let refusal {
                responder.respond(answer(.failure(refusal), accepted))
                return
            }
            proceed(accepted, on: loop, responder: responder)
        }
    }

    /// An admitted request, by route.
    private func proceed(_ accepted: Accepted, on loop: EventLoop, responder: HTTPResponder) {
        switch accepted.body {
        case .register(let installation):
            register(installation, accepted, on: loop, responder: responder)
        case .unregister(let pushToken):
            Task(executorPreference: loop) { [self] in
                let outcomes = await registrar.unregister(pushToken, from: accepted.origin)
                responder.respond(answer(upstreams(outcomes, accepted), accepted))
            }
        case .events(let events):
            Task(executorPreference: loop) { [self] in
                let outcomes = await registrar.report(events, from: accepted.origin)
                let body = upstreams(outcomes, accepted).map { body in
                    var body = body
                    body.members.insert(JSONMember("accepted", .number(String(events.count))), at: 0)
                    return body
                }
                responder.respond(answer(body, accepted))
            }
        }
    }

    /// A registration, handed to the registrar once with its rate limit: it answers a dedupe hit
    /// right here on the loop, and anything else from a task of its own.
    private func register(_ installation: Installation, _ accepted: Accepted, on loop: EventLoop, responder: HTTPResponder) {
        let admission = rateLimiter.admission(app: accepted.app.policy, route: accepted.routeLabel, contactID: accepted.session.contactID)
        registrar.register(installation, from: accepted.origin, on: loop, admission: admission) { [self] result in
            switch result {
            case .success(let outcomes): responder.respond(answer(upstreams(outcomes, accepted), accepted))
            case .failure(let refusal): responder.respond(answer(.failure(refusal), accepted))
            }
        }
    }

    /// A request that passed routing, authentication and body validation (the rate limit comes next).
    /// A class: the request's closures and tasks share it instead of each copying its fields.
    final class Accepted: Sendable {
        enum Body: Sendable {
            case register(Installation)
            case unregister(pushToken: String)
            case events([EngagementEvent])
        }

        let app: AppRuntime
        let route: Route
        let session: Session
        let headers: HTTPHeaders
        let requestID: String
        let body: Body
        /// The loop that read the request: its tasks run there, and its store and upstream work
        /// goes over that loop's own connections.
        let loop: EventLoop

        init(app: AppRuntime, route: Route, session: Session, headers: HTTPHeaders, requestID: String, body: Body, loop: EventLoop) {
            self.app = app
            self.route = route
            self.session = session
            self.headers = headers
            self.requestID = requestID
            self.body = body
            self.loop = loop
        }

        var appLabel: String { app.policy.id }
        var routeLabel: String { route.rawValue }
        var origin: Registrar.Origin {
            Registrar.Origin(app: app, context: CallContext(contactID: session.contactID, clientHeaders: headers), requestID: requestID,
                             loop: loop, sessionID: session.sessionID)
        }
    }

    struct Refusal: Error {
        var error: ContractError
        var app = "-"
        var route = "-"
    }

    private func accept(_ request: HTTPRequest, _ resolved: Resolved, _ authenticated: Result<Session, SessionRefusal>,
                        requestID: String, on loop: EventLoop) -> Result<Accepted, Refusal> {
        let (app, route) = (resolved.app, resolved.route)
        do throws(ContractError) {
            let session = try self.session(authenticated, app: app, requestID: requestID)
            let client = app.policy.client
            let body: Accepted.Body
            switch route {
            case .register:
                body = .register(try RequestValidator.installation(body: request.body, policy: client, contactID: session.contactID))
            case .unregister:
                body = .unregister(pushToken: try RequestValidator.unregister(body: request.body, policy: client, contactID: session.contactID))
            case .events:
                body = .events(try RequestValidator.events(body: request.body, policy: client, contactID: session.contactID))
            case .backchannelLogout:
                throw ContractError(.internal, "back-channel logout routed as a client request")
            }
            return .success(Accepted(app: app, route: route, session: session, headers: request.head.headers,
                                     requestID: requestID, body: body, loop: loop))
        } catch {
            return .failure(Refusal(error: error, app: app.policy.id, route: route.rawValue))
        }
    }

    /// The `upstreams` map of a 202, or the primary's failure as the contract's error.
    private func upstreams(_ outcomes: [(String, UpstreamOutcome)], _ accepted: Accepted) -> Result<JSONObject, ContractError> {
        Result { () throws(ContractError) in try accepted.app.answer(outcomes, logger: logger, requestID: accepted.requestID) }
    }

    private func answer(_ result: Result<JSONObject, ContractError>, _ accepted: Accepted) -> HTTPResponse {
        answer(result, app: accepted.appLabel, route: accepted.routeLabel, requestID: accepted.requestID)
    }

    /// The 202 with `request_id` first, or the contract's envelope; counted either way.
    private func answer(_ result: Result<JSONObject, ContractError>, app: String, route: String, requestID: String) -> HTTPResponse {
        let response: HTTPResponse
        switch result {
        case .success(let members):
            response = Responses.accepted(members, requestID: requestID)
        case .failure(let error):
            if error.code == .internal {
                logger.bounded(.error, "internal error", key: app, [("request_id", requestID), ("detail", error.message)])
            }
            response = Responses.error(error, requestID: requestID)
        }
        metrics.request(app: app, route: route, status: response.status)
        return response
    }

    // MARK: Routing

    enum Route: String, Sendable {
        case register, unregister, events
        case backchannelLogout = "backchannel_logout"
    }

    /// A request's route and app, resolved once from its head.
    struct Resolved: Sendable {
        let app: AppRuntime
        let route: Route

        /// A client's bodies are capped by the policy; an identity provider's logout by its own bound.
        var bodyLimit: Int { route == .backchannelLogout ? Self.logoutBodyLimit : app.policy.client.maxBody }

        /// 25 KiB: a form with one logout token of at most `SessionVerifier.maxTokenBytes`, even
        /// percent-encoded whole.
        static let logoutBodyLimit = 3 * SessionVerifier.maxTokenBytes + 1024
    }

    /// `/v1/apps/{app}/installations`, `/v1/apps/{app}/installations/unregister`, `/v1/apps/{app}/events`,
    /// matched byte by byte, once per request (in `decide`).
    func resolve(_ head: HTTPRequestHead) -> Result<Resolved, ContractError> {
        let path = head.path.utf8
        guard path.starts(with: Self.prefix) else { return .failure(ContractError(.notFound, "no such route")) }
        let afterPrefix = path.index(path.startIndex, offsetBy: Self.prefix.count)
        guard let slash = path[afterPrefix...].firstIndex(of: UInt8(ascii: "/")) else {
            return .failure(ContractError(.notFound, "no such route"))
        }
        let rest = path[slash...]
        let route: Route
        if rest.elementsEqual(Self.installations) {
            route = .register
        } else if rest.elementsEqual(Self.events) {
            route = .events
        } else if rest.elementsEqual(Self.unregisterPath) {
            route = .unregister
        } else if rest.elementsEqual(Self.backchannelLogoutPath) {
            route = .backchannelLogout
        } else {
            return .failure(ContractError(.notFound, "no such route"))
        }
        // A String-keyed dictionary matches canonically equivalent spellings; the id must be the bytes.
        let id = String(Substring(path[afterPrefix..<slash]))
        guard let app = apps[id: id], TextRules.bytesEqual(app.policy.id, id) else { return .failure(ContractError(.notFound, "unknown app")) }
        guard head.method == "POST" else {
            return .failure(ContractError(.methodNotAllowed, "use POST for this route"))
        }
        if route == .backchannelLogout {
            guard Self.isForm(head.headers["Content-Type"]) else {
                return .failure(ContractError(.unsupportedMediaType, "Content-Type must be application/x-www-form-urlencoded"))
            }
            return .success(Resolved(app: app, route: route))
        }
        guard Self.isJSON(head.headers["Content-Type"]) else {
            return .failure(ContractError(.unsupportedMediaType, "Content-Type must be application/json"))
        }
        return .success(Resolved(app: app, route: route))
    }

    private static let prefix = Array("/v1/apps/".utf8)
    private static let installations = Array("/installations".utf8)
    private static let events = Array("/events".utf8)
    private static let unregisterPath = Array("/installations/unregister".utf8)
    private static let backchannelLogoutPath = Array("/backchannel-logout".utf8)

    /// `application/json`, any case, optionally followed by parameters (`; charset=utf-8`).
    static func isJSON(_ contentType: String?) -> Bool { isMediaType(contentType, "application/json") }

    /// `application/x-www-form-urlencoded`, any case, optionally followed by parameters.
    static func isForm(_ contentType: String?) -> Bool { isMediaType(contentType, "application/x-www-form-urlencoded") }

    private static func isMediaType(_ contentType: String?, _ type: StaticString) -> Bool {
        guard let contentType else { return false }
        let expected = UnsafeBufferPointer(start: type.utf8Start, count: type.utf8CodeUnitCount)
        var utf8 = Substring(contentType).utf8.drop { $0 == 0x20 || $0 == 0x09 }
        guard utf8.count >= expected.count else { return false }
        for byte in expected {
            let c = utf8.removeFirst()
            let lower = (c >= 0x41 && c <= 0x5A) ? c | 0x20 : c
            guard lower == byte else { return false }
        }
        let rest = utf8.drop { $0 == 0x20 || $0 == 0x09 }
        return rest.isEmpty || rest.first == UInt8(ascii: ";")
    }

    // MARK: Session

    /// How long a client is told to wait when the introspection endpoint cannot answer.
    static let authRetryAfterSeconds = 5

    /// The session, or the contract's refusal of its absence (logged; reasons never hold the token).
    private func session(_ authenticated: Result<Session, SessionRefusal>, app: AppRuntime, requestID: String) throws(ContractError) -> Session {
        switch authenticated {
        case .success(let session):
            return session
        case .failure(.refused(let failure)):
            metrics.authFailure(app: app.policy.id)
            logger.bounded(.info, "session refused", key: app.policy.id + "\u{0}" + failure.kind,
                           [("app", app.policy.id), ("request_id", requestID), ("reason", failure.reason)])
            throw ContractError(.unauthorized, "a valid session is required")
        case .failure(.unavailable(let reason)):
            logger.bounded(.warning, "session not checked: the introspection endpoint did not answer", key: app.policy.id,
                           [("app", app.policy.id), ("request_id", requestID), ("reason", reason)])
            throw ContractError(.authUnavailable, "the session cannot be checked right now", retryAfter: Self.authRetryAfterSeconds)
        }
    }
}

/// The JSON responses every route shares.
enum Responses {
    static func json(_ status: Int, _ body: JSONValue, requestID: String, extra: HTTPHeaders = [:]) -> HTTPResponse {
        var headers = headers(requestID: requestID)
        for field in extra { headers.add(field.name, field.value) }
        return HTTPResponse(status: status, headers: headers, body: body.encoded())
    }

    /// The 202: `request_id` first, then `members`, written straight into the body (the hot
    /// path's answer: no intermediate JSON values).
    static func accepted(_ members: JSONObject, requestID: String) -> HTTPResponse {
        var body: [UInt8] = []
        body.reserveCapacity(128 + requestID.utf8.count)
        body.append(contentsOf: #"{"request_id":"#.utf8)
        JSONValue.writeString(requestID, into: &body)
        for member in members.members {
            body.append(UInt8(ascii: ","))
            JSONValue.writeString(member.key, into: &body)
            body.append(UInt8(ascii: ":"))
            member.value.write(into: &body)
        }
        body.append(UInt8(ascii: "}"))
        return HTTPResponse(status: 202, headers: headers(requestID: requestID), body: body)
    }

    /// The fields every JSON answer carries, with room for the few an error adds.
    private static func headers(requestID: String) -> HTTPHeaders {
        var headers = HTTPHeaders()
        headers.reserveCapacity(5)
        headers.add("Content-Type", "application/json")
        headers.add("X-Request-Id", requestID)
        headers.add("Cache-Control", "no-store")
        return headers
    }

    static func error(_ error: ContractError, requestID: String) -> HTTPResponse {
        var headers = headers(requestID: requestID)
        if let retryAfter = error.retryAfter { headers.add("Retry-After", String(retryAfter)) }
        if error.code == .methodNotAllowed { headers.add("Allow", "POST") }
        if error.code == .unauthorized { headers.add("WWW-Authenticate", "Bearer") }
        return HTTPResponse(status: error.status, headers: headers, body: error.envelope(requestID: requestID))
    }

    /// The server's refusal of a malformed head: `invalid_request` with the server's status.
    static func refusal(_ refusal: HTTPRefusal, requestID: String) -> HTTPResponse {
        var response = error(ContractError(.invalidRequest, refusal.message), requestID: requestID)
        response.status = refusal.status
        return response
    }
}
