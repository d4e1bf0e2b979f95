import HTTPClient
import PWCore
import PWPolicy

/// Builds each upstream's adapter from the policy: resolves its secrets and picks its transport.
/// Each provider's `make` lives in the provider's own file.
package enum ProviderFactory {
    package static func make(_ upstream: UpstreamPolicy, app: String, secrets: some SecretResolving, network: any UpstreamTransport,
                     logger: Logger) throws(ConfigurationError) -> (any UpstreamAdapter, any UpstreamTransport) {
        let made = try adapter(upstream, app: app, secrets: secrets, network: network, logger: logger)
        // An adapter that cannot build the calls its traits promise is a defect, caught at start.
        let buildsEvents = made.0.eventsRequest([], context: CallContext(contactID: "-")) != nil
        guard buildsEvents == upstream.provider.traits.takesEvents, made.0.kind == upstream.provider.emulated else {
            throw ConfigurationError("app \(app): upstream \(upstream.name): the \(upstream.provider.settings.providerName) adapter and its provider's traits disagree")
        }
        return made
    }

    private static func adapter(_ upstream: UpstreamPolicy, app: String, secrets: some SecretResolving, network: any UpstreamTransport,
                                logger: Logger) throws(ConfigurationError) -> (any UpstreamAdapter, any UpstreamTransport) {
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
            let emulated = dryRunAdapter(name: upstream.name, config)
            let transport = DryRunTransport(logger: logger.with(label: "dry_run"), answer: { emulated.emulatedResponse(to: $0) })
            return (emulated, transport)
        }
    }

    /// The emulated provider's own adapter over stand-in settings: no credential is needed or
    /// read. Keys are obviously fake but pass each adapter's own shape checks (`vh_pk_test_`
    /// with `debug_build`, `pnp_`); nothing is sent to `dry-run.invalid`, it only appears in the log.
    package static func dryRunAdapter(name: String, _ config: DryRunConfig) -> any UpstreamAdapter {
        let base = "https://dry-run.invalid"
        let noSecret = SecretRef.env("-")
        switch config.emulates {
        case .voidhash:
            return VoidhashAdapter(name: name,
                                   config: VoidhashConfig(baseURL: base, publishableKey: noSecret, iosBundleID: config.iosBundleID,
                                                          androidPackageName: config.androidPackageName, sdkVersion: "0.0.0-dryrun",
                                                          debugBuild: true),
                                   publishableKey: "vh_pk_test_dryrun")
        case .fluxer:
            return FluxerAdapter(name: name, config: FluxerConfig(baseURL: base,
                                                                  sessionHeader: config.sessionHeader ?? DryRunConfig.defaultSessionHeader))
        case .nativeNotify:
            return NativeNotifyAdapter(name: name, config: NativeNotifyConfig(baseURL: base, appID: 1, appToken: noSecret),
                                       appToken: Array("dry-run-app-token".utf8))
        case .pushNotice:
            return PushNoticeAdapter(name: name, config: PushNoticeConfig(baseURL: base, slug: config.slug ?? DryRunConfig.defaultSlug,
                                                                          apiKey: noSecret),
                                     apiKey: Array("pnp_dryrun".utf8))
        case .voyado:
            return VoyadoAdapter(name: name, config: VoyadoConfig(basePath: "\(base)/\(config.emulates.rawValue)", apiKey: noSecret),
                                 apiKey: Array("dry-run".utf8))
        }
    }
}

/// Resolves one upstream's secrets at start-up; the error names the reference, never a value.
struct SecretLookup {
    let app: String
    let upstream: String
    let secrets: any SecretResolving

    func callAsFunction(_ ref: SecretRef) throws(ConfigurationError) -> [UInt8] {
        do {
            return try secrets.resolve(ref)
        } catch {
            throw ConfigurationError("app \(app): upstream \(upstream): \(error)")
        }
    }
}
