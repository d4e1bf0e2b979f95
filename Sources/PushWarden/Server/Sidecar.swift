import HTTPClient
import HTTPServer
import Loops
import PWCore
import PWCrypto
import PWPolicy
import RedisClient
import SessionAuth
import Synchronization

/// Process-level settings that are not policy: where to listen, which store, how loud to log.
/// Flags win over `PUSHWARDEN_*` environment variables, which win over these defaults.
public struct ServeConfiguration: Sendable {
    public var listen: HostPort
    public var admin: HostPort
    /// `redis://...` or `redis+cluster://seed,seed...`; nil runs on the embedded in-memory store.
    public var redisURL: String?
    public var logLevel: Logger.Level
    /// Event loops (threads) of the client listener (0: one per core).
    public var threads: Int
    /// How long in-flight requests may take to finish on shutdown.
    public var shutdownGraceSeconds: Double
    /// Concurrent client connections from one address (over every loop); 0 means unlimited.
    /// Behind a front proxy every connection has the proxy's address: raise it there.
    public var connectionsPerAddress: Int = 1_024
    /// Seconds a client connection may take to send a complete request head (from its start, or
    /// from the previous response on a kept-alive connection) before it is closed; 0: no limit.
    public var headTimeoutSeconds: Double = 10
    /// Upstream connections kept per provider host (HTTP/1.1 needs one per in-flight call), shared
    /// out evenly between the event loops, each of which keeps its own.
    public var upstreamConnectionsPerHost: Int = 512

    public init(listen: HostPort = HostPort(host: "127.0.0.1", port: 8080), admin: HostPort = HostPort(host: "127.0.0.1", port: 9090),
                redisURL: String? = nil, logLevel: Logger.Level = .info, threads: Int = 0, shutdownGraceSeconds: Double = 10) {
        self.listen = listen
        self.admin = admin
        self.redisURL = redisURL
        self.logLevel = logLevel
        self.threads = threads
        self.shutdownGraceSeconds = shutdownGraceSeconds
    }
}

/// `HOST:PORT`, with IPv6 hosts in brackets (`[::1]:8080`).
public struct HostPort: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `HOST:PORT` or `:PORT` (every IPv4 address); the port is required.
    public init?(_ text: String) {
        let written = text.hasPrefix(":") ? "0.0.0.0" + text : text
        guard case .success(let authority) = Authority.parse(written), let port = authority.port else { return nil }
        self.host = String(authority.host)
        self.port = port
    }

    public var description: String { Authority.format(host: host, port: port) }
}

/// Why the sidecar cannot start: the message is for the operator and never holds a secret.
public struct StartupError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The running sidecar: the client listener, the admin listener, the store and the upstream client.
///
/// The apps it serves can be replaced while it runs (`reload`); nothing else can.
public final class Sidecar: Sendable {
    public let metrics: Metrics
    private let clientServer: HTTPServer
    private let adminServer: HTTPServer
    private let httpClient: HTTPClient?
    private let redis: RedisClient?
    private let logger: Logger
    /// Internal for tests: the registration operations behind it are what the admin API calls.
    let handler: ClientAPIHandler
    /// The server-to-server API on the admin listener; a reload replaces its tokens.
    private let contactRoutes: ContactRoutes
    private let builder: AppBuilder
    /// The outbox's workers and its metrics sampler; cancelled at shutdown.
    private let outboxTasks: [Task<Void, Never>]
    /// Whether queued deliveries can be kept (the Redis store): a policy that needs them is
    /// refused at start and at reload otherwise.
    private let hasOutbox: Bool
    /// The `store` block in force: its keys are read once, at start. A reload that changes it is
    /// refused (restart to change the keys), so the keys in force are always the file's.
    private let storePolicy: StorePolicy?
    /// The highest signed policy version put in force: in Redis (every replica's), else this
    /// process's. Judged at start and at every reload of a signed policy.
    private let serials: any PolicySerialRecord
    /// The running policy's version (nil: no serial, or no file hash); a reload judges against it.
    private let running: Mutex<PolicyVersion?>

    /// The bound client port (useful when configured with port 0).
    public var port: Int { clientServer.port }
    public var adminPort: Int { adminServer.port }

    /// The parts that outlive a policy: store, upstream network, metrics and the app builder.
    private struct Parts {
        let store: any DedupeStore
        let redis: RedisClient?
        let httpClient: HTTPClient?
        let builder: AppBuilder
        let loopCount: Int
        let serials: any PolicySerialRecord

        init(configuration: ServeConfiguration, logger: Logger, secrets: any SecretResolving, store: (any DedupeStore)?,
             transport: (any UpstreamTransport)?, jwksTiming: JWKSTiming, clock: any WallClock) throws(StartupError) {
            if let store {
                self.store = store
                redis = nil
            } else if let url = configuration.redisURL {
                let redisConfiguration: RedisConfiguration
                do {
                    redisConfiguration = try RedisConfiguration(url: url)
                } catch {
                    throw StartupError("invalid Redis URL: \(error.detail)")
                }
                let client = RedisClient(configuration: redisConfiguration)
                redis = client
                self.store = RedisStore(client: client)
            } else {
                redis = nil
                self.store = MemoryStore()
            }

            serials = (self.store as? RedisStore) ?? ProcessPolicySerials()
            loopCount = configuration.threads > 0 ? configuration.threads : HTTPServerConfiguration().threads
            let network: any UpstreamTransport
            if let transport {
                network = transport
                httpClient = nil
            } else {
                do {
                    // Providers speaking HTTP/1.1 need one connection per in-flight call: at 50 ms per call,
                    // 64 connections would cap a host at about 1,300 calls/s. Each event loop keeps its own
                    // connections, so the limit is shared out between them.
                    let perLoop = max(1, (configuration.upstreamConnectionsPerHost + loopCount - 1) / loopCount)
                    let client = try HTTPClient(configuration: HTTPClientConfiguration(
                        maxConnectionsPerHost: perLoop, maxTotalConnections: perLoop * 2))
                    httpClient = client
                    network = client
                } catch {
                    throw StartupError("cannot start the upstream HTTP client: \(error.detail)")
                }
            }
            builder = AppBuilder(secrets: secrets, network: network, metrics: Metrics(), logger: logger, jwksTiming: jwksTiming,
                                 clock: clock)
        }
    }

    /// Resolves every secret, builds every app and starts both listeners, without any network
    /// call: a policy with a `jwks_url` needs `start`, which fetches the keys first.
    ///
    /// - Parameters:
    ///   - store: overrides the store chosen by `configuration.redisURL` (tests).
    ///   - transport: overrides the network for real providers (tests).
    ///   - clock: the wall clock sessions are judged by (token `exp`, introspection cache; tests set it).
    public convenience init(policy: Policy, configuration: ServeConfiguration, logger: Logger,
                            secrets: some SecretResolving = SecretResolver(), store: (any DedupeStore)? = nil,
                            transport: (any UpstreamTransport)? = nil, clock: any WallClock = SystemClock()) throws(StartupError) {
        let parts = try Parts(configuration: configuration, logger: logger, secrets: secrets, store: store, transport: transport,
                              jwksTiming: JWKSTiming(), clock: clock)
        let apps = try parts.builder.buildOffline(policy)
        try self.init(policy: policy, sha256: nil, configuration: configuration, logger: logger, parts: parts, apps: apps,
                      administration: nil)
    }

    /// As the public initializer, with `administration` standing in for the operations behind
    /// the server-to-server API (tests).
    convenience init(policy: Policy, configuration: ServeConfiguration, logger: Logger, secrets: some SecretResolving,
                     store: (any DedupeStore)?, administration: any ContactAdministration) throws(StartupError) {
        let parts = try Parts(configuration: configuration, logger: logger, secrets: secrets, store: store, transport: nil,
                              jwksTiming: JWKSTiming(), clock: SystemClock())
        let apps = try parts.builder.buildOffline(policy)
        try self.init(policy: policy, sha256: nil, configuration: configuration, logger: logger, parts: parts, apps: apps,
                      administration: administration)
    }

    /// Builds every app (fetching each `jwks_url` first: `serve` does not start when a first
    /// fetch fails and no `jwks_file` fallback is given), then starts both listeners.
    ///
    /// - Parameters:
    ///   - sha256: the policy file's SHA-256 (hex), logged and exported as `pushwarden_policy_info`.
    ///   - signed: the file's signature was checked (`--policy-key`): its `serial` must be at least
    ///     the highest the store has seen, and another file's than the one seen with it.
    ///   - jwksTiming: the `jwks_url` clock (tests shorten it).
    ///   - clock: the wall clock sessions are judged by (token `exp`, introspection cache; tests set it).
    public static func start(policy: Policy, sha256: String? = nil, signed: Bool = false, configuration: ServeConfiguration, logger: Logger,
                             secrets: some SecretResolving = SecretResolver(), store: (any DedupeStore)? = nil,
                             transport: (any UpstreamTransport)? = nil, jwksTiming: JWKSTiming = JWKSTiming(),
                             clock: any WallClock = SystemClock()) async throws(StartupError) -> Sidecar {
        let parts = try Parts(configuration: configuration, logger: logger, secrets: secrets, store: store, transport: transport,
                              jwksTiming: jwksTiming, clock: clock)
        let apps = try await parts.builder.build(policy)
        if signed {
            do throws(StartupError) {
                try await admitAtStart(policy, sha256: sha256, record: parts.serials, logger: logger)
            } catch {
                parts.builder.shutdown()
                parts.redis?.close()
                throw error
            }
        }
        return try Sidecar(policy: policy, sha256: sha256, configuration: configuration, logger: logger, parts: parts, apps: apps,
                           administration: nil)
    }

    /// - Parameter administration: stands in for the operations behind the server-to-server API
    ///   (tests); nil: the registrar's own (the inventory).
    private init(policy: Policy, sha256: String?, configuration: ServeConfiguration, logger: Logger, parts: Parts,
                 apps: [String: AppRuntime], administration: (any ContactAdministration)?) throws(StartupError) {
        self.logger = logger
        self.metrics = parts.builder.metrics
        self.redis = parts.redis
        self.httpClient = parts.httpClient
        self.builder = parts.builder
        let chosenStore = parts.store
        let outboxClient = (chosenStore as? RedisStore)?.client
        hasOutbox = outboxClient != nil
        storePolicy = policy.store
        serials = parts.serials
        running = Mutex(Self.version(of: policy, sha256: sha256))
        let sealer: StoreSealer
        let digests: KeyDigest
        let adminTokens: AdminTokens
        let trail: AuditTrail?
        do throws(StartupError) {
            try Self.checkQueued(policy, hasOutbox: hasOutbox)
            sealer = try StoreSealer.make(for: policy, secrets: parts.builder.secrets)
            digests = try KeyDigest.make(for: policy, secrets: parts.builder.secrets)
            adminTokens = try AdminTokens.resolve(policy, secrets: parts.builder.secrets)
            trail = try Self.auditTrail(policy, store: chosenStore, secrets: parts.builder.secrets)
        } catch {
            builder.shutdown()
            throw error
        }

        let pending = PendingWrites(metrics: metrics, logger: logger.with(label: "store"))
        let deduper = Deduper(store: chosenStore, metrics: metrics, logger: logger.with(label: "dedupe"), pending: pending)
        let identities = IdentityStore(store: chosenStore, logger: logger.with(label: "identity"), sealer: sealer, pending: pending)
        let outbox = outboxClient.map { Outbox(client: $0, apps: Array(apps.values), sealer: sealer, digests: digests) }
        let inventoryStore: any InventoryStore = (chosenStore as? RedisStore).map { RedisInventoryStore(store: $0) } ?? MemoryInventoryStore()
        let registrar = Registrar(deduper: deduper, identities: identities, metrics: metrics, logger: logger.with(label: "registrar"),
                                  outbox: outbox, inventory: Inventory(store: inventoryStore, sealer: sealer, digests: digests,
                                                                       logger: logger.with(label: "inventory")))
        let handler = ClientAPIHandler(apps: apps, registrar: registrar,
                                       rateLimiter: RateLimiter(store: chosenStore, digests: digests, metrics: metrics, logger: logger.with(label: "rate-limit")),
                                       metrics: metrics,
                                       logger: logger.with(label: "client-api"))
        self.handler = handler
        let contactRoutes = ContactRoutes(tokens: adminTokens, administration: administration ?? registrar, apps: { handler.apps }, metrics: metrics,
                                          logger: logger, receipts: trail, digests: digests)
        self.contactRoutes = contactRoutes
        let sharedMetrics = parts.builder.metrics
        let outboxLogger = logger.with(label: "outbox")
        let threads = parts.loopCount
        do {
            clientServer = try HTTPServer(
                // 16 KiB per connection bounds a request head (a session JWT is ~1 KiB) and is what
                // libmicrohttpd zeroes on every keep-alive request: half its default.
                configuration: HTTPServerConfiguration(host: configuration.listen.host, port: configuration.listen.port, threads: threads,
                                                       perAddressConnectionLimit: configuration.connectionsPerAddress,
                                                       headTimeoutSeconds: configuration.headTimeoutSeconds,
                                                       connectionMemoryLimit: 16 * 1024),
                handler: handler)
        } catch {
            builder.shutdown()
            throw StartupError("cannot listen on \(configuration.listen): \(error.message)")
        }
        do {
            adminServer = try HTTPServer(
                configuration: HTTPServerConfiguration(host: configuration.admin.host, port: configuration.admin.port, threads: 1,
                                                       perAddressConnectionLimit: configuration.connectionsPerAddress,
                                                       headTimeoutSeconds: configuration.headTimeoutSeconds, name: "pw-admin"),
                handler: AdminHandler(metrics: metrics, store: chosenStore, policyLoaded: true, contacts: contactRoutes))
        } catch {
            builder.shutdown()
            throw StartupError("cannot listen on \(configuration.admin) (admin): \(error.message)")
        }
        // The workers deliver on the client listener's loops, as sync requests do.
        let loops = clientServer.eventLoops
        outboxTasks = (outbox.map { Self.startOutbox($0, handler: handler, registrar: registrar, metrics: sharedMetrics, loops: loops,
                                                     inFlight: configuration.upstreamConnectionsPerHost, logger: outboxLogger) } ?? [])
            + [Self.startSweeper(registrar: registrar, handler: handler, metrics: sharedMetrics, logger: logger.with(label: "inventory")),
               Self.startHeapTrim()]
        for app in apps.values { app.jwks?.start() }
        if let sha256 { metrics.policyInForce(sha256: sha256, serial: policy.serial) }
        var fields = [
            ("listen", HostPort(host: configuration.listen.host, port: clientServer.port).description),
            ("admin", HostPort(host: configuration.admin.host, port: adminServer.port).description),
            ("store", chosenStore.kind), ("policy", policy.sourcePath), ("apps", policy.apps.map(\.id).joined(separator: ",")),
        ]
        if let sha256 { fields.append(("policy_sha256", sha256)) }
        if let serial = policy.serial { fields.append(("policy_serial", String(serial))) }
        // The key id is an HMAC of the key under a fixed label: it tells keys apart, nothing more.
        fields.append(("encryption_at_rest", sealer.keyID.map { "aes-256-gcm key \($0), \(sealer.previousKeyCount) previous" } ?? "off"))
        fields.append(("key_names", digests.isKeyed ? "hmac-sha256 (store.digest_key)" : "sha256"))
        fields.append(("server_to_server_api", Self.describe(adminTokens)))
        logger.info("pushwarden listening", fields)
        if sealer.isEnabled, !digests.isKeyed { logger.warning(StoreKeys.missingDigestKey) }
    }

    /// Why a reload was refused; the running policy stays.
    public struct ReloadError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Builds the apps of `policy` completely (secrets resolved, upstreams made, `jwks_url` keys
    /// fetched) and only then puts them in force; requests in flight finish on the apps they
    /// began with. On any failure nothing switches. Counted in `pushwarden_policy_reloads_total`.
    ///
    /// A signed policy (`signed`) must also have a serial above the running one's (or be the very
    /// file in force), and the store must admit it (`PolicySerialRecord`): checked first against
    /// the running version, then, once everything is built, in the store, which records it.
    ///
    /// - Important: callers serialize reloads (`PolicyReloader` does).
    public func reload(_ policy: Policy, sha256: String, signed: Bool = false) async -> Result<Void, ReloadError> {
        let apps: [String: AppRuntime]
        let adminTokens: AdminTokens
        let version = Self.version(of: policy, sha256: sha256)
        let trail: AuditTrail?
        do throws(StartupError) {
            if signed {
                guard let version else { throw StartupError(policy.diagnostic(at: "serial", PolicyFile.missingSerial).description) }
                if let refusal = version.refusal(after: running.withLock({ $0 }), .running) {
                    throw StartupError(policy.diagnostic(at: "serial", refusal).description)
                }
            }
            try Self.checkQueued(policy, hasOutbox: hasOutbox)
            guard policy.store == storePolicy else {
                throw StartupError("the store block (store.encryption_key, store.previous_encryption_keys, store.digest_key) changed: "
                                   + "the store keys are read at start only; restart to change them")
            }
            adminTokens = try AdminTokens.resolve(policy, secrets: builder.secrets)
            trail = try Self.auditTrail(policy, store: handler.registrar.deduper.store, secrets: builder.secrets)
            apps = try await builder.build(policy)
            if signed, let version { try await Self.admit(version, policy: policy, record: serials) }
        } catch {
            reloadFailed([error.description], policy: policy.sourcePath)
            return .failure(ReloadError(description: error.description))
        }
        let old = handler.replaceApps(apps)
        contactRoutes.replaceTokens(adminTokens)
        contactRoutes.replaceReceipts(trail)
        for app in apps.values { app.jwks?.start() }
        for app in old.values { app.jwks?.stop() }
        metrics.keepJWKSAges(of: Set(apps.values.filter { $0.jwks != nil }.map(\.policy.id)))
        running.withLock { $0 = version }
        metrics.policyInForce(sha256: sha256, serial: policy.serial)
        metrics.policyReload(result: "ok")
        let added = apps.keys.filter { old[$0] == nil }.sorted()
        let removed = old.keys.filter { apps[$0] == nil }.sorted()
        logger.info("policy reloaded", [("policy", policy.sourcePath), ("policy_sha256", sha256),
                                        ("policy_serial", policy.serial.map(String.init) ?? ""),
                                        ("apps", policy.apps.map(\.id).joined(separator: ",")),
                                        ("added", added.joined(separator: ",")), ("removed", removed.joined(separator: ","))])
        return .success(())
    }

    /// A reload refused before it reached `reload` (unreadable, invalid or badly signed file):
    /// logged with every diagnostic line and counted; the running policy stays.
    public func reloadFailed(_ diagnostics: [String], policy: String) {
        metrics.policyReload(result: "error")
        logger.error("policy reload refused; the running policy stays", [("policy", policy),
                                                                         ("diagnostics", diagnostics.joined(separator: "\n"))])
        for line in diagnostics { logger.error("policy diagnostic", [("policy", policy), ("diagnostic", line)]) }
    }

    /// The start line's word on the server-to-server API: whose tokens, or why it answers 404.
    private static func describe(_ tokens: AdminTokens) -> String {
        guard !tokens.isEmpty else { return "off (no admin token in the policy)" }
        var parts: [String] = []
        if let operatorToken = tokens.operatorToken { parts.append("operator token from \(operatorToken.reference), every app") }
        for (app, token) in tokens.apps { parts.append("app \(app)'s token from \(token.reference)") }
        return "on (" + parts.joined(separator: "; ") + ")"
    }

    /// The version of `policy` read from a file whose SHA-256 is `sha256`; nil without a serial.
    private static func version(of policy: Policy, sha256: String?) -> PolicyVersion? {
        guard let serial = policy.serial, let sha256 else { return nil }
        return PolicyVersion(serial: serial, sha256: sha256)
    }

    /// Records `version` as put in force, or says why the store refuses it (a higher serial was
    /// seen, or this one with other bytes), or that it could not answer: a signed policy is put
    /// in force only once the store has judged it.
    private static func admit(_ version: PolicyVersion, policy: Policy, record: any PolicySerialRecord) async throws(StartupError) {
        let seen: PolicyVersion?
        do throws(StoreError) {
            seen = try await record.admit(version)
        } catch {
            throw StartupError(policy.diagnostic(at: "serial", "the store could not check the serial against the highest it has seen "
                + "(\(error.detail)): a signed policy is put in force only once it has").description)
        }
        if let refusal = version.refusal(after: seen, .store) {
            throw StartupError(policy.diagnostic(at: "serial", refusal).description)
        }
    }

    /// `admit` at start, for up to 10 s while the store does not answer (a Redis starting beside
    /// the sidecar); a refusal is final at once.
    private static func admitAtStart(_ policy: Policy, sha256: String?, record: any PolicySerialRecord, logger: Logger) async throws(StartupError) {
        guard let version = version(of: policy, sha256: sha256) else {
            throw StartupError(policy.diagnostic(at: "serial", PolicyFile.missingSerial).description)
        }
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let seen: PolicyVersion?
            do throws(StoreError) {
                seen = try await record.admit(version)
            } catch {
                guard error.kind == .unavailable || error.kind == .timeout, ContinuousClock.now < deadline else {
                    throw StartupError(policy.diagnostic(at: "serial", "the store could not check the serial against the highest it has "
                        + "seen (\(error.detail)): a signed policy is put in force only once it has").description)
                }
                logger.warning("waiting for the store to check the policy serial", [("detail", error.detail)])
                try? await Task.sleep(for: .milliseconds(500))
                continue
            }
            if let refusal = version.refusal(after: seen, .store) {
                throw StartupError(policy.diagnostic(at: "serial", refusal).description)
            }
            return
        }
    }

    /// Queued deliveries live in a Redis Streams outbox: without Redis they would be lost.
    private static func checkQueued(_ policy: Policy, hasOutbox: Bool) throws(StartupError) {
        let queued = policy.apps.flatMap { app in app.upstreams.filter { $0.delivery == .queued }.map { "\(app.id)/\($0.name)" } }
        guard queued.isEmpty || hasOutbox else {
            throw StartupError("upstreams with delivery: queued need the Redis store (--redis URL or PUSHWARDEN_REDIS_URL): \(queued.joined(separator: ", "))")
        }
    }

    /// One worker per upstream the outbox delivers for, and a sampler for its metrics (which also
    /// renews this process's layout record). Workers look their app up in the running policy on
    /// every pass.
    private static func startOutbox(_ outbox: Outbox, handler: ClientAPIHandler, registrar: Registrar, metrics: Metrics,
                                    loops: [EventLoop], inFlight: Int, logger: Logger) -> [Task<Void, Never>] {
        var tasks: [Task<Void, Never>] = []
        let apps = handler.apps
        for target in outbox.watched {
            if apps[target.app]?.upstreams.first(where: { $0.adapter.name == target.upstream })?.policy.delivery == .queued {
                metrics.outboxWatched(app: target.app, upstream: target.upstream)
            }
            let worker = OutboxWorker(streams: outbox.streams, target: target, app: { handler.apps[target.app] }, registrar: registrar,
                                      consumer: outbox.consumer, metrics: metrics, logger: logger, signal: outbox.signal(for: target),
                                      loops: loops, batch: Self.batch(inFlight: inFlight, shards: target.shards))
            tasks.append(Task.detached { await worker.run() })
        }
        let streams = outbox.streams
        let sampled = outbox.watched
        let consumer = outbox.consumer
        tasks.append(Task.detached {
            while !Task.isCancelled {
                for target in sampled {
                    // While this process runs, `outbox replay` without a policy knows where its workers read.
                    try? await streams.record(target, consumer: consumer, seconds: Outbox.layoutRecordSeconds)
                    guard let (depth, oldest) = try? await streams.depth(of: target) else { continue }
                    let age = oldest.map { max(0, Double(OutboxWorker.age(now: SystemClock.epochMillis(), accepted: $0)) / 1000) } ?? 0
                    metrics.outbox(app: target.app, upstream: target.upstream, depth: depth, oldestSeconds: age)
                }
                try? await Task.sleep(for: .seconds(2))
            }
        })
        return tasks
    }

    /// Entries one shard reads at a time: an upstream's shards together hold at most twice as many
    /// deliveries in flight as there are connections to its host. Each shard waits for its whole
    /// batch before it reads again, so with only as many as the connections the connections sat
    /// idle behind the slowest of each batch (drain 0.52x P2 where P2 was bound by its latency);
    /// many more only wait inside the HTTP client (8 shards of 256, with every idle handle kept,
    /// took RSS to 158 MiB).
    static func batch(inFlight: Int, shards: Int) -> Int {
        max(16, 2 * inFlight / max(1, shards))
    }

    /// Every 2 s, what the allocator holds free goes back to the system, so RSS falls back after a
    /// burst instead of staying at its high-water mark (measured after the bench's P2 and outbox
    /// rows: 77 MiB, 56 MiB once trimmed). Under load there is little to give back: `malloc_trim`
    /// took under 0.01% of the samples of a P1 profile.
    private static func startHeapTrim() -> Task<Void, Never> {
        Task.detached {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(2))
                HeapTrim.release()
            }
        }
    }

    /// The inventory's expiry sweeper (it idles while no app sets `inventory.expire_after`).
    private static func startSweeper(registrar: Registrar, handler: ClientAPIHandler, metrics: Metrics, logger: Logger) -> Task<Void, Never> {
        for app in handler.apps.values where app.policy.inventory.expireAfterMillis != nil { metrics.inventoryWatched(app: app.policy.id) }
        let sweeper = ExpirySweeper(registrar: registrar, apps: { handler.apps }, metrics: metrics, logger: logger)
        return Task.detached { await sweeper.run() }
    }

    /// The evidence trail `policy.audit` asks for: its signing key read and judged; Redis required
    /// (a trail in one process's memory would prove nothing).
    static func auditTrail(_ policy: Policy, store: any DedupeStore, secrets: any SecretResolving) throws(StartupError) -> AuditTrail? {
        guard let audit = policy.audit else { return nil }
        guard let redis = store as? RedisStore else {
            throw StartupError(policy.diagnostic(at: "audit", "the evidence trail needs the Redis store: serve with --redis").description)
        }
        let pem: [UInt8]
        do {
            pem = try secrets.resolve(audit.signingKey)
        } catch {
            throw StartupError(policy.diagnostic(at: "audit.signing_key", error.description).description)
        }
        do {
            return AuditTrail(key: try Ed25519PrivateKey(pem: pem), store: redis)
        } catch {
            throw StartupError(policy.diagnostic(at: "audit.signing_key",
                                                 "the key from \(audit.signingKey) is not a PEM Ed25519 private key (openssl genpkey -algorithm ed25519)").description)
        }
    }

    /// Stops the outbox workers claiming (in-flight deliveries finish, on loops that still run;
    /// what they read and did not deliver stays pending for another replica), stops accepting,
    /// lets in-flight requests finish within the grace period, and releases the upstream client
    /// and the store.
    public func shutdown(gracePeriodSeconds: Double) async {
        logger.info("shutting down", [("grace_seconds", String(gracePeriodSeconds))])
        for app in handler.apps.values { app.jwks?.stop() }
        for task in outboxTasks { task.cancel() }
        await clientServer.shutdown(gracePeriodSeconds: gracePeriodSeconds)
        await adminServer.shutdown(gracePeriodSeconds: 1)
        for task in outboxTasks { await task.value }
        let pending = handler.registrar.deduper.pending
        if await !pending.flushed(withinMillis: UInt64(max(1, gracePeriodSeconds) * 1000)) {
            logger.error("stopped with store writes still waiting: their records are lost", [("writes", String(pending.count))])
        }
        httpClient?.shutdown()
        builder.shutdown()
        redis?.close()
        logger.info("stopped")
    }
}

/// Makes `AppRuntime`s from a policy: at start and, the same way, at every reload.
struct AppBuilder: Sendable {
    let secrets: any SecretResolving
    let network: any UpstreamTransport
    let metrics: Metrics
    let logger: Logger
    let jwksTiming: JWKSTiming
    let clock: any WallClock
    /// The client for identity providers (JWKS, introspection), made on first use: answers are
    /// capped at 64 KiB, and its connections are not the upstreams'.
    private let identity = IdentityClient()

    init(secrets: any SecretResolving, network: any UpstreamTransport, metrics: Metrics, logger: Logger, jwksTiming: JWKSTiming,
         clock: any WallClock = SystemClock()) {
        self.secrets = secrets
        self.network = network
        self.metrics = metrics
        self.logger = logger
        self.jwksTiming = jwksTiming
        self.clock = clock
    }

    func shutdown() { identity.shutdown() }

    /// Every app of `policy`, each `jwks_url` fetched first.
    func build(_ policy: Policy) async throws(StartupError) -> [String: AppRuntime] {
        var apps: [String: AppRuntime] = [:]
        for app in policy.apps {
            var fetched: JWKSFetch.Fetched?
            var client: HTTPClient?
            if let session = app.session.jwt, case .jwksURL(let jwks) = session.keys {
                let identityClient = try identity.client()
                client = identityClient
                switch await JWKSRefresher.firstFetch(app: app.id, settings: jwks, algorithms: session.algorithms,
                                                      client: identityClient, metrics: metrics, logger: logger, timing: jwksTiming) {
                case .success(let keys):
                    fetched = keys
                case .failure(let failure):
                    guard let fallback = jwks.fallbackFile else {
                        throw StartupError("app \(app.id): session jwks_url \(jwks.url): the first fetch failed (\(failure.detail)) and no jwks_file fallback is given")
                    }
                    logger.warning("jwks_url unavailable; starting with the jwks_file fallback",
                                   [("app", app.id), ("url", jwks.url), ("jwks_file", fallback)])
                }
            }
            apps[app.id] = try make(app, fetched: fetched, client: client)
        }
        return apps
    }

    /// Every app of `policy` without network calls; a `jwks_url` is refused.
    func buildOffline(_ policy: Policy) throws(StartupError) -> [String: AppRuntime] {
        var apps: [String: AppRuntime] = [:]
        for app in policy.apps {
            if case .jwksURL? = app.session.jwt?.keys {
                throw StartupError("app \(app.id): session jwks_url needs Sidecar.start, which fetches the keys before listening")
            }
            apps[app.id] = try make(app, fetched: nil, client: nil)
        }
        return apps
    }

    private func make(_ app: AppPolicy, fetched: JWKSFetch.Fetched?, client: HTTPClient?) throws(StartupError) -> AppRuntime {
        let sessions: SessionAuthenticator
        var refresher: JWKSRefresher?
        switch app.session {
        case .jwt(let session):
            let verifier = try jwtVerifier(app.id, session, fetched: fetched)
            sessions = .jwt(verifier)
            if case .jwksURL(let jwks) = session.keys, let client {
                refresher = JWKSRefresher(app: app.id, settings: jwks, algorithms: session.algorithms, verifier: verifier, client: client,
                                          first: fetched, metrics: metrics, logger: logger.with(label: "jwks"), timing: jwksTiming)
            }
        case .introspect(let introspection):
            // No call at build time: the endpoint is asked per token, on the request's loop.
            sessions = .introspect(try Introspector(app: app.id, policy: introspection, secrets: secrets, identity: identity, clock: clock,
                                                    metrics: metrics, logger: logger.with(label: "introspect")))
        }
        var callers: [UpstreamCaller] = []
        for upstream in app.upstreams {
            let (adapter, transport) = try ProviderFactory.make(upstream, app: app.id, secrets: secrets, network: network, logger: logger)
            callers.append(UpstreamCaller(app: app.id, adapter: adapter, policy: upstream, transport: transport, metrics: metrics,
                                          logger: logger.with(label: "upstream")))
        }
        callers.sort { a, b in a.policy.role == .primary && b.policy.role != .primary }
        return AppRuntime(policy: app, sessions: sessions, upstreams: callers, jwks: refresher)
    }

    /// A JWT app's verifier, its skipped keys logged.
    private func jwtVerifier(_ appID: String, _ session: SessionPolicy, fetched: JWKSFetch.Fetched?) throws(StartupError) -> SessionVerifier {
        let sessions: SessionVerifier
        do {
            sessions = try SessionVerifier(policy: session, secrets: secrets, clock: clock, fetchedKeys: fetched?.keys)
        } catch {
            throw StartupError("app \(appID): session: \(error)")
        }
        var source: (String, String)?
        switch session.keys {
        case .jwksFile(let file): source = ("jwks_file", file)
        case .jwksURL(let jwks): source = fetched != nil ? ("jwks_url", jwks.url) : ("jwks_file", jwks.fallbackFile ?? "")
        case .hmacSecret: source = nil
        }
        if let source {
            // `policy check` names the same keys of a file, as warnings.
            for skipped in sessions.skippedJWKs {
                var fields = [("app", appID), source, ("key", "keys[\(skipped.index)]")]
                if let kid = skipped.kid { fields.append(("kid", kid)) }
                fields.append(("reason", skipped.reason))
                logger.warning("session key skipped", fields)
            }
        }
        return sessions
    }
}

/// The identity-provider HTTP client, made on first use and shut down once.
final class IdentityClient: Sendable {
    private let state = Mutex<(client: HTTPClient?, closed: Bool)>((nil, false))

    func client() throws(StartupError) -> HTTPClient {
        let result = state.withLock { (state: inout (client: HTTPClient?, closed: Bool)) -> Result<HTTPClient, StartupError> in
            if let client = state.client { return .success(client) }
            guard !state.closed else { return .failure(StartupError("the sidecar is shutting down")) }
            do throws(HTTPClientError) {
                // Introspection calls come from every loop concurrently (one per token missing from
                // the cache): each loop keeps up to 64 connections to the endpoint.
                let client = try HTTPClient(configuration: HTTPClientConfiguration(
                    maxConnectionsPerHost: 64, maxTotalConnections: 128, maxResponseBytes: JWKSFetch.maxBytes, userAgent: "pushwarden"))
                state.client = client
                return .success(client)
            } catch {
                return .failure(StartupError("cannot start the identity-provider HTTP client: \(error.detail)"))
            }
        }
        return try result.get()
    }

    func shutdown() {
        let client = state.withLock { state -> HTTPClient? in
            state.closed = true
            defer { state.client = nil }
            return state.client
        }
        client?.shutdown()
    }
}
