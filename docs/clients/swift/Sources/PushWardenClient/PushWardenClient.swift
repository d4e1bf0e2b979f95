// The PushWarden client API (openapi.yaml, docs/api.md) over URLSession.
// Copy this file and PushRegistrar.swift into an app; nothing else is needed.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking  // URLSession on Linux
#endif

/// What the app does after an answer: the table in docs/clients/README.md, as code.
public enum ClientAction: Equatable, Sendable {
    /// Nothing more to do.
    case done
    /// A passing problem (rate limit, provider down, a PushWarden or operator problem, no
    /// network): keep the request and try again on the next launch, not before `after` seconds.
    case retryNextLaunch(after: Int?)
    /// The session is missing, expired or foreign: refresh it (or sign in again), then register again.
    case reauthenticate
    /// The request itself is wrong (an app bug or a token the providers refuse): never send it
    /// again as it is. Log it with the request id; fix the app, or get a fresh token from the OS.
    case neverRetry
}

/// A refusal in the contract's envelope (`{"error": {...}}`), or a failure to get any answer.
public struct PushWardenError: Error, Sendable, Equatable {
    /// The HTTP status; 0 when no answer came (offline, timeout, DNS).
    public var status: Int
    /// The contract's code (`invalid_token_format`, `rate_limited`, ...); `network` when no answer
    /// came, `unexpected_response` for an answer without the envelope.
    public var code: String
    public var message: String
    public var field: String?
    public var upstreamCode: String?
    public var requestID: String?
    /// `Retry-After` in seconds (429 and 503).
    public var retryAfter: Int?

    public init(status: Int, code: String, message: String, field: String? = nil, upstreamCode: String? = nil,
                requestID: String? = nil, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.upstreamCode = upstreamCode
        self.requestID = requestID
        self.retryAfter = retryAfter
    }

    /// The app's action for this refusal (docs/clients/README.md, "What to do on each error code").
    public var action: ClientAction {
        switch code {
        case "unauthorized":
            return .reauthenticate
        case "rate_limited", "upstream_unavailable", "auth_unavailable", "upstream_auth_failed", "internal",
             "network", "unexpected_response":
            return .retryNextLaunch(after: retryAfter)
        case "invalid_json", "invalid_request", "invalid_platform", "invalid_token_format", "token_platform_mismatch",
             "unsupported_token_type", "invalid_web_push", "url_not_publicly_routable", "invalid_event",
             "invalid_event_type", "unknown_field", "contact_mismatch", "forbidden", "not_found",
             "method_not_allowed", "payload_too_large", "unsupported_media_type", "upstream_rejected":
            return .neverRetry
        default:
            // A code this app does not know yet: judge by the status.
            return (status >= 500 || status == 429) ? .retryNextLaunch(after: retryAfter) : .neverRetry
        }
    }
}

/// One registration (the contract's installation). Only `platform` and `pushToken` are required.
public struct Installation: Sendable, Equatable {
    public var platform: String            // "ios", "android" or "web"
    public var pushToken: String           // APNs token as hex, FCM token, or Web Push endpoint URL
    public var pushService: String?        // "apns" (default on ios), "apns_voip", "fcm", "unified_push", "web_push"
    public var environment: String?        // "production" (default) or "sandbox" (APNs development builds)
    public var previousPushToken: String?  // the token this one replaces after a rotation
    public var installationID: String?
    public var appVersion: String?
    public var osVersion: String?
    public var deviceModel: String?
    public var locale: String?
    public var timezone: String?

    public init(platform: String, pushToken: String, pushService: String? = nil, environment: String? = nil,
                previousPushToken: String? = nil, installationID: String? = nil, appVersion: String? = nil,
                osVersion: String? = nil, deviceModel: String? = nil, locale: String? = nil, timezone: String? = nil) {
        self.platform = platform
        self.pushToken = pushToken
        self.pushService = pushService
        self.environment = environment
        self.previousPushToken = previousPushToken
        self.installationID = installationID
        self.appVersion = appVersion
        self.osVersion = osVersion
        self.deviceModel = deviceModel
        self.locale = locale
        self.timezone = timezone
    }

    var json: [String: String] {
        var body = ["platform": platform, "push_token": pushToken]
        body["push_service"] = pushService
        body["environment"] = environment
        body["previous_push_token"] = previousPushToken
        body["installation_id"] = installationID
        body["app_version"] = appVersion
        body["os_version"] = osVersion
        body["device_model"] = deviceModel
        body["locale"] = locale
        body["timezone"] = timezone
        return body
    }
}

/// A `202`: each upstream's outcome (`forwarded`, `unchanged`, `queued`, `skipped`, `failed`).
public struct Accepted: Sendable, Equatable {
    public var requestID: String
    public var upstreams: [String: String]
    /// For events: how many were accepted.
    public var accepted: Int?
}

/// The three client routes. The session is read on every call (it may have been refreshed).
public struct PushWardenClient: Sendable {
    public let baseURL: URL  // https://<backend>/<mount>, without /v1
    public let app: String
    public let session: @Sendable () -> String?
    let urlSession: URLSession

    public init(baseURL: URL, app: String, urlSession: URLSession = .shared, session: @escaping @Sendable () -> String?) {
        self.baseURL = baseURL
        self.app = app
        self.urlSession = urlSession
        self.session = session
    }

    /// `POST /v1/apps/{app}/installations`
    public func register(_ installation: Installation) async -> Result<Accepted, PushWardenError> {
        await post("installations", installation.json)
    }

    /// `POST /v1/apps/{app}/installations/unregister`
    public func unregister(pushToken: String) async -> Result<Accepted, PushWardenError> {
        await post("installations/unregister", ["push_token": pushToken])
    }

    /// `POST /v1/apps/{app}/events`; each event: `type`, `message_id`, `recipient_id`, `occurred_at`, ...
    public func report(events: [[String: String]]) async -> Result<Accepted, PushWardenError> {
        await post("events", ["events": events])
    }

    private func post(_ route: String, _ body: Any) async -> Result<Accepted, PushWardenError> {
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/apps/\(app)/\(route)"))
        request.httpMethod = "POST"
        request.timeoutInterval = 10
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let token = session() { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        request.httpBody = try? JSONSerialization.data(withJSONObject: body)

        let data: Data, response: HTTPURLResponse
        do {
            (data, response) = try await send(request)
        } catch {
            return .failure(PushWardenError(status: 0, code: "network", message: error.localizedDescription))
        }
        let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        let requestID = response.value(forHTTPHeaderField: "X-Request-Id")
        if response.statusCode == 202, let object {
            return .success(Accepted(requestID: object["request_id"] as? String ?? requestID ?? "",
                                     upstreams: object["upstreams"] as? [String: String] ?? [:],
                                     accepted: object["accepted"] as? Int))
        }
        let retryAfter = response.value(forHTTPHeaderField: "Retry-After").flatMap { Int($0) }
        guard let envelope = object?["error"] as? [String: Any], let code = envelope["code"] as? String else {
            // Not PushWarden's answer (a proxy in front of it, a shutdown): judged by status.
            return .failure(PushWardenError(status: response.statusCode, code: response.statusCode >= 500 ? "unexpected_response" : "unexpected_status",
                                            message: "HTTP \(response.statusCode)", requestID: requestID, retryAfter: retryAfter))
        }
        return .failure(PushWardenError(status: response.statusCode, code: code, message: envelope["message"] as? String ?? "",
                                        field: envelope["field"] as? String, upstreamCode: envelope["upstream_code"] as? String,
                                        requestID: envelope["request_id"] as? String ?? requestID, retryAfter: retryAfter))
    }

    /// `URLSession.data(for:)` by its completion handler, which every Foundation has (Linux included).
    private func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        try await withCheckedThrowingContinuation { continuation in
            urlSession.dataTask(with: request) { data, response, error in
                if let error {
                    continuation.resume(throwing: error)
                } else if let response = response as? HTTPURLResponse {
                    continuation.resume(returning: (data ?? Data(), response))
                } else {
                    continuation.resume(throwing: URLError(.badServerResponse))
                }
            }.resume()
        }
    }
}
