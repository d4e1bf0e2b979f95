import HTTPClient
import PWCore
import PWPolicy
import Providers
import Registration
import SessionAuth

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
    func build(_ policy: Policy) async throws(ConfigurationError) -> [String: AppRuntime] {
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
                        throw ConfigurationError("app \(app.id): session jwks_url \(jwks.url): the first fetch failed (\(failure.detail)) and no jwks_file fallback is given")
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
    func buildOffline(_ policy: Policy) throws(ConfigurationError) -> [String: AppRuntime] {
        var apps: [String: AppRuntime] = [:]
        for app in policy.apps {
            if case .jwksURL? = app.session.jwt?.keys {
                throw ConfigurationError("app \(app.id): session jwks_url needs Sidecar.start, which fetches the keys before listening")
            }
            apps[app.id] = try make(app, fetched: nil, client: nil)
        }
        return apps
    }

    private func make(_ app: AppPolicy, fetched: JWKSFetch.Fetched?, client: HTTPClient?) throws(ConfigurationError) -> AppRuntime {
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
    private func jwtVerifier(_ appID: String, _ session: SessionPolicy, fetched: JWKSFetch.Fetched?) throws(ConfigurationError) -> SessionVerifier {
        let sessions: SessionVerifier
        do {
            sessions = try SessionVerifier(policy: session, secrets: secrets, clock: clock, fetchedKeys: fetched?.keys)
        } catch {
            throw ConfigurationError("app \(appID): session: \(error)")
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
