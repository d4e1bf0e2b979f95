import PWCore
import PWPolicy
import Registration

extension Sidecar {
    /// The policy's webhook receivers with their signing keys read and judged. Their events wait in
    /// the Redis outbox: without it they would be lost, so serving is refused.
    static func webhookEndpoints(_ policy: Policy, hasOutbox: Bool, secrets: any SecretResolving) throws(ConfigurationError) -> [WebhookEndpoint] {
        guard !policy.webhooks.isEmpty else { return [] }
        guard hasOutbox else {
            throw ConfigurationError(policy.diagnostic(at: "webhooks[0]",
                                                       "webhooks are delivered through the outbox and need the Redis store: serve with --redis").description)
        }
        var endpoints: [WebhookEndpoint] = []
        for (index, webhook) in policy.webhooks.enumerated() {
            let at = "webhooks[\(index)].secret"
            let value: [UInt8]
            do {
                value = try secrets.resolve(webhook.secret)
            } catch {
                throw ConfigurationError(policy.diagnostic(at: at, error.description).description)
            }
            switch webhook.key(from: value) {
            case .success(let key): endpoints.append(WebhookEndpoint(index: index, policy: webhook, key: key))
            case .failure(let problem): throw ConfigurationError(policy.diagnostic(at: at, problem.description).description)
            }
        }
        return endpoints
    }
}
