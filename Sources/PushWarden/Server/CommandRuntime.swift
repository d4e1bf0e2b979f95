import HTTPClient
import PWCore
import PWPolicy
import RedisClient
import RedisStores
import Registration

/// One app of a policy built as `serve` builds it, over Redis, for the commands that register or
/// remove installations without a running sidecar (`import`, `tokens quarantine release`): what
/// they do reaches the store, the outboxes and the webhook receivers as a sidecar's would.
///
/// Owns its Redis connection, HTTP client and app builder: call `close()` when done.
final class CommandRuntime: Sendable {
    let app: AppRuntime
    let redis: RedisStore
    let registrar: Registrar
    let outbox: Outbox
    let pending: PendingWrites
    private let client: RedisClient
    private let network: HTTPClient
    private let builder: AppBuilder

    /// Only `appPolicy` is built: another app's identity provider has no say in this command.
    init(policy: Policy, app appPolicy: AppPolicy, redisURL: String, secrets: some SecretResolving,
         logger: Logger) async throws(ConfigurationError) {
        let sealer = try StoreSealer.make(for: policy, secrets: secrets)
        let digests = try KeyDigest.make(for: policy, secrets: secrets)
        let client = try RedisClient.forCommand(redisURL)
        let network: HTTPClient
        do {
            network = try HTTPClient(configuration: HTTPClientConfiguration())
        } catch {
            client.close()
            throw ConfigurationError("cannot start the upstream HTTP client: \(error.detail)")
        }
        let metrics = Metrics()
        let builder = AppBuilder(secrets: secrets, network: network, metrics: metrics, logger: logger, jwksTiming: JWKSTiming())
        let close = { builder.shutdown(); network.shutdown(); client.close() }
        var onlyThisApp = policy
        onlyThisApp.apps = [appPolicy]
        let built: AppRuntime
        let webhooks: [WebhookEndpoint]
        do throws(ConfigurationError) {
            guard let app = try await builder.build(onlyThisApp)[appPolicy.id] else {
                throw ConfigurationError("the policy has no app \(appPolicy.id)")
            }
            built = app
            webhooks = try Sidecar.webhookEndpoints(policy, hasOutbox: true, secrets: secrets)
        } catch {
            close()
            throw error
        }
        let redis = RedisStore(client: client)
        let pending = PendingWrites(metrics: metrics, logger: logger.with(label: "store"))
        let outbox = Outbox(queue: OutboxStreams(client: client, sealer: sealer, digests: digests), apps: [built], webhooks: webhooks)
        let inventory = Inventory(store: RedisInventoryStore(store: redis), sealer: sealer, digests: digests, logger: logger.with(label: "inventory"))
        registrar = Registrar(deduper: Deduper(store: redis, metrics: metrics, logger: logger.with(label: "dedupe"), pending: pending),
                              identities: IdentityStore(store: redis, logger: logger.with(label: "identity"), sealer: sealer, pending: pending),
                              metrics: metrics, logger: logger.with(label: "registrar"), outbox: outbox, inventory: inventory)
        app = built
        self.redis = redis
        self.outbox = outbox
        self.pending = pending
        self.client = client
        self.network = network
        self.builder = builder
    }

    func close() {
        builder.shutdown()
        network.shutdown()
        client.close()
    }
}
