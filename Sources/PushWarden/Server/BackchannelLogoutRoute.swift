import HTTPServer
import Loops
import PWCore
import PWCrypto
import PWPolicy
import Providers
import Synchronization
import RedisStores
import Registration
import SessionAuth

/// `POST /v1/apps/{app}/backchannel-logout` (OpenID Connect Back-Channel Logout 1.0, section
/// 2.5), called by the identity provider: a form with one `logout_token`. Answers as that
/// specification says, not in the client envelope: `200` with an empty body and
/// `Cache-Control: no-store`, or `400` `{"error":"invalid_request"}` for a token that fails a
/// check or was used before. `501` (in the envelope) when the app does not declare
/// `backchannel_logout`; `503 store_unavailable` when the store does not answer.
extension ClientAPIHandler {
    func backchannelLogout(_ request: HTTPRequest, _ app: AppRuntime, requestID: String, on loop: EventLoop, responder: HTTPResponder) {
        let appID = app.policy.id
        let route = Route.backchannelLogout.rawValue
        guard case .jwt(let verifier) = app.sessions, let logout = app.policy.session.jwt?.backchannelLogout else {
            metrics.backchannelLogout(app: appID, result: "not_enabled")
            var response = Responses.error(ContractError(.invalidRequest, "this app does not take back-channel logouts"), requestID: requestID)
            response.status = 501
            metrics.request(app: appID, route: route, status: response.status)
            responder.respond(response)
            return
        }
        let token: LogoutToken
        switch Self.logoutToken(in: request.body).flatMap(verifier.verifyLogout) {
        case .success(let verified):
            token = verified
        case .failure(let failure):
            logger.bounded(.info, "back-channel logout refused", key: appID + "\u{0}logout\u{0}" + failure.kind,
                           [("app", appID), ("request_id", requestID), ("reason", failure.reason)])
            responder.respond(refusedLogout(app: appID, result: "invalid", requestID: requestID))
            return
        }
        Task(executorPreference: loop) { [self] in
            let outcome: LogoutOutcome
            do throws(ContractError) {
                outcome = try await registrar.logOut(token, scope: logout.scope, in: app, requestID: requestID)
            } catch {
                metrics.backchannelLogout(app: appID, result: "unavailable")
                logger.warning("back-channel logout not done", [("app", appID), ("request_id", requestID), ("code", error.code.rawValue),
                                                                ("detail", error.message)])
                let response = Responses.error(error, requestID: requestID)
                metrics.request(app: appID, route: route, status: response.status)
                responder.respond(response)
                return
            }
            switch outcome {
            case .replayed:
                logger.bounded(.info, "back-channel logout refused", key: appID + "\u{0}logout\u{0}replayed",
                               [("app", appID), ("request_id", requestID), ("reason", "jti used before")])
                responder.respond(refusedLogout(app: appID, result: "replayed", requestID: requestID))
            case .loggedOut(let report, let contact):
                metrics.backchannelLogout(app: appID, result: "logged_out")
                let receipt = await logoutReceipt(report, contact: contact, app: appID, requestID: requestID)
                logger.info("back-channel logout", [
                    ("app", appID), ("request_id", requestID),
                    ("contact", token.contactID.map(Redact.contact) ?? contact.map { "ct:" + $0.digest.prefix(8) } ?? "-"),
                    ("session", token.sessionID.map { "sid:" + Redact.shortHash($0) } ?? "-"),
                    ("installations", String(report.installations)), ("upstreams", ContactRoutes.auditOutcomes(report.upstreams)),
                    ("receipt", receipt.map { String($0.receipt.seq) } ?? "-"),
                ])
                var headers = HTTPHeaders()
                headers.add("Cache-Control", "no-store")
                headers.add("X-Request-Id", requestID)
                metrics.request(app: appID, route: route, status: 200)
                responder.respond(HTTPResponse(status: 200, headers: headers, body: []))
            }
        }
    }

    /// The logout's receipt on the app's evidence trail, when the policy keeps one and the logout
    /// found its contact. The logout has happened whatever this says: a failed append is logged.
    private func logoutReceipt(_ report: ErasureReport, contact: ContactKeys?, app: String, requestID: String) async -> AuditTrail.Appended? {
        guard let contact, let trail = receipts.withLock({ $0 }) else { return nil }
        let outcomes = report.upstreams.map { name, outcome -> (String, String) in
            if case .failed(let failure) = outcome { return (name, "failed:" + failure.code.rawValue) }
            return (name, outcome.name)
        }
        do {
            return try await trail.append(kind: "backchannel_logout", app: app, contact: contact, requestID: requestID,
                                          installations: report.installations, upstreams: outcomes)
        } catch {
            logger.error("back-channel logout receipt not appended to the evidence trail", [
                ("app", app), ("contact", "ct:" + contact.digest.prefix(8)), ("request_id", requestID),
                ("installations", String(report.installations)), ("error", error.detail),
            ])
            return nil
        }
    }

    /// The specification's refusal: `400` `{"error":"invalid_request"}`, never cached.
    private func refusedLogout(app: String, result: String, requestID: String) -> HTTPResponse {
        metrics.backchannelLogout(app: app, result: result)
        metrics.request(app: app, route: Route.backchannelLogout.rawValue, status: 400)
        var headers = HTTPHeaders()
        headers.add("Content-Type", "application/json")
        headers.add("Cache-Control", "no-store")
        headers.add("X-Request-Id", requestID)
        return HTTPResponse(status: 400, headers: headers, body: Array(#"{"error":"invalid_request"}"#.utf8))
    }

    /// The one `logout_token` of an `application/x-www-form-urlencoded` body, percent-decoded
    /// (`+` as a space). Other parameters are ignored; none, several, or a value that is not
    /// UTF-8 after decoding is a refusal.
    static func logoutToken(in body: [UInt8]) -> Result<String, AuthFailure> {
        let name = Array("logout_token".utf8)
        var found: String?
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let equals = pair.firstIndex(of: UInt8(ascii: "=")) ?? pair.endIndex
            guard let key = percentDecoded(pair[pair.startIndex..<equals]), key.elementsEqual(name) else { continue }
            guard found == nil else { return .failure(AuthFailure("several logout_token parameters")) }
            let rawValue = equals < pair.endIndex ? pair[(equals + 1)...] : []
            guard let bytes = percentDecoded(rawValue), let text = String(validating: bytes, as: UTF8.self) else {
                return .failure(AuthFailure("logout_token is not percent-encoded UTF-8"))
            }
            found = text
        }
        guard let found, !found.isEmpty else { return .failure(AuthFailure("no logout_token parameter")) }
        return .success(found)
    }

    private static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        func hex(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard bytes.endIndex - index >= 3, let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2]) else { return nil }
                out.append(high << 4 | low)
                index += 3
                continue
            }
            out.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            index += 1
        }
        return out
    }
}
