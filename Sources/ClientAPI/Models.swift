import PWPolicy

/// Which APNs gateway a token belongs to. Tokens minted by a development build only work against
/// the sandbox gateway, so the client has to say which one it has.
public enum APNsEnvironment: String, Sendable {
    case production, sandbox
}

/// A browser's (or UnifiedPush distributor's) message-encryption keys (RFC 8291), stored in the
/// canonical unpadded base64url form whatever padding the client sent.
public struct WebPushKeys: Sendable, Equatable {
    /// The subscription's P-256 public key: 65 bytes, uncompressed point (`0x04 || X || Y`).
    public var p256dh: String
    /// The 16-byte authentication secret.
    public var auth: String

    public init(p256dh: String, auth: String) {
        self.p256dh = p256dh
        self.auth = auth
    }
}

/// Device facts the client may send. Forwarded where a provider takes them; never used for any
/// decision. An empty string is stored as `nil`: there is nothing to forward.
public struct InstallationMetadata: Sendable, Equatable {
    public var appVersion: String?
    public var osVersion: String?
    public var deviceModel: String?
    public var locale: String?
    public var timezone: String?

    public init(appVersion: String? = nil, osVersion: String? = nil, deviceModel: String? = nil,
                locale: String? = nil, timezone: String? = nil) {
        self.appVersion = appVersion
        self.osVersion = osVersion
        self.deviceModel = deviceModel
        self.locale = locale
        self.timezone = timezone
    }
}

/// A validated registration (`POST /v1/apps/{app}/installations`). Everything in it has passed
/// `RequestValidator.installation`, so it is safe to hash, store and forward.
///
/// - Important: `pushToken` and `previousPushToken` are secrets for logging purposes: log them only
///   as a short hash.
public struct Installation: Sendable, Equatable {
    public var platform: Platform
    public var pushService: PushService
    /// The token in its normalised form: APNs hex in lower case; FCM tokens and endpoint URLs as sent.
    public var pushToken: String
    /// Present exactly when `pushToken` is an endpoint URL: always for `web_push` and
    /// `unified_push`, and for the Web Push form of `apns`, `apns_voip` and `fcm`.
    public var webPushKeys: WebPushKeys?

    /// True for the Web Push form (an endpoint URL with keys), false for a vendor's raw token.
    public var isWebPushForm: Bool { webPushKeys != nil }
    /// `production` unless the client said `sandbox`; only `apns`/`apns_voip` may say `sandbox`.
    public var environment: APNsEnvironment
    /// The token this one replaces after a rotation, normalised like `pushToken`, never equal to it.
    public var previousPushToken: String?
    public var installationID: String?
    public var metadata: InstallationMetadata

    public init(platform: Platform, pushService: PushService, pushToken: String, webPushKeys: WebPushKeys? = nil,
                environment: APNsEnvironment = .production, previousPushToken: String? = nil,
                installationID: String? = nil, metadata: InstallationMetadata = InstallationMetadata()) {
        self.platform = platform
        self.pushService = pushService
        self.pushToken = pushToken
        self.webPushKeys = webPushKeys
        self.environment = environment
        self.previousPushToken = previousPushToken
        self.installationID = installationID
        self.metadata = metadata
    }
}

/// Voyado's engagement event types.
public enum EventType: String, Sendable {
    case delivered, opened, dismissed
}

/// The app's state when an event happened, as Voyado defines it.
public enum AppState: String, Sendable {
    case foreground, background, killed
}

/// One validated engagement event. The contact id is not part of it: the pipeline injects the
/// session's contact, never a client-sent one.
public struct EngagementEvent: Sendable, Equatable {
    public var type: EventType
    public var messageID: String
    public var recipientID: String
    /// Exactly as the client sent it, after checking it is an RFC 3339 timestamp with a zone.
    public var occurredAt: String
    public var appState: AppState?
    public var deeplink: String?
    public var actionID: String?

    public init(type: EventType, messageID: String, recipientID: String, occurredAt: String,
                appState: AppState? = nil, deeplink: String? = nil, actionID: String? = nil) {
        self.type = type
        self.messageID = messageID
        self.recipientID = recipientID
        self.occurredAt = occurredAt
        self.appState = appState
        self.deeplink = deeplink
        self.actionID = actionID
    }
}
