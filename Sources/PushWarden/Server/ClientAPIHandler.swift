import ClientAPI
import HTTPClient
import HTTPServer
import Loops
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
public final class ClientAPIHandler: HTTPHandler {
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

    // MARK: 2. The request, on the loop that read it

    /// Runs on the request's loop: authentication, validation and, for a registration, the dedupe
    /// lookups. A registration every upstream already has is answered right here, without a task
    /// or a thread hop: the hot path of a registration storm. Everything else continues in
    /// `complete`, on Swift concurrency.
    public func start(_ request: HTTPRequest, on loop: EventLoop, responder: HTTPResponder) {
        let requestID = RequestID.from(request.head.headers)
        let accepted: Accepted
        switch accept(request, requestID: requestID) {
        case .failure(let refusal):
            responder.respond(answer(.failure(refusal.error), app: refusal.app, route: refusal.route, requestID: requestID))
            return
        case .success(let value):
            accepted = value
        }
        // Tasks prefer the request's loop: their Redis commands go over the loop's own
        // connection and they resume there, instead of crossing to the pool and back.
        guard case .register(let installation) = accepted.body else {
            Task(executorPreference: loop) { [self] in responder.respond(await complete(accepted)) }
            return
        }
        let plan: RegisterPlan
        do throws(ContractError) {
            plan = try registerPlan(installation, accepted)
        } catch {
            responder.respond(answer(.failure(error), app: accepted.appLabel, route: accepted.routeLabel, requestID: requestID))
            return
        }
        plan.lookUp(in: deduper.store, on: loop) { [self] cached in
            if let unchanged = plan.outcomesIfUnchanged(cached) {
                for (name, outcome) in unchanged where outcome.isUnchanged {
                    metrics.dedupeHit(app: accepted.appLabel, upstream: name)
                }
                responder.respond(answer(finishRegister(unchanged, installation: installation, accepted),
                                         app: accepted.appLabel, route: accepted.routeLabel, requestID: requestID))
                return
            }
            Task(executorPreference: loop) { [self] in responder.respond(await complete(accepted, plan: plan, cached: cached)) }
        }
    }

    /// The whole request on Swift concurrency (for callers without a loop).
    public func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let requestID = RequestID.from(request.head.headers)
        switch accept(request, requestID: requestID) {
        case .failure(let refusal):
            return answer(.failure(refusal.error), app: refusal.app, route: refusal.route, requestID: requestID)
        case .success(let accepted):
            return await complete(accepted)
        }
    }

    /// A request that passed routing, authentication, the rate limit and body validation.
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

        init(app: AppRuntime, route: Route, session: Session, headers: HTTPHeaders, requestID: String, body: Body) {
            self.app = app
            self.route = route
            self.session = session
            self.headers = headers
            self.requestID = requestID
            self.body = body
        }

        var appLabel: String { app.policy.id }
        var routeLabel: String { route.rawValue }
        var context: CallContext { CallContext(contactID: session.contactID, clientHeaders: headers) }
    }

    struct Refusal: Error {
        var error: ContractError
        var app = "-"
        var route = "-"
    }

    private func accept(_ request: HTTPRequest, requestID: String) -> Result<Accepted, Refusal> {
        let app: AppRuntime, route: Route
        switch resolve(request.head) {
        case .success(let resolved): (app, route) = resolved
        case .failure(let error): return .failure(Refusal(error: error))
        }
        do throws(ContractError) {
            let session = try authenticate(request.head.headers, app: app, requestID: requestID)
            try rateLimiter.admit(app: app.policy, route: route.rawValue, contactID: session.contactID)
            let client = app.policy.client
            let body: Accepted.Body
            switch route {
            case .register:
                body = .register(try RequestValidator.installation(body: request.body, policy: client, contactID: session.contactID))
            case .unregister:
                body = .unregister(pushToken: try RequestValidator.unregister(body: request.body, policy: client, contactID: session.contactID))
            case .events:
                body = .events(try RequestValidator.events(body: request.body, policy: client, contactID: session.contactID))
            }
            return .success(Accepted(app: app, route: route, session: session, headers: request.head.headers,
                                     requestID: requestID, body: body))
        } catch {
            return .failure(Refusal(error: error, app: app.policy.id, route: route.rawValue))
        }
    }

    /// Forwards an accepted request, on Swift concurrency. For a registration, `plan` and
    /// `cached` carry what the loop already decided and looked up.
    private func complete(_ accepted: Accepted, plan: RegisterPlan? = nil, cached: [String??] = []) async -> HTTPResponse {
        let result: Result<JSONObject, ContractError>
        do throws(ContractError) {
            switch accepted.body {
            case .register(let installation):
                let planned: RegisterPlan
                if let plan { planned = plan } else { planned = try registerPlan(installation, accepted) }
                result = .success(try await register(installation, plan: planned, cached: cached, accepted))
            case .unregister(let pushToken):
                result = .success(try await unregister(pushToken, accepted))
            case .events(let events):
                result = .success(try await report(events, accepted))
            }
        } catch {
            result = .failure(error)
        }
        return answer(result, app: accepted.appLabel, route: accepted.routeLabel, requestID: accepted.requestID)
    }

    /// The 202 with `request_id` first, or the contract's envelope; counted either way.
    private func answer(_ result: Result<JSONObject, ContractError>, app: String, route: String, requestID: String) -> HTTPResponse {
        let response: HTTPResponse
        switch result {
        case .success(let members):
            var body = JSONObject([JSONMember("request_id", .string(requestID))])
            body.members.append(contentsOf: members.members)
            response = Responses.json(202, .object(body), requestID: requestID)
        case .failure(let error):
            if error.code == .internal {
                logger.error("internal error", [("request_id", requestID), ("detail", error.message)])
            }
            response = Responses.error(error, requestID: requestID)
        }
        metrics.request(app: app, route: route, status: response.status)
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
        // A String-keyed dictionary matches canonically equivalent spellings; the id must be the bytes.
        let id = String(Substring(path[afterPrefix..<slash]))
        guard let app = apps[id], TextRules.bytesEqual(app.policy.id, id) else { return .failure(ContractError(.notFound, "unknown app")) }
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

    /// What registering means at each upstream, decided before any lookup: skipped (the
    /// upstream cannot take this installation), refused by the provider's own rules (a shadow;
    /// a refusing primary fails the request), or a dedupe entry to look at.
    struct RegisterPlan: Sendable {
        enum Step: Sendable {
            case skip
            case refused(ContractError)
            case dedupe(DedupeKeys, fingerprint: String)
        }

        let steps: [(caller: UpstreamCaller, step: Step)]

        /// Looks every dedupe entry up on `loop`; `completion` gets the cached values (nil where
        /// there is nothing to look at or the store failed: those are looked at again, or
        /// forwarded without dedupe, by `Deduper.register`) once all are in, on the loop.
        func lookUp(in store: any DedupeStore, on loop: EventLoop, completion: @escaping ([String??]) -> Void) {
            let batch = LookupBatch(count: steps.count, completion: completion)
            for (index, entry) in steps.enumerated() {
                guard case .dedupe(let keys, _) = entry.step else { continue }
                batch.expect()
                store.peek(keys.entry, on: loop) { result in
                    switch result {
                    case .success(let value): batch.deliver(index, .some(value))
                    case .failure: batch.deliver(index, nil)
                    }
                }
            }
            batch.sealed()
        }

        /// Each upstream's outcome when none needs a call (every entry current), else nil.
        func outcomesIfUnchanged(_ cached: [String??]) -> [(String, UpstreamOutcome)]? {
            var outcomes: [(String, UpstreamOutcome)] = []
            outcomes.reserveCapacity(steps.count)
            for (index, entry) in steps.enumerated() {
                switch entry.step {
                case .skip:
                    outcomes.append((entry.caller.adapter.name, .skipped))
                case .refused(let error):
                    outcomes.append((entry.caller.adapter.name, .failed(error)))
                case .dedupe(_, let fingerprint):
                    guard index < cached.count, case .some(.some(let value)) = cached[index], value == fingerprint else { return nil }
                    outcomes.append((entry.caller.adapter.name, .unchanged))
                }
            }
            return outcomes
        }
    }

    /// Collects one request's lookups on its loop (loop-confined, never shared).
    private final class LookupBatch {
        private var results: [String??]
        private var outstanding = 1  // the seal
        private let completion: ([String??]) -> Void

        init(count: Int, completion: @escaping ([String??]) -> Void) {
            results = Array(repeating: nil, count: count)
            self.completion = completion
        }

        func expect() { outstanding += 1 }

        func deliver(_ index: Int, _ value: String??) {
            results[index] = value
            arrive()
        }

        /// All lookups are issued; those answered at once (an in-memory store) already arrived.
        func sealed() { arrive() }

        private func arrive() {
            outstanding -= 1
            if outstanding == 0 { completion(results) }
        }
    }

    /// Each provider's own rules first: when the primary would refuse, nothing is forwarded.
    private func registerPlan(_ installation: Installation, _ accepted: Accepted) throws(ContractError) -> RegisterPlan {
        let context = accepted.context
        var steps: [(caller: UpstreamCaller, step: RegisterPlan.Step)] = []
        steps.reserveCapacity(accepted.app.upstreams.count)
        for caller in accepted.app.upstreams {
            let adapter = caller.adapter
            guard adapter.accepts(installation) else {
                steps.append((caller, .skip))
                continue
            }
            do throws(ContractError) {
                try adapter.validate(installation, context: context)
            } catch {
                if caller.policy.role == .primary { throw error }
                steps.append((caller, .refused(error)))
                continue
            }
            let keys = DedupeKeys(app: accepted.app.policy.id, upstream: adapter.name, pushToken: installation.pushToken)
            let fingerprint = Fingerprint.of(installation, contactID: context.contactID, settings: adapter.settingsDigest)
            steps.append((caller, .dedupe(keys, fingerprint: fingerprint)))
        }
        return RegisterPlan(steps: steps)
    }

    private func register(_ installation: Installation, plan: RegisterPlan, cached: [String??],
                          _ accepted: Accepted) async throws(ContractError) -> JSONObject {
        let context = accepted.context
        let deduper = self.deduper
        let identities = self.identities
        let metrics = self.metrics
        let refreshAfter = accepted.app.policy.dedupe.refreshAfterSeconds
        let appID = accepted.app.policy.id
        var stepByName: [String: (RegisterPlan.Step, String??)] = [:]
        for (index, entry) in plan.steps.enumerated() {
            stepByName[entry.caller.adapter.name] = (entry.step, index < cached.count ? cached[index] : nil)
        }
        let steps = stepByName
        let outcomes = await accepted.app.eachUpstream { caller -> UpstreamOutcome in
            let adapter = caller.adapter
            guard let (step, cached) = steps[adapter.name] else { return .skipped }
            let keys: DedupeKeys, fingerprint: String
            switch step {
            case .skip: return .skipped
            case .refused(let error): return .failed(error)
            case .dedupe(let k, let f): (keys, fingerprint) = (k, f)
            }
            do throws(ContractError) {
                let outcome = try await deduper.register(
                    keys: keys, fingerprint: fingerprint, refreshAfterSeconds: refreshAfter,
                    lockMillis: caller.budgetMillis + 1000, app: appID, cached: cached
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
        let result = finishRegister(outcomes, installation: installation, accepted)
        if let previous = installation.previousPushToken, case .success = result {
            let forwarded = Set(outcomes.compactMap { name, outcome in outcome.isForwarded ? name : nil })
            await retire(previous, replacedBy: installation, context: context, upstreams: forwarded, app: accepted.app,
                         requestID: accepted.requestID)
        }
        return try result.get()
    }

    /// The answer to a registration once every upstream's outcome is known.
    private func finishRegister(_ outcomes: [(String, UpstreamOutcome)], installation: Installation,
                                _ accepted: Accepted) -> Result<JSONObject, ContractError> {
        let appID = accepted.appLabel
        let result = Result { () throws(ContractError) in try accepted.app.answer(outcomes, logger: logger, requestID: accepted.requestID) }
        logger.debug("registered", [("app", appID), ("request_id", accepted.requestID), ("token", Redact.token(installation.pushToken)),
                                    ("contact", Redact.contact(accepted.session.contactID))])
        return result
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

    private func unregister(_ pushToken: String, _ accepted: Accepted) async throws(ContractError) -> JSONObject {
        let context = accepted.context
        let app = accepted.app
        let requestID = accepted.requestID
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

    private func report(_ events: [EngagementEvent], _ accepted: Accepted) async throws(ContractError) -> JSONObject {
        let context = accepted.context
        let app = accepted.app
        let requestID = accepted.requestID
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

    var isUnchanged: Bool {
        if case .unchanged = self { return true }
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
        var material: [UInt8] = []
        material.reserveCapacity(320)
        func add(_ part: String?) {
            // A 0x01 marks absence, so nil and "" differ; 0x00 separates fields.
            if let part { material.append(contentsOf: part.utf8) } else { material.append(1) }
            material.append(0)
        }
        add(installation.platform.rawValue)
        add(installation.pushService.rawValue)
        add(installation.pushToken)
        add(installation.webPushKeys?.p256dh)
        add(installation.webPushKeys?.auth)
        add(installation.environment.rawValue)
        add(installation.installationID)
        add(m.appVersion)
        add(m.osVersion)
        add(m.deviceModel)
        add(m.locale)
        add(m.timezone)
        add(contactID)
        add(settings)
        // The first 16 bytes as hex: the first 32 hex digits of the digest.
        return Hex.encode(SHA256.hash(material).prefix(16))
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
