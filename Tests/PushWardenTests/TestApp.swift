import HTTPClient
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
@testable import RedisStores
@testable import Registration
import SessionAuth
import Testing

/// App `shop` (HS256 sessions from `SESSION`, every platform) with the given `upstreams:` YAML
/// (indented six spaces), built into an `AppRuntime` over `network`: what the tests of the
/// registration operations run without a server.
enum TestApp {
    static func make(upstreams: String, secrets: [SecretRef: [UInt8]], network: HTTPClient, logger: Logger, metrics: Metrics,
                     path: String = "test-app.yaml") throws -> AppRuntime {
        let yaml = """
            version: 1
            apps:
              shop:
                session:
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: SESSION}
                client:
                  platforms: [ios, android, web]
                upstreams:
            \(upstreams)
            """
        let policy = try PolicyLoader.load(text: yaml, path: path).get()
        var values = secrets
        values[.env("SESSION")] = values[.env("SESSION")] ?? Array(repeating: 7, count: 32)
        let resolver = StaticSecrets(values)
        let app = policy.apps[0]
        var callers: [UpstreamCaller] = []
        for upstream in app.upstreams {
            let (adapter, transport) = try ProviderFactory.make(upstream, app: "shop", secrets: resolver, network: network, logger: logger)
            callers.append(UpstreamCaller(app: "shop", adapter: adapter, policy: upstream, transport: transport, metrics: metrics, logger: logger))
        }
        return AppRuntime(policy: app, sessions: try SessionVerifier(policy: #require(app.session.jwt), secrets: resolver), upstreams: callers)
    }
}
