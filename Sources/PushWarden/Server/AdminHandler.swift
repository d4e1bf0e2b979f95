import HTTPServer
import PWCore
import Registration

/// The admin listener (loopback by default): `/healthz`, `/readyz`, `/metrics`, and the
/// server-to-server API (`ContactRoutes` and `DeadTokenRoutes`, behind the admin tokens).
///
/// Every request runs in a task of its own (`AsyncHTTPHandler`), off the listener's loop, so a
/// slow erasure (seconds of upstream calls) holds no thread and never delays `/healthz`.
struct AdminHandler: AsyncHTTPHandler {
    let metrics: Metrics
    let store: any DedupeStore
    let contacts: ContactRoutes
    let fleet: FleetRoutes
    let deadTokens: DeadTokenRoutes

    func decide(_ head: HTTPRequestHead) -> HeadDecision {
        if let decision = contacts.decide(head) { return decision }
        if let decision = fleet.decide(head) { return decision }
        if let decision = deadTokens.decide(head) { return decision }
        switch head.path {
        case "/healthz", "/readyz", "/metrics":
            guard head.method == "GET" || head.method == "HEAD" else {
                var response = Responses.error(ContractError(.methodNotAllowed, "use GET"), requestID: RequestID.from(head.headers))
                response.headers.set("Allow", "GET, HEAD")
                return .respond(response)
            }
            return .readBody(limit: 0)
        default:
            return .respond(Responses.error(ContractError(.notFound, "no such route"), requestID: RequestID.from(head.headers)))
        }
    }

    func payloadTooLarge(_ head: HTTPRequestHead, context: (any Sendable)?) -> HTTPResponse {
        if context is DeadTokenRoutes.Resolved { return deadTokens.payloadTooLarge(head) }
        return Responses.error(ContractError(.payloadTooLarge, "admin routes take no body"), requestID: RequestID.from(head.headers))
    }

    func refuse(_ head: HTTPRequestHead, _ refusal: HTTPRefusal) -> HTTPResponse {
        Responses.refusal(refusal, requestID: RequestID.from(head.headers))
    }

    func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let requestID = RequestID.from(request.head.headers)
        if let resolved = request.context as? ContactRoutes.Resolved {
            return await contacts.handle(resolved, requestID: requestID)
        }
        if let resolved = request.context as? FleetRoutes.Resolved {
            return await fleet.handle(resolved, requestID: requestID)
        }
        if let resolved = request.context as? DeadTokenRoutes.Resolved {
            return await deadTokens.handle(resolved, body: request.body, requestID: requestID)
        }
        switch request.head.path {
        case "/healthz":
            return Responses.json(200, .object(JSONObject([JSONMember("status", "ok")])), requestID: requestID)
        case "/readyz":
            // A sidecar listens only once its policy is in force: only the store can be missing.
            let ready = await store.isReachable()
            let body = JSONObject([
                JSONMember("status", .string(ready ? "ready" : "not_ready")),
                JSONMember("policy", "loaded"),
                JSONMember("store", .string(ready ? "reachable" : "unreachable")),
                JSONMember("store_kind", .string(store.kind)),
            ])
            return Responses.json(ready ? 200 : 503, .object(body), requestID: requestID)
        default:
            let storeUp = await store.isReachable()
            return HTTPResponse(status: 200, headers: ["Content-Type": "text/plain; version=0.0.4"],
                                body: Array(metrics.render(storeUp: storeUp).utf8))
        }
    }
}
