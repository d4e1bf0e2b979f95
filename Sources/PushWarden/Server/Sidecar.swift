import HTTPClient
import HTTPServer
import PWCore
import PWPolicy
import RedisClient
import SessionAuth

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
public final class Sidecar: Sendable {
    public let metrics: Metrics
    private let clientServer: HTTPServer
    private let adminServer: HTTPServer
    private let httpClient: HTTPClient?
    private let redis: RedisClient?
    private let logger: Logger

    /// The bound client port (useful when configured with port 0).
    public var port: Int { clientServer.port }
    public var adminPort: Int { adminServer.port }

    /// Resolves every secret, builds every app and starts both listeners.
    ///
    /// - Parameters:
    ///   - store: overrides the store chosen by `configuration.redisURL` (tests).
    ///   - transport: overrides the network for real providers (tests).
    public init(policy: Policy, configuration: ServeConfiguration, logger: Logger,
                secrets: some SecretResolving = SecretResolver(), store: (any DedupeStore)? = nil,
                transport: (any UpstreamTransport)? = nil) throws(StartupError) {
        self.logger = logger
        let metrics = Metrics()
        self.metrics = metrics

        let chosenStore: any DedupeStore
        if let store {
            chosenStore = store
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
            chosenStore = RedisStore(client: client)
        } else {
            redis = nil
            chosenStore = MemoryStore()
        }

        let loopCount = configuration.threads > 0 ? configuration.threads : HTTPServerConfiguration().threads
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

        var apps: [String: AppRuntime] = [:]
        for app in policy.apps {
            apps[app.id] = try Self.build(app, secrets: secrets, network: network, metrics: metrics, logger: logger)
        }

        let deduper = Deduper(store: chosenStore, metrics: metrics, logger: logger.with(label: "dedupe"))
        let identities = IdentityStore(store: chosenStore, logger: logger.with(label: "identity"))
        let registrar = Registrar(deduper: deduper, identities: identities, metrics: metrics, logger: logger.with(label: "registrar"))
        let handler = ClientAPIHandler(apps: apps, registrar: registrar, rateLimiter: RateLimiter(store: chosenStore, metrics: metrics, logger: logger.with(label: "rate-limit")),
                                       metrics: metrics,
                                       logger: logger.with(label: "client-api"))
        let threads = loopCount
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
            throw StartupError("cannot listen on \(configuration.listen): \(error.message)")
        }
        do {
            adminServer = try HTTPServer(
                configuration: HTTPServerConfiguration(host: configuration.admin.host, port: configuration.admin.port, threads: 1,
                                                       perAddressConnectionLimit: configuration.connectionsPerAddress,
                                                       headTimeoutSeconds: configuration.headTimeoutSeconds, name: "pw-admin"),
                handler: AdminHandler(metrics: metrics, store: chosenStore, policyLoaded: true))
        } catch {
            throw StartupError("cannot listen on \(configuration.admin) (admin): \(error.message)")
        }
        logger.info("pushwarden listening", [
            ("listen", HostPort(host: configuration.listen.host, port: clientServer.port).description),
            ("admin", HostPort(host: configuration.admin.host, port: adminServer.port).description),
            ("store", chosenStore.kind), ("policy", policy.sourcePath), ("apps", policy.apps.map(\.id).joined(separator: ",")),
        ])
    }

    private static func build(_ app: AppPolicy, secrets: some SecretResolving, network: any UpstreamTransport,
                              metrics: Metrics, logger: Logger) throws(StartupError) -> AppRuntime {
        let sessions: SessionVerifier
        do {
            sessions = try SessionVerifier(policy: app.session, secrets: secrets)
        } catch {
            throw StartupError("app \(app.id): session: \(error)")
        }
        if case .jwksFile(let file) = app.session.keys {
            // `policy check` names the same keys, as warnings.
            for skipped in sessions.skippedJWKs {
                var fields = [("app", app.id), ("jwks_file", file), ("key", "keys[\(skipped.index)]")]
                if let kid = skipped.kid { fields.append(("kid", kid)) }
                fields.append(("reason", skipped.reason))
                logger.warning("session key skipped", fields)
            }
        }
        var callers: [UpstreamCaller] = []
        for upstream in app.upstreams {
            let (adapter, transport) = try ProviderFactory.make(upstream, app: app.id, secrets: secrets, network: network, logger: logger)
            callers.append(UpstreamCaller(adapter: adapter, policy: upstream, transport: transport, metrics: metrics,
                                          logger: logger.with(label: "upstream")))
        }
        callers.sort { a, b in a.policy.role == .primary && b.policy.role != .primary }
        return AppRuntime(policy: app, sessions: sessions, upstreams: callers)
    }

    /// Stops accepting, lets in-flight requests finish within the grace period, then releases
    /// the upstream client and the store.
    public func shutdown(gracePeriodSeconds: Double) async {
        logger.info("shutting down", [("grace_seconds", String(gracePeriodSeconds))])
        await clientServer.shutdown(gracePeriodSeconds: gracePeriodSeconds)
        await adminServer.shutdown(gracePeriodSeconds: 1)
        httpClient?.shutdown()
        redis?.close()
        logger.info("stopped")
    }
}
