import HTTPClient
import PWCore
import PWPolicy

/// Builds each upstream's adapter from the policy: resolves its secrets and picks its transport.
/// Each provider's `make` lives in the provider's own file.
enum ProviderFactory {
    static func make(_ upstream: UpstreamPolicy, app: String, secrets: some SecretResolving, network: any UpstreamTransport,
                     logger: Logger) throws(StartupError) -> (any UpstreamAdapter, any UpstreamTransport) {
        let made = try adapter(upstream, app: app, secrets: secrets, network: network, logger: logger)
        // One fact, read by `policy explain` and the request path alike: the settings' `takesEvents`.
        // An adapter that could not build the call it promises is a defect, caught at start.
        let buildsEvents = made.0.eventsRequest([], context: CallContext(contactID: "-")) != nil
        guard buildsEvents == upstream.provider.settings.takesEvents else {
            throw StartupError("app \(app): upstream \(upstream.name): the \(upstream.provider.settings.providerName) adapter and its settings disagree on events")
        }
        return made
    }

    private static func adapter(_ upstream: UpstreamPolicy, app: String, secrets: some SecretResolving, network: any UpstreamTransport,
                                logger: Logger) throws(StartupError) -> (any UpstreamAdapter, any UpstreamTransport) {
        let resolve = SecretLookup(app: app, upstream: upstream.name, secrets: secrets)
        switch upstream.provider {
        case .voyado(let config):
            return (VoyadoAdapter(name: upstream.name, config: config, apiKey: try resolve(config.apiKey)), network)
        case .voidhash(let config):
            return (try VoidhashAdapter.make(name: upstream.name, config: config, secrets: resolve), network)
        case .fluxer(let config):
            return (try FluxerAdapter.make(name: upstream.name, config: config, secrets: resolve), network)
        case .nativeNotify(let config):
            return (try NativeNotifyAdapter.make(name: upstream.name, config: config, secrets: resolve), network)
        case .pushNotice(let config):
            return (try PushNoticeAdapter.make(name: upstream.name, config: config, secrets: resolve), network)
        case .dryRun(let config):
            let emulated = VoyadoAdapter(name: upstream.name,
                                         config: VoyadoConfig(basePath: "https://dry-run.invalid/\(config.emulates)", apiKey: .env("-")),
                                         apiKey: Array("dry-run".utf8))
            let transport = DryRunTransport(logger: logger.with(label: "dry_run"), answer: { emulated.emulatedResponse(to: $0) })
            return (emulated, transport)
        }
    }
}

/// Resolves one upstream's secrets at start-up; the error names the reference, never a value.
struct SecretLookup {
    let app: String
    let upstream: String
    let secrets: any SecretResolving

    func callAsFunction(_ ref: SecretRef) throws(StartupError) -> [UInt8] {
        do {
            return try secrets.resolve(ref)
        } catch {
            throw StartupError("app \(app): upstream \(upstream): \(error)")
        }
    }
}
