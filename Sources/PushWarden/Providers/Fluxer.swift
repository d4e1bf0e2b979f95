import ClientAPI
import HTTPClient
import PWCore
import PWPolicy

/// Not supported yet: the policy loader refuses this provider, so this is never built.
public struct FluxerAdapter: UpstreamAdapter {
    public let name: String
    public let provider = "fluxer"

    static func make(name: String, config: FluxerConfig, secrets: SecretLookup) throws(StartupError) -> FluxerAdapter {
        throw StartupError("provider fluxer is not supported in this version")
    }

    public func accepts(_ installation: Installation) -> Bool { false }
    public func registerRequest(_ installation: Installation, context: CallContext, identity: UpstreamIdentity?,
                                previous: UpstreamIdentity?) -> HTTPClientRequest {
        preconditionFailure("not supported")
    }
    public func unregisterRequest(pushToken: String, context: CallContext, identity: UpstreamIdentity?) -> HTTPClientRequest? { nil }
    public func verdict(for response: HTTPClientResponse, operation: UpstreamOperation) -> UpstreamVerdict { standardVerdict(response) }
    public func emulatedResponse(to request: HTTPClientRequest) -> HTTPClientResponse { HTTPClientResponse(status: 200, headers: [:], body: []) }
}
