// When to call PushWarden: on sign-in, on every launch, when the OS hands out a new token, and
// on sign-out; and what to remember between launches. See docs/clients/README.md.
import Foundation

/// Where the registrar keeps its few values between launches (UserDefaults in an app).
public protocol RegistrarStorage: Sendable {
    func string(forKey key: String) -> String?
    func set(_ value: String?, forKey key: String)
}

/// `UserDefaults` as storage (`UserDefaults.standard` in an app).
public final class DefaultsStorage: RegistrarStorage, @unchecked Sendable {
    private let defaults: UserDefaults
    public init(_ defaults: UserDefaults = .standard) { self.defaults = defaults }
    public func string(forKey key: String) -> String? { defaults.string(forKey: key) }
    public func set(_ value: String?, forKey key: String) { defaults.set(value, forKey: key) }
}

/// In-memory storage, for tests and the demo.
public final class MemoryStorage: RegistrarStorage, @unchecked Sendable {
    private let lock = NSLock()
    private var values: [String: String] = [:]
    public init() {}
    public func string(forKey key: String) -> String? { lock.lock(); defer { lock.unlock() }; return values[key] }
    public func set(_ value: String?, forKey key: String) { lock.lock(); defer { lock.unlock() }; values[key] = value }
}

/// The device's registration lifecycle.
///
/// - `signedIn(token:)` after sign-in, `launched(token:)` on every launch, and
///   `tokenRefreshed(_:)` from the OS's token callback: they all register the current token. An
///   unchanged registration costs the sidecar a cache hit (`unchanged`), so calling on every launch
///   is the intended use; it is also how a failed registration is retried.
/// - A token that differs from the last registered one is sent with `previous_push_token`, so the
///   providers move the registration instead of keeping a dead token.
/// - `signingOut()` unregisters; call it while the session is still valid, before discarding it.
public actor PushRegistrar {
    public let client: PushWardenClient
    public let platform: String
    public let pushService: String?
    public let storage: RegistrarStorage
    /// Requests actually sent (for the demo: a refused token is not sent again).
    public private(set) var requestsSent = 0

    static let registeredKey = "pushwarden.registered_token"
    static let refusedKey = "pushwarden.refused_token"
    static let pendingUnregisterKey = "pushwarden.pending_unregister"

    public init(client: PushWardenClient, platform: String, pushService: String? = nil, storage: RegistrarStorage) {
        self.client = client
        self.platform = platform
        self.pushService = pushService
        self.storage = storage
    }

    /// The last token PushWarden accepted for this device.
    public var registeredToken: String? { storage.string(forKey: Self.registeredKey) }

    public func signedIn(token: String, metadata: Installation? = nil) async -> Result<Accepted, PushWardenError> {
        await register(token, metadata: metadata)
    }

    /// On every launch: first a sign-out unregister that could not be delivered (while a session is
    /// there to send it with), then the registration when signed in.
    public func launched(token: String?, metadata: Installation? = nil) async -> Result<Accepted, PushWardenError>? {
        if let pending = storage.string(forKey: Self.pendingUnregisterKey), client.session() != nil {
            let result = await send { await client.unregister(pushToken: pending) }
            if case .failure(let error) = result, case .retryNextLaunch = error.action {
                // Still not delivered: keep it for the next launch.
            } else {
                storage.set(nil, forKey: Self.pendingUnregisterKey)
            }
        }
        guard let token, client.session() != nil else { return nil }
        return await register(token, metadata: metadata)
    }

    public func tokenRefreshed(_ token: String, metadata: Installation? = nil) async -> Result<Accepted, PushWardenError> {
        await register(token, metadata: metadata)
    }

    /// Unregisters the registered token; call it before the session is discarded.
    public func signingOut() async -> Result<Accepted, PushWardenError>? {
        guard let token = registeredToken else { return nil }
        let result = await send { await client.unregister(pushToken: token) }
        storage.set(nil, forKey: Self.registeredKey)
        storage.set(nil, forKey: Self.refusedKey)
        if case .failure(let error) = result, case .retryNextLaunch = error.action {
            storage.set(token, forKey: Self.pendingUnregisterKey)  // retried by launched(token:)
        }
        return result
    }

    private func register(_ token: String, metadata: Installation?) async -> Result<Accepted, PushWardenError> {
        // Never send a refused token again: only a new token from the OS (or a fixed app) is worth a request.
        if storage.string(forKey: Self.refusedKey) == token {
            return .failure(PushWardenError(status: 400, code: "refused_before",
                                            message: "this token was refused before; waiting for a new one from the OS"))
        }
        var installation = metadata ?? Installation(platform: platform, pushToken: token)
        installation.platform = platform
        installation.pushToken = token
        installation.pushService = installation.pushService ?? pushService
        if let last = registeredToken, last != token { installation.previousPushToken = last }

        let result = await send { await client.register(installation) }
        switch result {
        case .success:
            storage.set(token, forKey: Self.registeredKey)
        case .failure(let error):
            switch error.action {
            case .neverRetry where error.field == "previous_push_token":
                // The old token is the problem (another platform or service): drop the rotation,
                // the next call registers the new token on its own.
                storage.set(nil, forKey: Self.registeredKey)
            case .neverRetry:
                storage.set(token, forKey: Self.refusedKey)
            case .retryNextLaunch, .reauthenticate, .done:
                break  // the next launch (or the next sign-in) registers again
            }
        }
        return result
    }

    private func send(_ call: () async -> Result<Accepted, PushWardenError>) async -> Result<Accepted, PushWardenError> {
        requestsSent += 1
        return await call()
    }
}
