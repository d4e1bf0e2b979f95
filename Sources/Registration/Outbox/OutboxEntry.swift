import ClientAPI
import PWCore
import PWPolicy

/// One delivery waiting in the outbox: what the call needs later and nothing more. No provider key
/// (keys are resolved at delivery time from the running policy) and no user credential (a
/// provider that needs the user's own session cannot be queued). The push token and the Web Push
/// secrets are the only sensitive values, each in a field of its own (`token`, `installation`)
/// so that the store sealer encrypts them (`token`, `installation.previous_push_token` and
/// `installation.web_push_keys`' two values, each sealed on its own); the rest stays readable.
package struct OutboxEntry: Sendable, Equatable {
    package enum Operation: String, Sendable {
        case register, unregister
        /// A lifecycle event for a webhook receiver: `pushToken` holds its `webhook-id`, `event` its body.
        case webhook
    }

    package var operation: Operation
    package var app: String
    package var upstream: String
    package var contactID: String
    package var requestID: String
    /// Milliseconds since the epoch when the client's request was accepted: `queue.max_age` counts
    /// from here, across restarts and replicas.
    package var acceptedAtMillis: Int64
    package var pushToken: String
    /// The validated installation, for a registration.
    var installation: Installation?
    /// A webhook event's body (it names the contact: sealed like the contact field).
    var event: String?

    static let version = 1
    /// The accept times an entry may carry: the epoch to the end of year 9999 (the contract's
    /// timestamps' range). Anything else was written by hand, and `now - accepted` stays in range.
    static let acceptedRange: ClosedRange<Int64> = 0...253_402_300_799_999

    /// A registration's push token, whose waiting mark goes when the entry leaves the outbox;
    /// nil for an unregister (which cleared the mark when it was queued).
    var registeredToken: String? { operation == .register ? pushToken : nil }

    // MARK: Encoding

    /// The entry as one JSON object (the stream entry's `e` field), its push tokens and Web Push
    /// secrets sealed by `sealer`.
    package func encoded(sealer: StoreSealer = .none) -> String {
        var members: [JSONMember] = [
            JSONMember("v", .number(String(Self.version))),
            JSONMember("op", .string(operation.rawValue)),
            JSONMember("app", .string(app)),
            JSONMember("upstream", .string(upstream)),
            JSONMember("contact", .string(sealer.seal(contactID, boundTo: Self.place("contact", app: app, upstream: upstream)))),
            JSONMember("request_id", .string(requestID)),
            JSONMember("accepted_ms", .number(String(acceptedAtMillis))),
            JSONMember("token", .string(sealer.seal(pushToken, boundTo: Self.place("token", app: app, upstream: upstream)))),
        ]
        if let installation {
            members.append(JSONMember("installation", Self.encode(installation, sealer: sealer) { Self.place($0, app: app, upstream: upstream) }))
        }
        if let event {
            members.append(JSONMember("event", .string(sealer.seal(event, boundTo: Self.place("event", app: app, upstream: upstream)))))
        }
        return JSONValue.object(JSONObject(members)).encodedString()
    }

    package enum DecodingFailure: Error, Equatable {
        case notJSON, wrongVersion, missing(String), invalid(String)
        /// A sealed field that does not open: a store key this process does not hold, or altered bytes.
        case unreadable(String)

        /// The field at fault, for a log line (never its value: it may be a token).
        package var field: String {
            switch self {
            case .notJSON: return "e"
            case .wrongVersion: return "v"
            case .missing(let field), .invalid(let field), .unreadable(let field): return field
            }
        }
    }

    /// Reads an entry back, opening its sealed fields with `sealer` (a field written before the
    /// key was set is read as it is); anything written by hand that does not hold together is a
    /// failure (the worker dead-letters it), never a crash.
    package static func decode(_ text: String, sealer: StoreSealer = .none) -> Result<OutboxEntry, DecodingFailure> {
        guard let object = (try? JSONValue.parse(Array(text.utf8)))?.objectValue else { return .failure(.notJSON) }
        guard case .number(let v)? = object["v"], Int(v) == version else { return .failure(.wrongVersion) }
        func string(_ key: String) -> Result<String, DecodingFailure> {
            guard let value = object[key]?.stringValue, !value.isEmpty else { return .failure(.missing(key)) }
            return .success(value)
        }
        do {
            guard let operation = Operation(rawValue: try string("op").get()) else { return .failure(.invalid("op")) }
            guard case .number(let ms)? = object["accepted_ms"] else { return .failure(.missing("accepted_ms")) }
            guard let accepted = Int64(ms), acceptedRange.contains(accepted) else { return .failure(.invalid("accepted_ms")) }
            let app = try string("app").get(), upstream = try string("upstream").get()
            let place = { (field: String) in Self.place(field, app: app, upstream: upstream) }
            guard let token = sealer.open(try string("token").get(), boundTo: place("token")) else { return .failure(.unreadable("token")) }
            // Personal data: sealed like the token (an entry of an earlier build holds it in clear).
            guard let contact = sealer.open(try string("contact").get(), boundTo: place("contact")) else { return .failure(.unreadable("contact")) }
            var installation: Installation?
            if operation == .register {
                guard let value = object["installation"]?.objectValue else { return .failure(.missing("installation")) }
                installation = try decode(value, pushToken: token, sealer: sealer, place: place).get()
            }
            var event: String?
            if operation == .webhook {
                guard let sealed = object["event"]?.stringValue else { return .failure(.missing("event")) }
                guard let opened = sealer.open(sealed, boundTo: place("event")) else { return .failure(.unreadable("event")) }
                event = opened
            }
            var entry = OutboxEntry(operation: operation, app: app, upstream: upstream,
                                    // Logged and listed: only a request id PushWarden could have written is taken.
                                    contactID: contact, requestID: object["request_id"]?.stringValue.flatMap { RequestID.isSane($0) ? $0 : nil } ?? "-",
                                    acceptedAtMillis: accepted, pushToken: token, installation: installation)
            entry.event = event
            return .success(entry)
        } catch {
            return .failure(error)
        }
    }

    /// Where a sealed field of an entry belongs: its outbox (app and upstream, which the worker
    /// checks against the stream) and the field, so no sealed value opens in another entry's place.
    static func place(_ field: String, app: String, upstream: String) -> String {
        "outbox\u{0}" + app + "\u{0}" + upstream + "\u{0}" + field
    }

    private static func encode(_ installation: Installation, sealer: StoreSealer, place: (String) -> String) -> JSONValue {
        var members: [JSONMember] = [
            JSONMember("platform", .string(installation.platform.rawValue)),
            JSONMember("push_service", .string(installation.pushService.rawValue)),
            JSONMember("environment", .string(installation.environment.rawValue)),
        ]
        func add(_ key: String, _ value: String?) { if let value { members.append(JSONMember(key, .string(value))) } }
        if let keys = installation.webPushKeys {
            members.append(JSONMember("web_push_keys", .object(JSONObject([
                JSONMember("p256dh", .string(sealer.seal(keys.p256dh, boundTo: place("p256dh")))),
                JSONMember("auth", .string(sealer.seal(keys.auth, boundTo: place("auth")))),
            ]))))
        }
        add("previous_push_token", installation.previousPushToken.map { sealer.seal($0, boundTo: place("previous_push_token")) })
        add("installation_id", installation.installationID)
        let m = installation.metadata
        add("app_version", m.appVersion)
        add("os_version", m.osVersion)
        add("device_model", m.deviceModel)
        add("locale", m.locale)
        add("timezone", m.timezone)
        return .object(JSONObject(members))
    }

    private static func decode(_ object: JSONObject, pushToken: String, sealer: StoreSealer,
                               place: (String) -> String) -> Result<Installation, DecodingFailure> {
        guard let platform = object["platform"]?.stringValue.flatMap(Platform.init(rawValue:)),
              let service = object["push_service"]?.stringValue.flatMap(PushService.init(rawValue:)),
              let environment = object["environment"]?.stringValue.flatMap(APNsEnvironment.init(rawValue:)) else {
            return .failure(.invalid("installation"))
        }
        var keys: WebPushKeys?
        if let k = object["web_push_keys"]?.objectValue {
            guard let p256dh = k["p256dh"]?.stringValue, let auth = k["auth"]?.stringValue else { return .failure(.invalid("installation")) }
            guard let openP256dh = sealer.open(p256dh, boundTo: place("p256dh")), let openAuth = sealer.open(auth, boundTo: place("auth")) else {
                return .failure(.unreadable("installation.web_push_keys"))
            }
            keys = WebPushKeys(p256dh: openP256dh, auth: openAuth)
        }
        var previous: String?
        if let sealed = object["previous_push_token"]?.stringValue {
            guard let opened = sealer.open(sealed, boundTo: place("previous_push_token")) else {
                return .failure(.unreadable("installation.previous_push_token"))
            }
            previous = opened
        }
        let s = { (key: String) in object[key]?.stringValue }
        return .success(Installation(platform: platform, pushService: service, pushToken: pushToken, webPushKeys: keys, environment: environment,
                                     previousPushToken: previous, installationID: s("installation_id"),
                                     metadata: InstallationMetadata(appVersion: s("app_version"), osVersion: s("os_version"),
                                                                    deviceModel: s("device_model"), locale: s("locale"), timezone: s("timezone"))))
    }
}
