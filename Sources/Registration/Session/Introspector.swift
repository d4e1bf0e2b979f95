import HTTPClient
import Loops
import PWCore
import PWPolicy
import SessionAuth

/// `session.type: introspect` for one app (docs/configuration.md, sessions, RFC 7662): finds the client's
/// token, answers from the `IntrospectionCache` when it can, and otherwise POSTs
/// `token=<token>` (form-encoded, never in the URL) to the endpoint with PushWarden's own
/// `client_auth` credential, with the project's `HTTPClient` on the request's loop.
///
/// The token is never logged or kept: the cache holds its SHA-256, log lines carry reasons only.
///
/// - Important: thread-safe; immutable after `init` apart from the cache, which locks.
package final class Introspector: Sendable {
    let app: String
    let policy: IntrospectionPolicy
    let cache: IntrospectionCache
    /// The `Authorization` value PushWarden sends, resolved from the secret at build time.
    private let authorization: String
    private let identity: IdentityClient
    private let metrics: Metrics
    private let logger: Logger

    /// - Throws: `ConfigurationError` when the `client_auth` secret cannot be resolved or cannot be
    ///   sent in a header (a bearer credential must be visible ASCII without spaces).
    package init(app: String, policy: IntrospectionPolicy, secrets: any SecretResolving, identity: IdentityClient, clock: any WallClock,
         metrics: Metrics, logger: Logger, capacity: Int = IntrospectionCache.defaultCapacity) throws(ConfigurationError) {
        self.app = app
        self.policy = policy
        self.identity = identity
        self.metrics = metrics
        self.logger = logger
        cache = IntrospectionCache(ttlSeconds: policy.cacheTTLSeconds, capacity: capacity, clock: clock)
        let ref = policy.clientAuth.secret
        let secret: [UInt8]
        do { secret = try secrets.resolve(ref) } catch {
            throw ConfigurationError("app \(app): session client_auth: \(error.description)")
        }
        switch policy.clientAuth {
        case .bearer:
            guard secret.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw ConfigurationError("app \(app): session client_auth bearer \(ref): must be visible ASCII without spaces")
            }
            authorization = "Bearer " + String(decoding: secret, as: UTF8.self)
        case .basic(let user, _):
            authorization = "Basic " + Self.base64(Array(user.utf8) + [UInt8(ascii: ":")] + secret)
        }
    }

    // MARK: On the request's loop

    /// The session when the token's answer is cached, else the lookup that gets it.
    func check(_ headers: HTTPHeaders) -> SessionCheck {
        let token: String
        switch policy.source {
        case .header(let name):
            switch SessionVerifier.bearerToken(in: headers, header: name) {
            case .success(let found?): token = found
            case .success(nil): return .decided(.failure(.refused(AuthFailure("no session token"))))
            case .failure(let failure): return .decided(.failure(.refused(failure)))
            }
        case .cookie(let name):
            guard let found = SessionVerifier.cookie(named: name, in: headers.values("Cookie")) else {
                return .decided(.failure(.refused(AuthFailure("no session token"))))
            }
            guard found.utf8.count <= SessionVerifier.maxTokenBytes else {
                return .decided(.failure(.refused(AuthFailure("token longer than \(SessionVerifier.maxTokenBytes) bytes"))))
            }
            token = found
        }
        let key = IntrospectionCache.Key(token: token)
        if let answer = cache.cached(key) { return .decided(answer.sessionResult) }
        return .lookUp(IntrospectionLookup(introspector: self, token: token, key: key))
    }

    /// Joins the call for `key` (or makes it) and calls `done` on `loop` with its answer.
    func lookUp(_ token: String, key: IntrospectionCache.Key, on loop: EventLoop,
                _ done: @escaping @Sendable (Result<Session, SessionRefusal>) -> Void) {
        let waiter: IntrospectionCache.Waiter = { answer in
            let result = answer.sessionResult
            if loop.isCurrent { done(result) } else { loop.execute { done(result) } }
        }
        switch cache.join(key, waiter) {
        case .answered(let answer):
            done(answer.sessionResult)
        case .waiting:
            break
        case .lead:
            // On the loop: the call goes out on the loop's own connections and resumes here.
            Task(executorPreference: loop) { [self] in
                let answer = await call(token, on: loop)
                for waiter in cache.settle(key, answer) { waiter(answer) }
            }
        }
    }

    // MARK: The endpoint

    /// One call to the endpoint, judged, on `loop`'s own connections (nil: the client's thread).
    /// A failure to get an answer is `unavailable`.
    func call(_ token: String, on loop: EventLoop?) async -> IntrospectionAnswer {
        let request = HTTPClientRequest(
            method: "POST", url: policy.url,
            headers: ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json", "Authorization": authorization],
            body: Array(("token=" + Self.formEncode(token)).utf8),
            timeoutMillis: policy.timeoutMillis, connectTimeoutMillis: policy.timeoutMillis)
        let answer: IntrospectionAnswer
        switch await send(request, on: loop) {
        case .success(let response):
            answer = IntrospectionAnswer.judge(status: response.status, body: response.body, contactField: policy.contactField,
                                               now: cache.now())
            if response.status == 401 || response.status == 403 {
                // Most likely PushWarden's own credential, not the client's token: the operator's to fix.
                logger.bounded(.warning, "introspection endpoint refused the request", key: app + "\u{0}\(response.status)",
                               [("app", app), ("status", String(response.status))])
            }
        case .failure(let unanswered):
            answer = .unavailable(unanswered.reason)
        }
        switch answer {
        case .active: metrics.introspection(app: app, result: "active")
        case .refused: metrics.introspection(app: app, result: "refused")
        case .unavailable(let reason):
            metrics.introspection(app: app, result: "unavailable")
            logger.bounded(.warning, "introspection unavailable", key: app + "\u{0}" + reason, [("app", app), ("reason", reason)])
        }
        return answer
    }

    /// Why a call produced no reply, for the log.
    private struct Unanswered: Error {
        let reason: String
    }

    /// The endpoint's reply, or why there is none (a timeout is one: the endpoint did not answer).
    private func send(_ request: HTTPClientRequest, on loop: EventLoop?) async -> Result<HTTPClientResponse, Unanswered> {
        let client: HTTPClient
        do throws(ConfigurationError) { client = try identity.client() } catch { return .failure(Unanswered(reason: "introspection client: \(error.description)")) }
        do throws(HTTPClientError) {
            let response = try await client.execute(request, on: loop)
            return .success(response)
        } catch {
            return .failure(Unanswered(reason: error.kind == .timeout ? "introspection endpoint timed out" : "introspection endpoint unreachable: \(error.detail)"))
        }
    }

    /// `application/x-www-form-urlencoded` value encoding: every byte but `A-Z a-z 0-9 - . _ ~`
    /// as `%XX`, which every form decoder reads back exactly.
    static func formEncode(_ value: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(value.utf8.count)
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            default:
                out.append(contentsOf: [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Standard base64 with padding (RFC 4648, section 4), for `Authorization: Basic`.
    static func base64(_ bytes: [UInt8]) -> String {
        var text = Base64URL.encode(bytes).replacingOccurrences("-", "+").replacingOccurrences("_", "/")
        while text.utf8.count % 4 != 0 { text += "=" }
        return text
    }
}

private extension String {
    func replacingOccurrences(_ a: Character, _ b: Character) -> String { String(map { $0 == a ? b : $0 }) }
}
