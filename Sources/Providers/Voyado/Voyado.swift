import ClientAPI
import HTTPClient
import PWCore
import PWPolicy

/// Voyado App Push (seed document 001): register, unregister and events under one base path,
/// `Authorization: Bearer <PublicApiKey>`, snake_case JSON, `202 Accepted` on success.
///
/// Quirks kept here:
/// - An installation is identified solely by its push token; `platform` is `ios` or `android`
///   only and the token is the raw APNs or FCM token, so web push, VoIP and UnifiedPush
///   installations (and the Web Push form of any service) are skipped.
/// - `contact_id` is required on register and on every event; PushWarden injects the session's.
/// - Metadata fields are sent when present (Voyado recommends them though it does not use them yet).
/// - `400` carries `{"error": {"code": ...}}`; `401` means the key does not match the tenant.
///   Only the codes of `documentedErrorCodes` are shown as they are (`UpstreamErrorCode`).
/// - A rotation registers the new token and unregisters the old one (the default retirement).
public struct VoyadoAdapter: UpstreamAdapter {
    public let name: String
    public let kind = ProviderKind.voyado
    public let settingsDigest: String
    let basePath: String
    let authorization: String

    /// Every code in seed 001's error tables: "Failure modes" (`unauthorized`, `invalid_path`) and
    /// the "Errors" tables of Register installation, Unregister installation and Report events.
    public static let documentedErrorCodes: Set<String> = [
        "invalid_json", "invalid_request", "invalid_platform", "unauthorized", "invalid_path", "invalid_event", "invalid_event_type",
    ]

    /// - Parameter apiKey: the resolved PublicApiKey; it travels only in the `Authorization` header.
    public init(name: String, config: VoyadoConfig, apiKey: [UInt8]) {
        self.name = name
        self.basePath = config.basePath
        self.settingsDigest = config.basePath
        self.authorization = "Bearer " + String(decoding: apiKey, as: UTF8.self)
    }

    public func accepts(_ installation: Installation) -> Bool {
        guard !installation.isWebPushForm else { return false }
        switch (installation.platform, installation.pushService) {
        case (.ios, .apns), (.android, .fcm): return true
        default: return false
        }
    }

    public func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                                previous: UpstreamIdentity?) -> HTTPClientRequest {
        var body: [JSONMember] = [
            JSONMember("platform", .string(installation.platform.rawValue)),
            JSONMember("push_token", .string(installation.pushToken)),
            JSONMember("contact_id", .string(context.contactID)),
        ]
        let metadata = installation.metadata
        for (key, value) in [("app_version", metadata.appVersion), ("os_version", metadata.osVersion),
                             ("device_model", metadata.deviceModel), ("locale", metadata.locale),
                             ("timezone", metadata.timezone)] {
            if let value { body.append(JSONMember(key, .string(value))) }
        }
        return post("/installations", .object(JSONObject(body)))
    }

    public func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) -> HTTPClientRequest? {
        post("/installations/unregister", .object(JSONObject([JSONMember("push_token", .string(pushToken))])))
    }

    public func eventsRequest(_ events: [EngagementEvent], context: CallContext) -> HTTPClientRequest? {
        let encoded: [JSONValue] = events.map { event in
            var members: [JSONMember] = [
                JSONMember("type", .string(event.type.rawValue)),
                JSONMember("message_id", .string(event.messageID)),
                JSONMember("contact_id", .string(context.contactID)),
                JSONMember("recipient_id", .string(event.recipientID)),
                JSONMember("occurred_at", .string(event.occurredAt)),
            ]
            if let appState = event.appState { members.append(JSONMember("app_state", .string(appState.rawValue))) }
            if let deeplink = event.deeplink { members.append(JSONMember("deeplink", .string(deeplink))) }
            if let actionID = event.actionID { members.append(JSONMember("action_id", .string(actionID))) }
            return .object(JSONObject(members))
        }
        return post("/events", .object(JSONObject([JSONMember("events", .array(encoded))])))
    }

    public func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict {
        // Not documented by Voyado; an installation that is already gone is what unregister wants.
        if response.status == 404, operation == .unregister { return .accepted }
        return standardVerdict(response) { UpstreamJSON.errorCode($0.body) }
    }

    public func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse {
        if request.url.hasSuffix("/events"),
           let events = (try? JSONValue.parse(request.body))?.objectValue?["events"]?.arrayValue {
            let body = JSONValue.object(JSONObject([JSONMember("accepted", .number(String(events.count)))])).encoded()
            return HTTPClientResponse(status: 202, headers: ["Content-Type": "application/json"], body: body)
        }
        return HTTPClientResponse(status: 202, headers: [:], body: [])
    }

    private func post(_ path: String, _ body: JSONValue) -> HTTPClientRequest {
        UpstreamJSON.request("POST", basePath + path, headers: ["Authorization": authorization], body: body)
    }
}
