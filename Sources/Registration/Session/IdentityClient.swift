import HTTPClient
import PWCore
import Synchronization

/// The identity-provider HTTP client, made on first use and shut down once.
package final class IdentityClient: Sendable {
    private let state = Mutex<(client: HTTPClient?, closed: Bool)>((nil, false))

    package init() {}

    package func client() throws(ConfigurationError) -> HTTPClient {
        let result = state.withLock { (state: inout (client: HTTPClient?, closed: Bool)) -> Result<HTTPClient, ConfigurationError> in
            if let client = state.client { return .success(client) }
            guard !state.closed else { return .failure(ConfigurationError("the sidecar is shutting down")) }
            do throws(HTTPClientError) {
                // Introspection calls come from every loop concurrently (one per token missing from
                // the cache): each loop keeps up to 64 connections to the endpoint.
                let client = try HTTPClient(configuration: HTTPClientConfiguration(
                    maxConnectionsPerHost: 64, maxTotalConnections: 128, maxResponseBytes: JWKSFetch.maxBytes, userAgent: "pushwarden"))
                state.client = client
                return .success(client)
            } catch {
                return .failure(ConfigurationError("cannot start the identity-provider HTTP client: \(error.detail)"))
            }
        }
        return try result.get()
    }

    package func shutdown() {
        let client = state.withLock { state -> HTTPClient? in
            state.closed = true
            defer { state.client = nil }
            return state.client
        }
        client?.shutdown()
    }
}
