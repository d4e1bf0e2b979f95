import PWCore

/// A loaded, validated policy file: the only thing a security reviewer has to read.
///
/// Every value here has passed `PolicyLoader`'s checks. Secrets are never held here, only where
/// they come from (`SecretRef`); they are resolved when the server starts.
public struct Policy: Sendable, Equatable {
    public var version: Int
    /// The top-level `serial`: raised with every signed change, so that an older signed file
    /// cannot be put back (`serve --policy-key` requires it). Nil when the file has none.
    public var serial: Int?
    /// Apps in file order.
    public var apps: [AppPolicy]
    /// The top-level `store:` block; nil when values are stored unencrypted.
    public var store: StorePolicy?
    /// The operator's token for the server-to-server API (top-level `admin`), which reaches
    /// every app; nil, and no app has a token of its own (`AppPolicy.admin`): its routes answer `404`.
    public var admin: AdminPolicy?
    /// The signed evidence trail of erasures (top-level `audit`); nil: none is kept.
    public var audit: AuditPolicy?
    /// Receivers of lifecycle events (top-level `webhooks`), in file order; empty: none.
    public var webhooks: [WebhookPolicy] = []
    /// The file this policy came from, for messages.
    public var sourcePath: String
    /// Where values that are judged after loading sit in the file, by path
    /// (`apps.shop.session.jwks_file`).
    public var locations: [String: PolicyLocation]

    /// The largest `serial`: 2^53 - 1, the largest integer Redis's Lua numbers (doubles) hold
    /// exactly, where the highest serial seen is kept.
    public static let maximumSerial = 9_007_199_254_740_991

    public init(version: Int, apps: [AppPolicy], admin: AdminPolicy? = nil, sourcePath: String,
                locations: [String: PolicyLocation] = [:], store: StorePolicy? = nil, serial: Int? = nil, audit: AuditPolicy? = nil) {
        self.version = version
        self.serial = serial
        self.audit = audit
        self.apps = apps
        self.admin = admin
        self.store = store
        self.sourcePath = sourcePath
        self.locations = locations
    }

    /// A diagnostic about the value at `path`, at its place in the file (or line 1, column 1 when
    /// the loader did not record one).
    public func diagnostic(at path: String, _ message: String, severity: Diagnostic.Severity = .error) -> Diagnostic {
        let location = locations[path] ?? PolicyLocation(line: 1, column: 1)
        return Diagnostic(file: sourcePath, line: location.line, column: location.column, path: path, message: message, severity: severity)
    }

    /// The app whose id has exactly these bytes (no Unicode canonical equivalence).
    public func app(_ id: String) -> AppPolicy? { apps.first { TextRules.bytesEqual($0.id, id) } }
}

/// Who may call the server-to-server API on the admin listener: the bearer of the token `token`
/// names. At the top level (`admin`) it is the operator's and reaches every app; under an app
/// (`apps.<id>.admin`) it reaches that app only. Its value is judged when it is read, at start
/// and at reload (`minimumTokenBytes`), never by `policy check`, which reads no secret.
public struct AdminPolicy: Sendable, Equatable {
    /// The shortest admin token accepted: 32 bytes, what `openssl rand -hex 16` prints (128 bits
    /// of randomness in hex; `openssl rand -base64 32` gives 44).
    public static let minimumTokenBytes = 32

    public var token: SecretRef

    public init(token: SecretRef) { self.token = token }

    /// Why `value` (the resolved secret) cannot be the admin token, or nil when it can: at least
    /// `minimumTokenBytes` of visible ASCII (a header value carries nothing else unchanged).
    /// The reason names the reference and the length, never the value.
    public func problem(with value: [UInt8]) -> String? {
        guard value.count >= Self.minimumTokenBytes else {
            return "the admin token from \(token) is \(value.count) bytes; at least \(Self.minimumTokenBytes) are required (openssl rand -hex 32 makes one)"
        }
        guard value.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else {
            return "the admin token from \(token) must be visible ASCII without spaces (openssl rand -hex 32 makes one)"
        }
        return nil
    }
}

/// The evidence trail (policy key `audit`): every erasure appends a receipt signed with the
/// Ed25519 private key `signing_key` names (PEM, as `openssl genpkey -algorithm ed25519` writes it).
public struct AuditPolicy: Sendable, Equatable {
    public var signingKey: SecretRef

    public init(signingKey: SecretRef) { self.signingKey = signingKey }
}

public struct AppPolicy: Sendable, Equatable {
    public var id: String
    public var session: AppSession
    public var client: ClientPolicy
    public var dedupe: DedupePolicy
    public var upstreams: [UpstreamPolicy]
    public var inventory: InventoryPolicy
    /// The app's own server-to-server token (`apps.<id>.admin`): it reaches this app's routes
    /// only. Nil: only the operator's token (`Policy.admin`), if any, reaches them.
    public var admin: AdminPolicy?
    /// The mass-death guard of dead-token reports (`apps.<id>.dead_tokens`).
    public var deadTokens = DeadTokenPolicy()

    public init(id: String, session: AppSession, client: ClientPolicy, dedupe: DedupePolicy, upstreams: [UpstreamPolicy],
                inventory: InventoryPolicy = InventoryPolicy(), admin: AdminPolicy? = nil) {
        self.id = id
        self.session = session
        self.client = client
        self.dedupe = dedupe
        self.upstreams = upstreams
        self.inventory = inventory
        self.admin = admin
    }

    /// An app whose sessions are JWTs.
    public init(id: String, session: SessionPolicy, client: ClientPolicy, dedupe: DedupePolicy, upstreams: [UpstreamPolicy]) {
        self.init(id: id, session: .jwt(session), client: client, dedupe: dedupe, upstreams: upstreams)
    }

    /// The upstream whose outcome answers the client.
    public var primary: UpstreamPolicy? { upstreams.first { $0.role == .primary } }
}

/// Where a secret comes from. The policy never holds the secret itself.
public enum SecretRef: Sendable, Hashable, CustomStringConvertible {
    case env(String)
    case file(String)

    /// `env:NAME` or `file:/path`: the only form in which a secret is ever printed.
    public var description: String {
        switch self {
        case .env(let name): return "env:\(name)"
        case .file(let path): return "file:\(path)"
        }
    }
}

public enum JWTAlgorithm: String, Sendable, Hashable, CaseIterable {
    case hs256 = "HS256"
    case rs256 = "RS256"
    case es256 = "ES256"
}

/// How a client proves who it is (policy key `session`, by its `type`).
public enum AppSession: Sendable, Equatable {
    /// `type: jwt`: a signed token verified in process.
    case jwt(SessionPolicy)
    /// `type: introspect`: an opaque token the app backend vouches for (RFC 7662).
    case introspect(IntrospectionPolicy)

    public var jwt: SessionPolicy? {
        if case .jwt(let policy) = self { return policy }
        return nil
    }

    public var introspection: IntrospectionPolicy? {
        if case .introspect(let policy) = self { return policy }
        return nil
    }
}

/// `session.type: introspect` (docs/configuration.md, sessions): the client's token is POSTed to the app
/// backend's RFC 7662 endpoint, authenticated with PushWarden's own credential.
public struct IntrospectionPolicy: Sendable, Equatable {
    /// PushWarden's own credential at the endpoint (`client_auth`).
    public enum ClientAuth: Sendable, Equatable {
        /// `Authorization: Bearer <secret>`.
        case bearer(SecretRef)
        /// `Authorization: Basic base64(user:password)` (RFC 7617).
        case basic(user: String, password: SecretRef)

        /// `bearer` or `basic`, as the policy names it.
        public var kind: String {
            switch self {
            case .bearer: return "bearer"
            case .basic: return "basic"
            }
        }

        public var secret: SecretRef {
            switch self {
            case .bearer(let ref): return ref
            case .basic(_, let ref): return ref
            }
        }
    }

    /// Where the client's token is read: exactly one place.
    public enum TokenSource: Sendable, Equatable {
        /// `NAME: Bearer <token>`.
        case header(String)
        /// The bare token as the value of this cookie.
        case cookie(String)
    }

    /// https, or http to a loopback host.
    public var url: String
    public var clientAuth: ClientAuth
    public var source: TokenSource
    /// The member of the endpoint's answer that holds the contact id.
    public var contactField: String
    /// How long an active answer is used (never past its `exp`), in seconds.
    public var cacheTTLSeconds: Int
    /// Bound on one call to the endpoint, connection included.
    public var timeoutMillis: Int

    public init(url: String, clientAuth: ClientAuth, source: TokenSource = .header("Authorization"), contactField: String,
                cacheTTLSeconds: Int = 60, timeoutMillis: Int = 500) {
        self.url = url
        self.clientAuth = clientAuth
        self.source = source
        self.contactField = contactField
        self.cacheTTLSeconds = cacheTTLSeconds
        self.timeoutMillis = timeoutMillis
    }
}

/// `session.type: jwt`: how a JWT session is found and verified.
public struct SessionPolicy: Sendable, Equatable {
    public enum Keys: Sendable, Equatable {
        /// A JWKS document on disk; tokens select a key by `kid`.
        case jwksFile(String)
        /// A shared HMAC secret (HS256 only).
        case hmacSecret(SecretRef)
        /// A JWKS document fetched from the identity provider and refreshed in the background.
        case jwksURL(JWKSURL)
    }

    /// `jwks_url`, `jwks_refresh` and the optional `jwks_file` that serves when the first fetch fails.
    public struct JWKSURL: Sendable, Equatable {
        /// https, or http to a loopback host.
        public var url: String
        /// Seconds between background refreshes when the answer names no `Cache-Control: max-age`.
        public var refreshSeconds: Int
        /// Keys to start with when the first fetch fails.
        public var fallbackFile: String?

        public init(url: String, refreshSeconds: Int = 600, fallbackFile: String? = nil) {
            self.url = url
            self.refreshSeconds = refreshSeconds
            self.fallbackFile = fallbackFile
        }
    }

    /// Header carrying `Bearer <jwt>` (default `Authorization`); nil when only a cookie is used.
    public var header: String?
    /// Cookie carrying the bare JWT; checked when the header is absent.
    public var cookie: String?
    public var algorithms: [JWTAlgorithm]
    public var keys: Keys
    public var issuer: String?
    public var audience: String?
    /// The claim holding the server-side contact id (default `sub`).
    public var contactClaim: String
    /// Clock skew tolerated for `exp`, `nbf` and `iat`, in seconds.
    public var leewaySeconds: Int
    /// How many accepted sessions are kept, so that the very token sent again is not verified
    /// again before its `exp` (`verified_cache`; 0: every token is verified on every request).
    public var verifiedCache: Int
    /// `backchannel_logout`: the identity provider may end sessions here (OpenID Connect
    /// Back-Channel Logout 1.0); nil, and the logout route answers `501`.
    public var backchannelLogout: BackchannelLogoutPolicy?

    /// Half of it is 3/4 of a power of two, so each generation fills its table: a dictionary keeps
    /// its load under 3/4, and one entry more would double the table.
    public static let defaultVerifiedCache = 98_304

    public init(header: String?, cookie: String?, algorithms: [JWTAlgorithm], keys: Keys, issuer: String?,
                audience: String?, contactClaim: String, leewaySeconds: Int, verifiedCache: Int = SessionPolicy.defaultVerifiedCache,
                backchannelLogout: BackchannelLogoutPolicy? = nil) {
        self.backchannelLogout = backchannelLogout
        self.header = header
        self.cookie = cookie
        self.algorithms = algorithms
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.contactClaim = contactClaim
        self.leewaySeconds = leewaySeconds
        self.verifiedCache = verifiedCache
    }
}

/// `session.backchannel_logout` (OpenID Connect Back-Channel Logout 1.0): which claim of the
/// client's session names its session at the identity provider, and what a logout removes.
public struct BackchannelLogoutPolicy: Sendable, Equatable {
    public enum Scope: String, Sendable, CaseIterable {
        /// The installations registered under the logged-out session only.
        case session
        /// Every installation of the logged-out person.
        case contact
    }

    /// The session claim kept with each registration (`sid`, what logout tokens carry).
    public var sidClaim: String
    public var scope: Scope

    public init(sidClaim: String = "sid", scope: Scope = .session) {
        self.sidClaim = sidClaim
        self.scope = scope
    }
}

public enum Platform: String, Sendable, Hashable, CaseIterable {
    case ios, android, web
}

public enum PushService: String, Sendable, Hashable, CaseIterable {
    case apns, apnsVoip = "apns_voip", fcm, unifiedPush = "unified_push", webPush = "web_push"
}

/// What clients may send (policy key `client`).
public struct ClientPolicy: Sendable, Equatable {
    public enum ContactIDMode: String, Sendable { case verify, reject }
    public enum UnknownFields: String, Sendable { case reject, drop }

    public struct RateLimit: Sendable, Equatable {
        public var requests: Int
        public var perSeconds: Int
        public init(requests: Int, perSeconds: Int) {
            self.requests = requests
            self.perSeconds = perSeconds
        }
    }

    public var platforms: [Platform]
    public var contactID: ContactIDMode
    public var unknownFields: UnknownFields
    /// Largest request body accepted, in bytes.
    public var maxBody: Int
    /// Largest events batch accepted.
    public var maxEvents: Int
    /// Per-contact limits by route (`register`, `unregister`, `events`); empty when unlimited.
    public var rateLimits: [String: RateLimit]
    /// Most installations one contact keeps (`max_installations`); registering one more evicts the
    /// least recently seen. Nil: no cap.
    public var maxInstallations: Int?

    public init(platforms: [Platform], contactID: ContactIDMode = .verify, unknownFields: UnknownFields = .reject,
                maxBody: Int = 16 * 1024, maxEvents: Int = 100, rateLimits: [String: RateLimit] = [:], maxInstallations: Int? = nil) {
        self.platforms = platforms
        self.contactID = contactID
        self.unknownFields = unknownFields
        self.maxBody = maxBody
        self.maxEvents = maxEvents
        self.rateLimits = rateLimits
        self.maxInstallations = maxInstallations
    }
}

/// What the inventory of a contact's installations keeps (`apps.<id>.inventory`).
public struct InventoryPolicy: Sendable, Equatable {
    /// An installation not registered again for this long is unregistered upstream and forgotten
    /// (`expire_after`, at least 1 s). Nil: installations never expire.
    public var expireAfterMillis: Int?
    public init(expireAfterMillis: Int? = nil) { self.expireAfterMillis = expireAfterMillis }
}

public struct DedupePolicy: Sendable, Equatable {
    /// An unchanged registration is re-sent at most this often (seconds).
    public var refreshAfterSeconds: Int
    public init(refreshAfterSeconds: Int) { self.refreshAfterSeconds = refreshAfterSeconds }
}

public struct RetryPolicy: Sendable, Equatable {
    /// Total attempts, the first included.
    public var attempts: Int
    public var backoffMillis: Int
    public var maxBackoffMillis: Int
    public init(attempts: Int = 3, backoffMillis: Int = 200, maxBackoffMillis: Int = 2000) {
        self.attempts = attempts
        self.backoffMillis = backoffMillis
        self.maxBackoffMillis = maxBackoffMillis
    }
}

public struct UpstreamPolicy: Sendable, Equatable {
    public enum Role: String, Sendable { case primary, shadow }
    public enum Delivery: String, Sendable { case sync, queued }

    public var name: String
    public var provider: ProviderConfig
    public var role: Role
    public var delivery: Delivery
    public var timeoutMillis: Int
    public var retry: RetryPolicy
    /// How long queued deliveries are kept and when a dead replica's are taken over.
    public var queue: QueuePolicy
    public var circuit: CircuitPolicy

    public init(name: String, provider: ProviderConfig, role: Role = .primary, delivery: Delivery = .sync,
                timeoutMillis: Int = 2000, retry: RetryPolicy = RetryPolicy(), queue: QueuePolicy = QueuePolicy(),
                circuit: CircuitPolicy = CircuitPolicy()) {
        self.name = name
        self.provider = provider
        self.role = role
        self.delivery = delivery
        self.timeoutMillis = timeoutMillis
        self.retry = retry
        self.queue = queue
        self.circuit = circuit
    }
}

/// `upstreams[].queue` (docs/architecture.md, the outbox): a queued delivery is retried until `maxAge`, then
/// dead-lettered; one claimed by a replica that stopped answering is taken over after `claimAfter`.
public struct QueuePolicy: Sendable, Equatable {
    public var maxAgeMillis: Int
    public var claimAfterMillis: Int
    public init(maxAgeMillis: Int = 86_400_000, claimAfterMillis: Int = 30_000) {
        self.maxAgeMillis = maxAgeMillis
        self.claimAfterMillis = claimAfterMillis
    }
}

/// `upstreams[].circuit` (docs/architecture.md, the outbox): open after `failures` within `within`, fail fast
/// while open, one probe after `openFor`.
public struct CircuitPolicy: Sendable, Equatable {
    public var failures: Int
    public var withinMillis: Int
    public var openForMillis: Int
    public init(failures: Int = 5, withinMillis: Int = 10_000, openForMillis: Int = 30_000) {
        self.failures = failures
        self.withinMillis = withinMillis
        self.openForMillis = openForMillis
    }
}

/// Provider-specific settings. Each provider's case carries exactly what its document needs; the
/// settings types, their policy keys and readers live in `Providers/<Provider>+Policy.swift`.
public enum ProviderConfig: Sendable, Equatable {
    case voyado(VoyadoConfig)
    case voidhash(VoidhashConfig)
    case fluxer(FluxerConfig)
    case nativeNotify(NativeNotifyConfig)
    case pushNotice(PushNoticeConfig)
    /// Logs the exact request it would send (secrets and tokens redacted) and answers as the
    /// emulated provider would.
    case dryRun(DryRunConfig)

    /// The settings, as a reviewer reads them.
    public var settings: any ProviderSettings {
        switch self {
        case .voyado(let c): return c
        case .voidhash(let c): return c
        case .fluxer(let c): return c
        case .nativeNotify(let c): return c
        case .pushNotice(let c): return c
        case .dryRun(let c): return c
        }
    }

    /// The provider's name as written in the policy.
    public var kind: String { settings.providerName }

    /// The provider whose requests and answers this upstream makes: a dry run's emulated one.
    public var emulated: ProviderKind {
        switch self {
        case .voyado: return .voyado
        case .voidhash: return .voidhash
        case .fluxer: return .fluxer
        case .nativeNotify: return .nativeNotify
        case .pushNotice: return .pushNotice
        case .dryRun(let c): return c.emulates
        }
    }

    public var traits: ProviderTraits { emulated.traits }
}
