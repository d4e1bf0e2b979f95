import ClientAPI
import HTTPClient
import PWCore
import PWPolicy

/// Not supported yet: the policy loader refuses this provider, so this is never built.
public struct NativeNotifyAdapter: UpstreamAdapter {
    public let name: String
    public let provider = "nativenotify"

    static func make(name: String, config: NativeNotifyConfig, secrets: SecretLookup) throws(StartupError) -> NativeNotifyAdapter {
        throw StartupError("provider nativenotify is not supported in this version")
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
