import PWCore
import PWPolicy

/// Turns a client's raw request body into a validated request, or refuses it with the contract's
/// code (docs/api.md). The rules mirror Voyado's App Push API, so an app built for
/// Voyado's direct integration works unchanged, and add what a sidecar holding server-side keys
/// needs on top (token shapes, endpoint URL safety, contact binding).
///
/// Order of checks, the same for every route, so a client always learns about the most basic
/// problem first:
/// 1. The body is JSON (`invalid_json`, the message gives a byte offset and never echoes input)
///    and an object (`invalid_request`).
/// 2. One pass over the members in document order: the first unknown field is refused with
///    `unknown_field` (or silently dropped when the policy says `unknown_fields: drop`), the first
///    known field with the wrong JSON type with `invalid_request` ("must be a string"). `null` for a
///    field counts as absent; a required field that is absent or `null` is refused as missing.
/// 3. `contact_id` against the session (`403 forbidden` / `403 contact_mismatch`).
/// 4. The values, field by field.
///
/// Thread-safety: stateless; call from anywhere. No input makes these functions trap or return
/// anything but a value or a 400/403 `ContractError`. The body size limit (`413`) is the caller's
/// job; it is checked before the body is read.
public enum RequestValidator {
    static let installationFields: [String: ObjectReader.Kind] = [
        "platform": .string, "push_token": .string, "push_service": .string, "web_push_keys": .object,
        "environment": .string, "previous_push_token": .string, "installation_id": .string,
        "app_version": .string, "os_version": .string, "device_model": .string, "locale": .string,
        "timezone": .string, "contact_id": .string,
    ]
    static let unregisterFields: [String: ObjectReader.Kind] = ["push_token": .string, "contact_id": .string]
    static let eventsFields: [String: ObjectReader.Kind] = ["events": .array]
    static let eventFields: [String: ObjectReader.Kind] = [
        "type": .string, "message_id": .string, "recipient_id": .string, "occurred_at": .string,
        "app_state": .string, "deeplink": .string, "action_id": .string, "contact_id": .string,
    ]
    static let webPushKeyFields: [String: ObjectReader.Kind] = ["p256dh": .string, "auth": .string]

    static let maxInstallationID = 200
    static let maxIDLength = 200
    static let maxDeeplink = 2000

    // MARK: Register

    /// Validates `POST /v1/apps/{app}/installations`.
    ///
    /// Decisions beyond the contract's wording:
    /// - `push_service` defaults by platform (ios → `apns`, android → `fcm`, web → `web_push`); the
    ///   pairs a device can hold are ios: `apns`, `apns_voip`, `fcm` (Firebase on iOS); android:
    ///   `fcm`, `unified_push`; web: `web_push`. Any other pair is `token_platform_mismatch` on
    ///   `push_service`.
    /// - `web_push` and `unified_push` take an endpoint URL; `apns`, `apns_voip` and `fcm` take a
    ///   device token or, in the Web Push form, an endpoint URL with `web_push_keys`.
    /// - `environment: "sandbox"` is refused (`invalid_request`) for non-APNs services: it signals a
    ///   client bug rather than something to ignore. `"production"` is accepted everywhere.
    /// - `previous_push_token` follows the same rules as `push_token` for the same service and must
    ///   differ from it after normalisation.
    /// - `web_push_keys` is strict whatever the unknown-fields policy: key material with unexpected
    ///   members is refused.
    /// - Metadata: empty strings are treated as absent; `locale` allows `[A-Za-z0-9_-]` (BCP 47, or
    ///   Android's `en_US`), `timezone` allows IANA's `[A-Za-z0-9_+-/]`.
    ///
    /// - Parameters:
    ///   - body: the raw request body bytes.
    ///   - policy: the app's `client` policy.
    ///   - contactID: the contact the authenticated session belongs to.
    /// - Throws: a 400 or 403 `ContractError` naming the offending field.
    public static func installation(body: [UInt8], policy: ClientPolicy, contactID: String) throws(ContractError) -> Installation {
        let root = try parseObject(body)
        let r = try ObjectReader(root, fields: installationFields, unknownFields: policy.unknownFields, typeErrorCode: .invalidRequest)
        try checkContact(r.string("contact_id"), field: "contact_id", policy: policy, contactID: contactID)

        let platform = try readPlatform(r.string("platform"), policy: policy)

        let service: PushService
        if let raw = r.string("push_service") {
            guard let parsed = PushService(rawValue: raw) else {
                throw ContractError(.invalidRequest, "push_service must be one of \(PushService.allCases.map(\.rawValue).joined(separator: ", "))",
                                    field: "push_service")
            }
            guard PushTokenRules.allowed(parsed, on: platform) else {
                let allowed = PushService.allCases.filter { PushTokenRules.allowed($0, on: platform) }.map(\.rawValue)
                throw ContractError(.tokenPlatformMismatch,
                                    "push_service \(parsed.rawValue) is not available on platform \(platform.rawValue); use \(allowed.joined(separator: " or "))",
                                    field: "push_service")
            }
            service = parsed
        } else {
            service = PushTokenRules.defaultService(for: platform)
        }

        var environment = APNsEnvironment.production
        if let raw = r.string("environment") {
            guard let parsed = APNsEnvironment(rawValue: raw) else {
                throw ContractError(.invalidRequest, "environment must be production or sandbox", field: "environment")
            }
            if parsed == .sandbox, service != .apns, service != .apnsVoip {
                throw ContractError(.invalidRequest, "environment sandbox applies to APNs only, not push_service \(service.rawValue)",
                                    field: "environment")
            }
            environment = parsed
        }

        guard let rawToken = r.string("push_token") else {
            throw ContractError(.invalidRequest, "push_token is required", field: "push_token")
        }
        let token = try PushTokenRules.validate(rawToken, service: service, platform: platform, field: "push_token")

        var keys: WebPushKeys?
        let takesURL = PushTokenRules.looksLikeURL(token)
        if let keyObject = r.object("web_push_keys") {
            guard takesURL else {
                throw ContractError(.invalidWebPush, "web_push_keys is only for Web Push endpoint URLs, not for a \(service.rawValue) device token",
                                    field: "web_push_keys")
            }
            keys = try readWebPushKeys(keyObject)
        } else if takesURL {
            throw ContractError(.invalidWebPush, "web_push_keys (p256dh and auth from the push subscription) is required with an endpoint URL",
                                field: "web_push_keys")
        }

        var previous: String?
        if let raw = r.string("previous_push_token") {
            let normalised = try PushTokenRules.validate(raw, service: service, platform: platform, field: "previous_push_token")
            guard PushTokenRules.looksLikeURL(normalised) == takesURL else {
                throw ContractError(.tokenPlatformMismatch,
                                    "previous_push_token must have the same form as push_token (both endpoint URLs or both device tokens)",
                                    field: "previous_push_token")
            }
            guard normalised != token else {
                throw ContractError(.invalidRequest, "previous_push_token must differ from push_token", field: "previous_push_token")
            }
            previous = normalised
        }

        var installationID: String?
        if let raw = r.string("installation_id") {
            guard !raw.isEmpty, raw.utf8.count <= maxInstallationID, Text.isVisibleASCII(raw) else {
                throw ContractError(.invalidRequest,
                                    "installation_id must be 1 to \(maxInstallationID) visible ASCII characters without spaces",
                                    field: "installation_id")
            }
            installationID = raw
        }

        let metadata = InstallationMetadata(
            appVersion: try metadataField(r, "app_version", max: 64),
            osVersion: try metadataField(r, "os_version", max: 64),
            deviceModel: try metadataField(r, "device_model", max: 128),
            locale: try metadataField(r, "locale", max: 35, charset: "letters, digits, - and _") {
                ByteClass.isAlphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            },
            timezone: try metadataField(r, "timezone", max: 64, charset: "letters, digits, _ + - and /") {
                ByteClass.isAlphanumeric($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "/")
            })

        return Installation(platform: platform, pushService: service, pushToken: token, webPushKeys: keys,
                            environment: environment, previousPushToken: previous, installationID: installationID,
                            metadata: metadata)
    }

    // MARK: Unregister

    /// Validates `POST /v1/apps/{app}/installations/unregister` (`{"push_token": "..."}`, plus the
    /// optional `contact_id` a Voyado SDK may send) and returns the token to forget, normalised the
    /// way registration normalises it.
    ///
    /// The token is checked only loosely (non-empty, at most 1000 characters, no control
    /// characters): a token registered by an older app version under older rules must still be
    /// removable, and unregistering an unknown token is a success anyway. Any other member (even
    /// `platform`) is an unknown field, as Voyado's unregister body is `push_token` alone.
    public static func unregister(body: [UInt8], policy: ClientPolicy, contactID: String) throws(ContractError) -> String {
        let root = try parseObject(body)
        let r = try ObjectReader(root, fields: unregisterFields, unknownFields: policy.unknownFields, typeErrorCode: .invalidRequest)
        try checkContact(r.string("contact_id"), field: "contact_id", policy: policy, contactID: contactID)
        guard let token = r.string("push_token") else {
            throw ContractError(.invalidRequest, "push_token is required", field: "push_token")
        }
        return try PushTokenRules.validateForRemoval(token, field: "push_token")
    }

    // MARK: Events

    /// Validates `POST /v1/apps/{app}/events` (`{"events": [...]}`), the whole batch before
    /// anything is returned, so nothing is forwarded from a batch that has one bad event.
    ///
    /// The batch is refused with `invalid_request` when `events` is missing, `null`, empty or longer
    /// than the policy's `max_events`. Each event is then checked in order and the first failing one
    /// is reported with its index in `field` (`events[3].occurred_at`). Inside an event every
    /// refusal is `invalid_event` (wrong JSON type, missing or malformed value, an event that is not
    /// an object), except an unknown `type` value (`invalid_event_type`), an unknown key
    /// (`unknown_field`, or dropped per policy) and a `contact_id` other than the session's
    /// (`403 contact_mismatch`, or `403 forbidden` when the policy rejects `contact_id`).
    /// `contact_id` belongs inside each event, as in Voyado's batch; at the top level it is unknown.
    public static func events(body: [UInt8], policy: ClientPolicy, contactID: String) throws(ContractError) -> [EngagementEvent] {
        let root = try parseObject(body)
        let r = try ObjectReader(root, fields: eventsFields, unknownFields: policy.unknownFields, typeErrorCode: .invalidRequest)
        guard let list = r.array("events") else {
            throw ContractError(.invalidRequest, "events is required: an array of events", field: "events")
        }
        guard !list.isEmpty else { throw ContractError(.invalidRequest, "events must not be empty", field: "events") }
        guard list.count <= policy.maxEvents else {
            throw ContractError(.invalidRequest, "at most \(policy.maxEvents) events per request", field: "events")
        }
        var events: [EngagementEvent] = []
        events.reserveCapacity(list.count)
        for (index, value) in list.enumerated() {
            events.append(try readEvent(value, index: index, policy: policy, contactID: contactID))
        }
        return events
    }

    static func readEvent(_ value: JSONValue, index: Int, policy: ClientPolicy, contactID: String) throws(ContractError) -> EngagementEvent {
        let here = "events[\(index)]"
        guard let object = value.objectValue else {
            throw ContractError(.invalidEvent, "\(here) must be an event object, not \(value.typeName)", field: here)
        }
        let r = try ObjectReader(object, prefix: here + ".", fields: eventFields, unknownFields: policy.unknownFields,
                                 typeErrorCode: .invalidEvent)
        try checkContact(r.string("contact_id"), field: r.path("contact_id"), policy: policy, contactID: contactID)

        guard let rawType = r.string("type") else {
            throw ContractError(.invalidEvent, "\(r.path("type")) is required", field: r.path("type"))
        }
        guard let type = EventType(rawValue: rawType) else {
            throw ContractError(.invalidEventType, "\(r.path("type")) must be one of delivered, opened, dismissed", field: r.path("type"))
        }
        let messageID = try eventID(r, "message_id")
        let recipientID = try eventID(r, "recipient_id")

        guard let occurredAt = r.string("occurred_at") else {
            throw ContractError(.invalidEvent, "\(r.path("occurred_at")) is required", field: r.path("occurred_at"))
        }
        guard Timestamp.isValid(occurredAt) else {
            throw ContractError(.invalidEvent,
                                "\(r.path("occurred_at")) must be an ISO-8601 timestamp with a time zone, like 2026-07-02T10:20:42.456Z",
                                field: r.path("occurred_at"))
        }

        var appState: AppState?
        if let raw = r.string("app_state") {
            guard let parsed = AppState(rawValue: raw) else {
                throw ContractError(.invalidEvent, "\(r.path("app_state")) must be one of foreground, background, killed",
                                    field: r.path("app_state"))
            }
            appState = parsed
        }
        let deeplink = try optionalText(r, "deeplink", max: maxDeeplink, code: .invalidEvent)
        let actionID = try optionalText(r, "action_id", max: maxIDLength, code: .invalidEvent)
        return EngagementEvent(type: type, messageID: messageID, recipientID: recipientID, occurredAt: occurredAt,
                               appState: appState, deeplink: deeplink, actionID: actionID)
    }

    // MARK: Shared pieces

    static func parseObject(_ body: [UInt8]) throws(ContractError) -> JSONObject {
        let value: JSONValue
        do {
            value = try JSONValue.parse(body)
        } catch {
            throw ContractError(.invalidJSON, "request body is not valid JSON (at byte \(error.offset))")
        }
        guard let object = value.objectValue else {
            throw ContractError(.invalidRequest, "body must be a JSON object")
        }
        return object
    }

    /// The client never chooses its contact: a `contact_id` is at most an assertion that must agree
    /// with the session (Voyado SDKs send one), and the policy may forbid it outright.
    ///
    /// Agreeing means the same UTF-8 bytes: a spelling that is only canonically equivalent
    /// (`e` + U+0301 for `é`, KELVIN SIGN for `K`) is another contact to an upstream.
    static func checkContact(_ sent: String?, field: String, policy: ClientPolicy, contactID: String) throws(ContractError) {
        guard let sent else { return }
        switch policy.contactID {
        case .reject:
            throw ContractError(.forbidden, "\(field) must not be sent to this app; the contact comes from your session", field: field)
        case .verify:
            guard TextRules.bytesEqual(sent, contactID) else {
                throw ContractError(.contactMismatch, "\(field) does not match the signed-in contact", field: field)
            }
        }
    }

    static func readPlatform(_ raw: String?, policy: ClientPolicy) throws(ContractError) -> Platform {
        guard let raw else { throw ContractError(.invalidRequest, "platform is required", field: "platform") }
        guard let platform = Platform(rawValue: raw) else {
            let enabled = Platform.allCases.filter { policy.platforms.contains($0) }.map(\.rawValue)
            let choices = enabled.isEmpty ? Platform.allCases.map(\.rawValue) : enabled
            throw ContractError(.invalidPlatform, "platform must be one of \(choices.joined(separator: ", "))", field: "platform")
        }
        guard policy.platforms.contains(platform) else {
            throw ContractError(.invalidPlatform, "platform \(platform.rawValue) is not enabled for this app", field: "platform")
        }
        return platform
    }

    static func readWebPushKeys(_ object: JSONObject) throws(ContractError) -> WebPushKeys {
        let r = try ObjectReader(object, prefix: "web_push_keys.", fields: webPushKeyFields, unknownFields: .reject,
                                 typeErrorCode: .invalidRequest)
        func key(_ name: String, bytes: Int, what: String, valid: ([UInt8]) -> Bool) throws(ContractError) -> String {
            guard let text = r.string(name) else {
                throw ContractError(.invalidWebPush, "\(r.path(name)) is required", field: r.path(name))
            }
            guard text.utf8.count <= 200, let decoded = Base64URL.decode(text), decoded.count == bytes, valid(decoded) else {
                throw ContractError(.invalidWebPush, "\(r.path(name)) must be base64url encoding \(what)", field: r.path(name))
            }
            return Base64URL.encode(decoded)
        }
        let p256dh = try key("p256dh", bytes: 65, what: "a 65-byte uncompressed P-256 public key") { $0[0] == 0x04 }
        let auth = try key("auth", bytes: 16, what: "a 16-byte secret") { _ in true }
        return WebPushKeys(p256dh: p256dh, auth: auth)
    }

    static func metadataField(_ r: ObjectReader, _ name: String, max: Int, charset: String? = nil,
                              allowed: ((UInt8) -> Bool)? = nil) throws(ContractError) -> String? {
        guard let value = try optionalText(r, name, max: max, code: .invalidRequest) else { return nil }
        if let allowed, let charset, !Text.all(value, in: allowed) {
            throw ContractError(.invalidRequest, "\(name) may only contain \(charset)", field: name)
        }
        return value
    }

    /// An optional free-text field: empty means absent; otherwise capped and free of control characters.
    static func optionalText(_ r: ObjectReader, _ name: String, max: Int, code: ErrorCode) throws(ContractError) -> String? {
        guard let value = r.string(name), !value.isEmpty else { return nil }
        let path = r.path(name)
        guard Text.length(value) <= max else { throw ContractError(code, "\(path) must be at most \(max) characters", field: path) }
        guard !TextRules.hasForbiddenCharacter(value) else { throw ContractError(code, "\(path) contains control characters", field: path) }
        return value
    }

    static func eventID(_ r: ObjectReader, _ name: String) throws(ContractError) -> String {
        let path = r.path(name)
        guard let value = r.string(name), !value.isEmpty else {
            throw ContractError(.invalidEvent, "\(path) is required", field: path)
        }
        guard Text.length(value) <= maxIDLength else {
            throw ContractError(.invalidEvent, "\(path) must be at most \(maxIDLength) characters", field: path)
        }
        guard !TextRules.hasForbiddenCharacter(value) else {
            throw ContractError(.invalidEvent, "\(path) contains control characters", field: path)
        }
        return value
    }
}
