import HTTPClient
import PWCore
import PWPolicy
import SessionAuth
import Synchronization

/// The clock of an app's `jwks_url` keys, with the values docs/configuration.md (sessions) names; tests
/// shorten them (they are not policy).
public struct JWKSTiming: Sendable {
    /// At most one refetch for unknown kids per app within this many seconds.
    public var unknownKidInterval: Double = 30
    /// The bounds a `Cache-Control: max-age` is held within.
    public var minimumRefresh: Double = 60
    public var maximumRefresh: Double = 86_400
    /// After a failed refresh the next try comes after `min(jwks_refresh, this)`.
    public var retryAfterFailure: Double = 60
    /// Bound on one fetch, connection included.
    public var timeoutMillis: Int = 5_000

    public init() {}
}

/// One fetch of a JWKS document from an identity provider with the project's `HTTPClient`.
/// The document is judged by `JWKSet`'s rules for fetched documents: an entry that is no sound
/// key is skipped (and named), while an answer that is not `200`, over `maxBytes`, not JSON or
/// without a usable key is a failed fetch.
package enum JWKSFetch {
    static let maxBytes = 64 * 1024

    package struct Fetched: Sendable {
        package let keys: JWKSet
        /// `Cache-Control: max-age` of the answer, in seconds, when it names one.
        let maxAge: Int?
    }

    /// Why a fetch failed. `result` is the metric label, from a fixed set.
    package struct Failure: Error, Sendable {
        enum Result: String, Sendable {
            case networkError = "network_error", httpError = "http_error", tooLarge = "too_large", invalid
        }
        let result: Result
        package let detail: String
    }

    static func fetch(_ url: String, algorithms: [JWTAlgorithm], client: HTTPClient, timeoutMillis: Int) async -> Result<Fetched, Failure> {
        let response: HTTPClientResponse
        do {
            response = try await client.execute(HTTPClientRequest(method: "GET", url: url, headers: ["Accept": "application/json"],
                                                                  timeoutMillis: timeoutMillis, connectTimeoutMillis: min(timeoutMillis, 2_000)))
        } catch {
            if error.kind == .tooLarge { return .failure(Failure(result: .tooLarge, detail: "the answer is over \(maxBytes / 1024) KiB")) }
            return .failure(Failure(result: .networkError, detail: "\(error.kind): \(error.detail)"))
        }
        guard response.status == 200 else { return .failure(Failure(result: .httpError, detail: "answered HTTP \(response.status)")) }
        guard response.body.count <= maxBytes else {
            return .failure(Failure(result: .tooLarge, detail: "the answer is over \(maxBytes / 1024) KiB"))
        }
        do {
            let keys = try JWKSet(json: response.body, algorithms: algorithms, origin: .fetched)
            return .success(Fetched(keys: keys, maxAge: maxAge(response.headers.values("Cache-Control"))))
        } catch {
            return .failure(Failure(result: .invalid, detail: error.message))
        }
    }

    /// `max-age=N` among the directives of `Cache-Control` fields (RFC 9111, section 5.2), or nil.
    static func maxAge(_ fields: [String]) -> Int? {
        for field in fields {
            for directive in field.split(separator: ",") {
                let parts = directive.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                let name = parts[0].trimmingWhitespace()
                guard HTTPHeaders.equalsIgnoringCase(String(name), "max-age") else { continue }
                var value = parts[1].trimmingWhitespace()
                if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
                guard !value.isEmpty, value.count <= 9, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
                return Int(value)
            }
        }
        return nil
    }
}

extension Substring {
    fileprivate func trimmingWhitespace() -> Substring {
        var out = self
        while let c = out.first, c == " " || c == "\t" { out = out.dropFirst() }
        while let c = out.last, c == " " || c == "\t" { out = out.dropLast() }
        return out
    }
}

/// Keeps one app's `jwks_url` keys fresh in its `SessionVerifier`: a background refresh every
/// `jwks_refresh` (the answer's `Cache-Control: max-age` wins, held within [1m, 24h]), and one
/// refetch when a token names an unknown kid, at most once per 30 s per app. The token that
/// triggered it is refused meanwhile: verification runs on the event loop and never waits for the
/// network. A failed fetch keeps the last good keys; every fetch is logged when it fails and
/// counted in `pushwarden_jwks_fetches_total{app,result}`.
///
/// Thread-safe. `stop()` ends the background task (a reload replaced the app).
package final class JWKSRefresher: Sendable {
    let app: String
    let settings: SessionPolicy.JWKSURL
    let algorithms: [JWTAlgorithm]
    let verifier: SessionVerifier
    private let client: HTTPClient
    private let metrics: Metrics
    private let logger: Logger
    private let timing: JWKSTiming
    /// What the first fetch gave (nil: it failed and the fallback file serves).
    private let first: JWKSFetch.Fetched?

    private struct State {
        var lastKidFetch: ContinuousClock.Instant?
        var task: Task<Void, Never>?
        var stopped = false
        /// The skipped entries last logged, so an unchanged document is not logged every refresh.
        var lastSkipped: [JWKSet.Skipped] = []
    }

    private let state = Mutex(State())

    package init(app: String, settings: SessionPolicy.JWKSURL, algorithms: [JWTAlgorithm], verifier: SessionVerifier, client: HTTPClient,
         first: JWKSFetch.Fetched?, metrics: Metrics, logger: Logger, timing: JWKSTiming) {
        self.first = first
        self.app = app
        self.settings = settings
        self.algorithms = algorithms
        self.verifier = verifier
        self.client = client
        self.metrics = metrics
        self.logger = logger
        self.timing = timing
    }

    /// The fetch before the client listener opens (and before a reload switches): counted and,
    /// when it fails, logged; the caller decides whether a fallback file serves.
    package static func firstFetch(app: String, settings: SessionPolicy.JWKSURL, algorithms: [JWTAlgorithm], client: HTTPClient,
                           metrics: Metrics, logger: Logger, timing: JWKSTiming) async -> Result<JWKSFetch.Fetched, JWKSFetch.Failure> {
        let result = await JWKSFetch.fetch(settings.url, algorithms: algorithms, client: client, timeoutMillis: timing.timeoutMillis)
        switch result {
        case .success:
            metrics.jwksFetch(app: app, result: "ok")
        case .failure(let failure):
            metrics.jwksFetch(app: app, result: failure.result.rawValue)
            logger.warning("jwks fetch failed", [("app", app), ("url", settings.url), ("result", failure.result.rawValue),
                                                  ("detail", failure.detail)])
        }
        return result
    }

    /// Starts the background refresh and the unknown-kid refetch.
    package func start() {
        // The fallback file's keys count as the ones in force from now; the sidecar logged the
        // entries skipped in what it started with.
        metrics.jwksKeysInForce(app: app)
        state.withLock { $0.lastSkipped = first?.keys.skipped ?? [] }
        let firstDelay = first.map { delay(maxAge: $0.maxAge) } ?? retryDelay
        let task = Task.detached { [weak self] in
            var wait = firstDelay
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(wait))
                guard !Task.isCancelled, let self else { return }
                wait = await self.refresh(reason: "scheduled")
            }
        }
        let stale: Task<Void, Never>? = state.withLock { state in
            guard !state.stopped else { return task }
            state.task = task
            return nil
        }
        stale?.cancel()
        verifier.onUnknownKid { [weak self] kid in self?.unknownKid(kid) }
    }

    /// Ends the background refresh; a refetch under way finishes but changes nothing anyone uses.
    package func stop() {
        let task = state.withLock { state -> Task<Void, Never>? in
            state.stopped = true
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
    }

    /// Called on the verifying loop: schedules one refetch unless one ran within the interval.
    func unknownKid(_ kid: String) {
        let now = ContinuousClock.now
        let due = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            if let last = state.lastKidFetch, last.duration(to: now) < .seconds(timing.unknownKidInterval) { return false }
            state.lastKidFetch = now
            return true
        }
        guard due else { return }
        Task.detached { [self] in _ = await refresh(reason: "unknown kid") }
    }

    /// One fetch; the keys replaced on success. Returns the seconds until the next scheduled one.
    private func refresh(reason: String) async -> Double {
        switch await JWKSFetch.fetch(settings.url, algorithms: algorithms, client: client, timeoutMillis: timing.timeoutMillis) {
        case .success(let fetched):
            guard !state.withLock({ $0.stopped }) else { return retryDelay }
            verifier.replaceKeys(fetched.keys)
            metrics.jwksFetch(app: app, result: "ok")
            metrics.jwksKeysInForce(app: app)
            logger.debug("jwks refreshed", [("app", app), ("url", settings.url), ("reason", reason),
                                            ("keys", String(fetched.keys.rsa.count + fetched.keys.ec.count))])
            logSkipped(fetched.keys)
            return delay(maxAge: fetched.maxAge)
        case .failure(let failure):
            metrics.jwksFetch(app: app, result: failure.result.rawValue)
            logger.warning("jwks refresh failed; the last good keys stay", [
                ("app", app), ("url", settings.url), ("reason", reason), ("result", failure.result.rawValue), ("detail", failure.detail),
            ])
            return retryDelay
        }
    }

    private func delay(maxAge: Int?) -> Double {
        guard let maxAge else { return Double(settings.refreshSeconds) }
        return min(max(Double(maxAge), timing.minimumRefresh), timing.maximumRefresh)
    }

    private var retryDelay: Double { min(Double(settings.refreshSeconds), timing.retryAfterFailure) }

    private func logSkipped(_ keys: JWKSet) {
        let changed = state.withLock { state -> Bool in
            guard state.lastSkipped != keys.skipped else { return false }
            state.lastSkipped = keys.skipped
            return true
        }
        guard changed else { return }
        for skipped in keys.skipped {
            var fields = [("app", app), ("jwks_url", settings.url), ("key", "keys[\(skipped.index)]")]
            if let kid = skipped.kid { fields.append(("kid", kid)) }
            fields.append(("reason", skipped.reason))
            logger.warning("session key skipped", fields)
        }
    }
}
