import ClientAPI
import HTTPClient
import HTTPServer
import PWCore
import PWCrypto
import PWPolicy
import SessionAuth
import Synchronization

/// The whole client request path, top to bottom:
///
/// 1. `decide` (on a server thread, before the body is read): route, app, method and media type,
///    and the app's body cap.
/// 2. `handle` (on Swift concurrency, the connection suspended): authenticate the session, apply
///    the per-contact rate limit, validate the body against the contract, then register,
///    unregister or report events at each upstream through dedupe, and answer.
///
/// Every refusal is a `ContractError` rendered in the contract's envelope.
public struct ClientAPIHandler: HTTPHandler {
    let apps: [String: AppRuntime]
    let deduper: Deduper
    let identities: IdentityStore
    let rateLimiter: RateLimiter
    let metrics: Metrics
    let logger: Logger

    init(apps: [String: AppRuntime], deduper: Deduper, identities: IdentityStore, rateLimiter: RateLimiter, metrics: Metrics, logger: Logger) {
        self.apps = apps
        self.deduper = deduper
        self.identities = identities
        self.rateLimiter = rateLimiter
        self.metrics = metrics
        self.logger = logger
    }

    // MARK: 1. Before the body

    public func decide(_ head: HTTPRequestHead) -> HeadDecision {
        switch resolve(head) {
        case .success(let (app, _)):
            return .readBody(limit: app.policy.client.maxBody)
        case .failure(let error):
            let requestID = RequestID.from(head.headers)
            metrics.request(app: "-", route: "-", status: error.status)
            return .respond(Responses.error(error, requestID: requestID))
        }
    }

    public func payloadTooLarge(_ head: HTTPRequestHead) -> HTTPResponse {
        let limit = (try? resolve(head).get())?.0.policy.client.maxBody ?? 0
        let error = ContractError(.payloadTooLarge, "request body exceeds \(limit) bytes")
        let (app, route) = labels(head)
        metrics.request(app: app, route: route, status: error.status)
        return Responses.error(error, requestID: RequestID.from(head.headers))
    }

    // MARK: 2. The request

    public func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let requestID = RequestID.from(request.head.headers)
        let response: HTTPResponse
        var appLabel = "-", routeLabel = "-"
        do throws(ContractError) {
            let (app, route) = try resolve(request.head).get()
            appLabel = app.policy.id
            routeLabel = route.rawValue
            let session = try authenticate(request.head.headers, app: app, requestID: requestID)
            try rateLimiter.admit(app: app.policy, route: route.rawValue, contactID: session.contactID)
            let client = app.policy.client
            let result: JSONObject
            switch route {
            case .register:
                let installation = try RequestValidator.installation(body: request.body, policy: client, contactID: session.contactID)
                result = try await register(installation, session: session, headers: request.head.headers, app: app, requestID: requestID)
            case .unregister:
                let pushToken = try RequestValidator.unregister(body: request.body, policy: client, contactID: session.contactID)
                result = try await unregister(pushToken, session: session, headers: request.head.headers, app: app, requestID: requestID)
            case .events:
                let events = try RequestValidator.events(body: request.body, policy: client, contactID: session.contactID)
                result = try await report(events, session: session, headers: request.head.headers, app: app, requestID: requestID)
            }
            var body = JSONObject([JSONMember("request_id", .string(requestID))])
            body.members.append(contentsOf: result.members)
            response = Responses.json(202, .object(body), requestID: requestID)
        } catch {
            if error.code == .internal {
                logger.error("internal error", [("request_id", requestID), ("detail", error.message)])
            }
            response = Responses.error(error, requestID: requestID)
        }
        metrics.request(app: appLabel, route: routeLabel, status: response.status)
        return response
    }

    // MARK: Routing

    enum Route: String, Sendable {
        case register, unregister, events
    }

    /// `/v1/apps/{app}/installations`, `/v1/apps/{app}/installations/unregister`, `/v1/apps/{app}/events`,
    /// matched byte by byte (this runs twice per request).
    func resolve(_ head: HTTPRequestHead) -> Result<(AppRuntime, Route), ContractError> {
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
        } else {
            return .failure(ContractError(.notFound, "no such route"))
        }
        guard let app = apps[String(Substring(path[afterPrefix..<slash]))] else { return .failure(ContractError(.notFound, "unknown app")) }
        guard head.method == "POST" else {
            return .failure(ContractError(.methodNotAllowed, "use POST for this route"))
        }
        guard Self.isJSON(head.headers["Content-Type"]) else {
            return .failure(ContractError(.unsupportedMediaType, "Content-Type must be application/json"))
        }
        return .success((app, route))
    }

    private static let prefix = Array("/v1/apps/".utf8)
    private static let installations = Array("/installations".utf8)
    private static let events = Array("/events".utf8)
    private static let unregisterPath = Array("/installations/unregister".utf8)

    /// `application/json`, any case, optionally followed by parameters (`; charset=utf-8`).
    static func isJSON(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        let expected = "application/json".utf8
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

    private func labels(_ head: HTTPRequestHead) -> (String, String) {
        guard let (app, route) = try? resolve(head).get() else { return ("-", "-") }
        return (app.policy.id, route.rawValue)
    }

    // MARK: Session

    private func authenticate(_ headers: HTTPHeaders, app: AppRuntime, requestID: String) throws(ContractError) -> Session {
        switch app.sessions.authenticate(headers) {
        case .success(let session):
            return session
        case .failure(let failure):
            metrics.authFailure(app: app.policy.id)
            logger.info("session refused", [("app", app.policy.id), ("request_id", requestID), ("reason", failure.reason)])
            throw ContractError(.unauthorized, "a valid session is required")
        }
    }

    // MARK: Register

    private func register(_ installation: Installation, session: Session, headers: HTTPHeaders, app: AppRuntime,
                          requestID: String) async throws(ContractError) -> JSONObject {
        let context = CallContext(contactID: session.contactID, clientHeaders: headers)
        // Each provider's own rules first: when the primary would refuse, nothing is forwarded.
        var refusals: [String: ContractError] = [:]
        for caller in app.upstreams where caller.adapter.accepts(installation) {
            do throws(ContractError) {
                try caller.adapter.validate(installation, context: context)
            } catch {
                if caller.policy.role == .primary { throw error }
                refusals[caller.adapter.name] = error
            }
        }
        let refused = refusals
        let deduper = self.deduper
        let identities = self.identities
        let metrics = self.metrics
        let refreshAfter = app.policy.dedupe.refreshAfterSeconds
        let appID = app.policy.id
        let outcomes = await app.eachUpstream { caller -> UpstreamOutcome in
            let adapter = caller.adapter
            guard adapter.accepts(installation) else { return .skipped }
            if let refusal = refused[adapter.name] { return .failed(refusal) }
            let keys = DedupeKeys(app: appID, upstream: adapter.name, pushToken: installation.pushToken)
            let fingerprint = Fingerprint.of(installation, contactID: context.contactID, settings: adapter.settingsDigest)
            do throws(ContractError) {
                let outcome = try await deduper.register(
                    keys: keys, fingerprint: fingerprint, refreshAfterSeconds: refreshAfter,
                    lockMillis: caller.budgetMillis + 1000, app: appID
                ) { () async throws(ContractError) in
                    try await Self.forward(installation, context: context, caller: caller, identities: identities, app: appID)
                }
                if outcome == .unchanged {
                    metrics.dedupeHit(app: appID, upstream: adapter.name)
                    return .unchanged
                }
                return .forwarded
            } catch {
                return .failed(error)
            }
        }
        let answer = try app.answer(outcomes, logger: logger, requestID: requestID)
        if let previous = installation.previousPushToken {
            let forwarded = Set(outcomes.compactMap { name, outcome in outcome.isForwarded ? name : nil })
            await retire(previous, replacedBy: installation, context: context, upstreams: forwarded, app: app, requestID: requestID)
        }
        logger.debug("registered", [("app", appID), ("request_id", requestID), ("token", Redact.token(installation.pushToken)),
                                    ("contact", Redact.contact(context.contactID))])
        return answer
    }

    /// One registration at one upstream: the identity it handed back before (if it hands any
    /// back), the call, and the identity to keep.
    private static func forward(_ installation: Installation, context: CallContext, caller: UpstreamCaller,
                                identities: IdentityStore, app: String) async throws(ContractError) {
        let adapter = caller.adapter
        var identity: UpstreamIdentity?
        var previous: UpstreamIdentity?
        if adapter.keepsIdentity {
            identity = await identities.get(app: app, upstream: adapter.name, pushToken: installation.pushToken)
            if let previousToken = installation.previousPushToken {
                previous = await identities.get(app: app, upstream: adapter.name, pushToken: previousToken)
            }
        }
        let request = try adapter.registerRequest(installation, context: context, identity: identity, previous: previous)
        var response: HTTPClientResponse
        do throws(ContractError) {
            response = try await caller.call(request, operation: .register)
        } catch where error.upstreamCode == UpstreamCaller.staleIdentityCode && previous != nil {
            // The previous token's identity is no good (moved, or another person's): forget it and
            // register the new token on its own.
            if let previousToken = installation.previousPushToken {
                await identities.delete(app: app, upstream: adapter.name, pushToken: previousToken)
            }
            previous = nil
            let fresh = try adapter.registerRequest(installation, context: context, identity: identity, previous: nil)
            response = try await caller.call(fresh, operation: .register)
        }
        if adapter.keepsIdentity,
           let kept = adapter.identity(after: response, installation: installation, current: identity, previous: previous) {
            await identities.set(kept, app: app, upstream: adapter.name, pushToken: installation.pushToken)
            // The token moved (another device, platform or environment): remove what it leaves behind.
            if let identity, identity != kept,
               let cleanup = adapter.supersededRequest(pushToken: installation.pushToken, replaced: identity, by: kept, context: context) {
                _ = try? await caller.call(cleanup, operation: .unregister)
            }
        }
    }

    /// After a rotation the old token is dead: forget it, and let each provider that took the new
    /// one retire the old one (by default an unregister), best effort.
    private func retire(_ previous: String, replacedBy installation: Installation, context: CallContext, upstreams: Set<String>,
                        app: AppRuntime, requestID: String) async {
        let deduper = self.deduper
        let identities = self.identities
        let appID = app.policy.id
        let outcomes = await app.eachUpstream { caller -> UpstreamOutcome in
            let adapter = caller.adapter
            guard upstreams.contains(adapter.name) else { return .skipped }
            await deduper.forget(keys: DedupeKeys(app: appID, upstream: adapter.name, pushToken: previous), app: appID)
            let identity = adapter.keepsIdentity ? await identities.get(app: appID, upstream: adapter.name, pushToken: previous) : nil
            var outcome = UpstreamOutcome.skipped
            if let request = adapter.retireRequest(previousToken: previous, installation: installation, context: context, identity: identity) {
                do throws(ContractError) {
                    _ = try await caller.call(request, operation: .unregister)
                    outcome = .forwarded
                } catch {
                    outcome = .failed(error)
                }
            }
            if adapter.keepsIdentity { await identities.delete(app: appID, upstream: adapter.name, pushToken: previous) }
            return outcome
        }
        for (name, outcome) in outcomes {
            if case .failed(let error) = outcome {
                logger.warning("could not remove the rotated token", [("app", appID), ("upstream", name), ("request_id", requestID),
                                                                      ("token", Redact.token(previous)), ("code", error.code.rawValue)])
            }
        }
    }

    // MARK: Unregister

    private func unregister(_ pushToken: String, session: Session, headers: HTTPHeaders, app: AppRuntime,
                            requestID: String) async throws(ContractError) -> JSONObject {
        let context = CallContext(contactID: session.contactID, clientHeaders: headers)
        let deduper = self.deduper
        let identities = self.identities
        let appID = app.policy.id
        let outcomes = await app.eachUpstream { caller -> UpstreamOutcome in
            let adapter = caller.adapter
            await deduper.forget(keys: DedupeKeys(app: appID, upstream: adapter.name, pushToken: pushToken), app: appID)
            let identity = adapter.keepsIdentity ? await identities.get(app: appID, upstream: adapter.name, pushToken: pushToken) : nil
            do throws(ContractError) {
                guard let request = try adapter.unregisterRequest(pushToken: pushToken, context: context, identity: identity) else {
                    return .skipped
                }
                _ = try await caller.call(request, operation: .unregister)
                if adapter.keepsIdentity { await identities.delete(app: appID, upstream: adapter.name, pushToken: pushToken) }
                return .forwarded
            } catch {
                return .failed(error)
            }
        }
        return try app.answer(outcomes, logger: logger, requestID: requestID)
    }

    // MARK: Events

    private func report(_ events: [EngagementEvent], session: Session, headers: HTTPHeaders, app: AppRuntime,
                        requestID: String) async throws(ContractError) -> JSONObject {
        let context = CallContext(contactID: session.contactID, clientHeaders: headers)
        let outcomes = await app.eachUpstream { caller -> UpstreamOutcome in
            guard caller.adapter.acceptsEvents else { return .skipped }
            do throws(ContractError) {
                _ = try await caller.call(caller.adapter.eventsRequest(events, context: context), operation: .events)
                return .forwarded
            } catch {
                return .failed(error)
            }
        }
        var answer = try app.answer(outcomes, logger: logger, requestID: requestID)
        answer.members.insert(JSONMember("accepted", .number(String(events.count))), at: 0)
        return answer
    }
}

/// What happened at one upstream for one request.
enum UpstreamOutcome: Sendable {
    case forwarded, unchanged, skipped
    case failed(ContractError)

    var isForwarded: Bool {
        if case .forwarded = self { return true }
        return false
    }

    var name: String {
        switch self {
        case .forwarded: return "forwarded"
        case .unchanged: return "unchanged"
        case .skipped: return "skipped"
        case .failed: return "failed"
        }
    }
}

/// `X-Request-Id`: the caller's when it is sane (1 to 128 of `[A-Za-z0-9._:-]`), else a fresh one:
/// a random per-process prefix and a counter, unique without a call into the random generator
/// on every request.
enum RequestID {
    private static let prefix = Base64URL.encode(SecureRandom.bytes(9))
    private static let counter = Atomic<UInt64>(0)

    static func from(_ headers: HTTPHeaders) -> String {
        if let given = headers["X-Request-Id"], isSane(given) { return given }
        let n = counter.wrappingAdd(1, ordering: .relaxed).newValue
        return prefix + "-" + String(n, radix: 36)
    }

    static func isSane(_ value: String) -> Bool {
        guard !value.isEmpty, value.utf8.count <= 128 else { return false }
        return value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: ":"), UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
    }
}

/// The value cached for a registration: a hash of everything PushWarden forwards for it (the
/// installation as validated, the session's contact, and the upstream's request-shaping
/// settings), so any change is forwarded again. Identities a provider handed back are not part of
/// it: they follow from the registration.
enum Fingerprint {
    static func of(_ installation: Installation, contactID: String, settings: String) -> String {
        let m = installation.metadata
        let parts: [String?] = [
            installation.platform.rawValue, installation.pushService.rawValue, installation.pushToken,
            installation.webPushKeys?.p256dh, installation.webPushKeys?.auth, installation.environment.rawValue,
            installation.installationID, m.appVersion, m.osVersion, m.deviceModel, m.locale, m.timezone,
            contactID, settings,
        ]
        var material: [UInt8] = []
        material.reserveCapacity(256)
        for part in parts {
            // A 0x01 marks absence, so nil and "" differ; 0x00 separates fields.
            if let part { material.append(contentsOf: part.utf8) } else { material.append(1) }
            material.append(0)
        }
        return String(SHA256.hexHash(material).prefix(32))
    }
}

/// The JSON responses every route shares.
enum Responses {
    static func json(_ status: Int, _ body: JSONValue, requestID: String, extra: HTTPHeaders = [:]) -> HTTPResponse {
        var headers: HTTPHeaders = [
            "Content-Type": "application/json",
            "X-Request-Id": requestID,
            "Cache-Control": "no-store",
        ]
        for field in extra { headers.add(field.name, field.value) }
        return HTTPResponse(status: status, headers: headers, body: body.encoded())
    }

    static func error(_ error: ContractError, requestID: String) -> HTTPResponse {
        var headers: HTTPHeaders = [
            "Content-Type": "application/json",
            "X-Request-Id": requestID,
            "Cache-Control": "no-store",
        ]
        if let retryAfter = error.retryAfter { headers.add("Retry-After", String(retryAfter)) }
        if error.code == .methodNotAllowed { headers.add("Allow", "POST") }
        if error.code == .unauthorized { headers.add("WWW-Authenticate", "Bearer") }
        return HTTPResponse(status: error.status, headers: headers, body: error.envelope(requestID: requestID))
    }
}
