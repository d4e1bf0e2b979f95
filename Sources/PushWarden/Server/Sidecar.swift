import HTTPClient
import HTTPServer
import Loops
import PWCore
import PWCrypto
import PWPolicy
import Providers
import RedisClient
import RedisStores
import Registration
import SessionAuth
import Synchronization

/// The running sidecar: the client listener, the admin listener, the store and the upstream client.
///
/// The apps it serves can be replaced while it runs (`reload`); nothing else can.
public final class Sidecar: Sendable {
    public let metrics: Metrics
    let clientServer: HTTPServer
    let adminServer: HTTPServer
    let httpClient: HTTPClient?
    let redis: RedisClient?
    let logger: Logger
    /// Internal for tests: the client API's edge.
    let handler: ClientAPIHandler
    /// The apps in force: a reload swaps them; the edges, the workers and the sweeper read them.
    let apps: AppTable
    /// The registration operations behind both APIs, the workers and the sweeper.
    let registrar: Registrar
    /// The store chosen at start (a reload judges the audit block against it).
    let store: any DedupeStore
    /// The server-to-server API on the admin listener; a reload replaces its tokens.
    let contactRoutes: ContactRoutes
    /// Each app's coverage and export, and the pass that keeps their counts right.
    let census: Census
    let builder: AppBuilder
    /// The outbox's workers and its metrics sampler; cancelled at shutdown.
    let outboxTasks: [Task<Void, Never>]
    /// Whether queued deliveries can be kept (the Redis store): a policy that needs them is
    /// refused at start and at reload otherwise.
    let hasOutbox: Bool
    /// The webhooks served since start: their outboxes and keys are made once.
    let webhookPolicies: [WebhookPolicy]
    /// The `store` block in force: its keys are read once, at start. A reload that changes it is
    /// refused (restart to change the keys), so the keys in force are always the file's.
    let storePolicy: StorePolicy?
    /// The highest signed policy version put in force: in Redis (every replica's), else this
    /// process's. Judged at start and at every reload of a signed policy.
    let serials: any PolicySerialRecord
    /// The running policy's version (nil: no serial, or no file hash); a reload judges against it.
    let running: Mutex<PolicyVersion?>

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
             transport: (any UpstreamTransport)?, jwksTiming: JWKSTiming, clock: any WallClock) throws(ConfigurationError) {
            if let store {
                self.store = store
                redis = nil
            } else if let url = configuration.redisURL {
                let redisConfiguration: RedisConfiguration
                do {
                    redisConfiguration = try RedisConfiguration(url: url)
                } catch {
                    throw ConfigurationError("invalid Redis URL: \(error.detail)")
                }
                let client = RedisClient(configuration: redisConfiguration)
                redis = client
                self.store = RedisStore(client: client)
            } else {
                redis = nil
                self.store = MemoryStore()
            }

            serials = (self.store as? RedisStore) ?? ProcessPolicySerials()
            loopCount = configuration.loopCount
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
                    throw ConfigurationError("cannot start the upstream HTTP client: \(error.detail)")
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
                            transport: (any UpstreamTransport)? = nil, clock: any WallClock = SystemClock()) throws(ConfigurationError) {
        let parts = try Parts(configuration: configuration, logger: logger, secrets: secrets, store: store, transport: transport,
                              jwksTiming: JWKSTiming(), clock: clock)
        let apps = try parts.builder.buildOffline(policy)
        try self.init(policy: policy, sha256: nil, configuration: configuration, logger: logger, parts: parts, apps: apps,
                      administration: nil)
    }

    /// As the public initializer, with `administration` standing in for the operations behind
    /// the server-to-server API (tests).
    convenience init(policy: Policy, configuration: ServeConfiguration, logger: Logger, secrets: some SecretResolving,
                     store: (any DedupeStore)?, administration: any ContactAdministration) throws(ConfigurationError) {
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
                             clock: any WallClock = SystemClock()) async throws(ConfigurationError) -> Sidecar {
        let parts = try Parts(configuration: configuration, logger: logger, secrets: secrets, store: store, transport: transport,
                              jwksTiming: jwksTiming, clock: clock)
        let apps = try await parts.builder.build(policy)
        if signed {
            do throws(ConfigurationError) {
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
                 apps: [String: AppRuntime], administration: (any ContactAdministration)?) throws(ConfigurationError) {
        self.logger = logger
        self.metrics = parts.builder.metrics
        self.redis = parts.redis
        self.httpClient = parts.httpClient
        self.builder = parts.builder
        let chosenStore = parts.store
        let outboxClient = (chosenStore as? RedisStore)?.client
        hasOutbox = outboxClient != nil
        storePolicy = policy.store
        webhookPolicies = policy.webhooks
        serials = parts.serials
        running = Mutex(Self.version(of: policy, sha256: sha256))
        let sealer: StoreSealer
        let digests: KeyDigest
        let adminTokens: AdminTokens
        let trail: AuditTrail?
        let webhooks: [WebhookEndpoint]
        do throws(ConfigurationError) {
            try Self.checkQueued(policy, hasOutbox: hasOutbox)
            sealer = try StoreSealer.make(for: policy, secrets: parts.builder.secrets)
            digests = try KeyDigest.make(for: policy, secrets: parts.builder.secrets)
            adminTokens = try AdminTokens.resolve(policy, secrets: parts.builder.secrets)
            trail = try Self.auditTrail(policy, store: chosenStore, secrets: parts.builder.secrets)
            webhooks = try Self.webhookEndpoints(policy, hasOutbox: hasOutbox, secrets: parts.builder.secrets)
        } catch {
            builder.shutdown()
            throw error
        }

        let pending = PendingWrites(metrics: metrics, logger: logger.with(label: "store"))
        let deduper = Deduper(store: chosenStore, metrics: metrics, logger: logger.with(label: "dedupe"), pending: pending)
        let identities = IdentityStore(store: chosenStore, logger: logger.with(label: "identity"), sealer: sealer, pending: pending)
        let outbox = outboxClient.map { Outbox(queue: OutboxStreams(client: $0, sealer: sealer, digests: digests), apps: Array(apps.values),
                                                    webhooks: webhooks) }
        let inventoryStore: any InventoryStore = (chosenStore as? RedisStore).map { RedisInventoryStore(store: $0) } ?? MemoryInventoryStore()
        let inventory = Inventory(store: inventoryStore, sealer: sealer, digests: digests, logger: logger.with(label: "inventory"))
        let registrar = Registrar(deduper: deduper, identities: identities, metrics: metrics, logger: logger.with(label: "registrar"),
                                  outbox: outbox, inventory: inventory)
        let table = AppTable(apps)
        self.apps = table
        self.registrar = registrar
        self.store = chosenStore
        let rateLimiter = RateLimiter(shared: chosenStore as? any SharedRateLimits, digests: digests, metrics: metrics,
                                      logger: logger.with(label: "rate-limit"))
        let handler = ClientAPIHandler(apps: table, registrar: registrar, rateLimiter: rateLimiter, metrics: metrics,
                                       logger: logger.with(label: "client-api"))
        self.handler = handler
        handler.receipts.withLock { $0 = trail }
        let contactRoutes = ContactRoutes(tokens: adminTokens, administration: administration ?? registrar, apps: table, metrics: metrics,
                                          logger: logger, receipts: trail, digests: digests)
        self.contactRoutes = contactRoutes
        let census = Census(inventory: inventory, apps: table, metrics: metrics, logger: logger.with(label: "inventory"))
        self.census = census
        let fleet = FleetRoutes(contacts: contactRoutes, census: census, apps: table, metrics: metrics, logger: logger)
        let deadTokenStore: any DeadTokenStore = (chosenStore as? RedisStore).map { RedisDeadTokenStore(store: $0) }
            ?? MemoryDeadTokenStore(inventory: inventoryStore as? MemoryInventoryStore)
        let deadTokenRoutes = DeadTokenRoutes(contacts: contactRoutes, deadTokens: DeadTokens(registrar: registrar, store: deadTokenStore),
                                              apps: table, metrics: metrics, logger: logger, digests: digests)
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
            throw ConfigurationError("cannot listen on \(configuration.listen): \(error.message)")
        }
        do {
            adminServer = try HTTPServer(
                configuration: HTTPServerConfiguration(host: configuration.admin.host, port: configuration.admin.port, threads: 1,
                                                       perAddressConnectionLimit: configuration.connectionsPerAddress,
                                                       headTimeoutSeconds: configuration.headTimeoutSeconds, name: "pw-admin"),
                handler: AdminHandler(metrics: metrics, store: chosenStore, contacts: contactRoutes, fleet: fleet,
                                      deadTokens: deadTokenRoutes))
        } catch {
            builder.shutdown()
            throw ConfigurationError("cannot listen on \(configuration.admin) (admin): \(error.message)")
        }
        // The workers deliver on the client listener's loops, as sync requests do.
        let loops = clientServer.eventLoops
        outboxTasks = (outbox.map { BackgroundTasks.startOutbox($0, apps: table, registrar: registrar, metrics: sharedMetrics, loops: loops,
                                                     transport: parts.builder.network,
                                                     inFlight: configuration.upstreamConnectionsPerHost, logger: outboxLogger) } ?? [])
            + [BackgroundTasks.startSweeper(registrar: registrar, apps: table, metrics: sharedMetrics, logger: logger.with(label: "inventory")),
               BackgroundTasks.startHeapTrim(), Task.detached { await census.run() }]
            // The rate-limit counts meet in the store from the first loop (one write a second).
            + (loops.first.map { [rateLimiter.startSync(on: $0)] } ?? [])
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

    /// The start line's word on the server-to-server API: whose tokens, or why it answers 404.
    private static func describe(_ tokens: AdminTokens) -> String {
        guard !tokens.isEmpty else { return "off (no admin token in the policy)" }
        var parts: [String] = []
        if let operatorToken = tokens.operatorToken { parts.append("operator token from \(operatorToken.reference), every app") }
        for (app, token) in tokens.apps { parts.append("app \(app)'s token from \(token.reference)") }
        return "on (" + parts.joined(separator: "; ") + ")"
    }

    /// Queued deliveries live in a Redis Streams outbox: without Redis they would be lost.
    static func checkQueued(_ policy: Policy, hasOutbox: Bool) throws(ConfigurationError) {
        let queued = policy.apps.flatMap { app in app.upstreams.filter { $0.delivery == .queued }.map { "\(app.id)/\($0.name)" } }
        guard queued.isEmpty || hasOutbox else {
            throw ConfigurationError("upstreams with delivery: queued need the Redis store (--redis URL or PUSHWARDEN_REDIS_URL): \(queued.joined(separator: ", "))")
        }
    }

    /// The evidence trail `policy.audit` asks for: its signing key read and judged; Redis required
    /// (a trail in one process's memory would prove nothing).
    static func auditTrail(_ policy: Policy, store: any DedupeStore, secrets: any SecretResolving) throws(ConfigurationError) -> AuditTrail? {
        guard let audit = policy.audit else { return nil }
        guard let redis = store as? RedisStore else {
            throw ConfigurationError(policy.diagnostic(at: "audit", "the evidence trail needs the Redis store: serve with --redis").description)
        }
        let pem: [UInt8]
        do {
            pem = try secrets.resolve(audit.signingKey)
        } catch {
            throw ConfigurationError(policy.diagnostic(at: "audit.signing_key", error.description).description)
        }
        do {
            return AuditTrail(key: try Ed25519PrivateKey(pem: pem), store: redis)
        } catch {
            throw ConfigurationError(policy.diagnostic(at: "audit.signing_key",
                                                 "the key from \(audit.signingKey) is not a PEM Ed25519 private key (openssl genpkey -algorithm ed25519)").description)
        }
    }

    /// Stops the outbox workers claiming (in-flight deliveries finish, on loops that still run;
    /// what they read and did not deliver stays pending for another replica), stops accepting,
    /// lets in-flight requests finish within the grace period, and releases the upstream client
    /// and the store.
    public func shutdown(gracePeriodSeconds: Double) async {
        logger.info("shutting down", [("grace_seconds", String(gracePeriodSeconds))])
        for app in apps.all.values { app.jwks?.stop() }
        for task in outboxTasks { task.cancel() }
        await clientServer.shutdown(gracePeriodSeconds: gracePeriodSeconds)
        await adminServer.shutdown(gracePeriodSeconds: 1)
        for task in outboxTasks { await task.value }
        if await !registrar.webhooksSettled(withinMillis: 2000) {
            logger.error("stopped with webhook events not yet queued: they are lost")
        }
        let pending = registrar.deduper.pending
        if await !pending.flushed(withinMillis: UInt64(max(1, gracePeriodSeconds) * 1000)) {
            logger.error("stopped with store writes still waiting: their records are lost", [("writes", String(pending.count))])
        }
        httpClient?.shutdown()
        builder.shutdown()
        redis?.close()
        logger.info("stopped")
    }
}
