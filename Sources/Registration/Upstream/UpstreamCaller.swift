import HTTPClient
import Loops
import PWCore
import PWCrypto
import PWPolicy
import Providers

/// Sends one operation to one upstream: timeouts, retries with exponential backoff and full
/// jitter on network errors, 5xx and 429 (honouring `Retry-After`), all within a deadline, and the
/// provider's verdict mapped to the contract's codes.
public final class UpstreamCaller: Sendable {
    /// The app this caller belongs to (each app has its own callers, and so its own circuits).
    public let app: String
    public let adapter: any UpstreamAdapter
    public let policy: UpstreamPolicy
    let transport: any UpstreamTransport
    let metrics: Metrics
    let logger: Logger
    /// This app's circuit at this upstream, asked before a call's first attempt.
    public let breaker: CircuitBreaker

    /// - Parameter now: the breaker's clock, in milliseconds (tests pass a manual one).
    public init(app: String, adapter: any UpstreamAdapter, policy: UpstreamPolicy, transport: any UpstreamTransport,
                metrics: Metrics, logger: Logger, now: @escaping @Sendable () -> UInt64 = { MonotonicClock.nowMillis() }) {
        self.app = app
        self.adapter = adapter
        self.policy = policy
        self.transport = transport
        self.metrics = metrics
        self.logger = logger
        let budget = Self.budgetMillis(policy)
        let upstream = adapter.name
        breaker = CircuitBreaker(policy: policy.circuit, staleProbeMillis: budget + 1000, now: now) { state in
            metrics.circuitState(app: app, upstream: upstream, state: state.rawValue)
        }
        // Every upstream's series exists from the start, reading closed.
        metrics.circuitState(app: app, upstream: upstream, state: CircuitBreaker.State.closed.rawValue)
    }

    /// Whether this upstream is sent engagement events: its settings say, as `policy explain` does.
    public var takesEvents: Bool { policy.provider.traits.takesEvents }

    /// The longest one call may take, every attempt and backoff included. Dedupe locks live at
    /// least this long.
    public var budgetMillis: Int { Self.budgetMillis(policy) }

    static func budgetMillis(_ policy: UpstreamPolicy) -> Int {
        policy.timeoutMillis * policy.retry.attempts + policy.retry.maxBackoffMillis * (policy.retry.attempts - 1)
    }

    /// Whether a call may go now: the circuit is closed, or a probe is due. Asks without taking
    /// the probe's place (a queued delivery waits instead of calling while it is false).
    public var circuitAllowsCall: Bool { breaker.wait() == nil }

    /// nil when a call may go now, else how long to wait before one may (milliseconds, ≥ 1).
    public var circuitWaitMillis: Int? { breaker.wait() }

    /// - Parameter loop: the request's loop, whose own connections carry every attempt; nil off the
    ///   loops (an outbox worker, the sweeper, an admin call).
    /// - Throws: why the upstream did not take it; never `.refusedBeforeCall`. While the circuit
    ///   is open, `.unavailable` at once (nothing is sent) with the time left as `Retry-After`.
    public func call(_ request: HTTPClientRequest, operation: UpstreamOperation, on loop: EventLoop?) async throws(UpstreamFailure) -> HTTPClientResponse {
        let permit: CircuitBreaker.Permit
        switch breaker.acquire() {
        case .allowed(let granted):
            permit = granted
        case .refused(let waitMillis):
            throw .unavailable(upstream: adapter.name, retryAfterSeconds: RetryAfter.forClient((waitMillis + 999) / 1000))
        }
        do throws(UpstreamFailure) {
            let response = try await attempts(request, operation: operation, on: loop)
            settle(permit, failed: false)
            return response
        } catch {
            if case .unavailable = error {
                settle(permit, failed: true)
            } else {
                settle(permit, failed: false)  // the upstream answered: it is up
            }
            throw error
        }
    }

    private func settle(_ permit: CircuitBreaker.Permit, failed: Bool) {
        switch breaker.record(permit, failed: failed) {
        case .opened(let afterProbe):
            let circuit = policy.circuit
            logger.warning(afterProbe ? "upstream circuit re-opened: the probe failed" : "upstream circuit opened", [
                ("upstream", adapter.name), ("app", app),
                ("failures", afterProbe ? "1" : String(circuit.failures)), ("within", "\(circuit.withinMillis)ms"),
                ("open_for", "\(circuit.openForMillis)ms"),
            ])
        case .closed:
            logger.info("upstream circuit closed: the probe succeeded", [("upstream", adapter.name), ("app", app)])
        case nil:
            break
        }
    }

    /// Every attempt the budget allows.
    private func attempts(_ request: HTTPClientRequest, operation: UpstreamOperation, on loop: EventLoop?) async throws(UpstreamFailure) -> HTTPClientResponse {
        let deadline = MonotonicClock.nowMillis() + UInt64(budgetMillis)
        var attempt = 0
        var lastRetryAfter: Int?
        while true {
            attempt += 1
            let now = MonotonicClock.nowMillis()
            let remaining = deadline > now ? Int(deadline - now) : 0
            var attemptRequest = request
            attemptRequest.timeoutMillis = max(1, min(policy.timeoutMillis, remaining))
            attemptRequest.connectTimeoutMillis = min(attemptRequest.connectTimeoutMillis, attemptRequest.timeoutMillis)

            let started = MonotonicClock.nowMillis()
            let verdict: UpstreamVerdict
            var response: HTTPClientResponse?
            do {
                let r = try await transport.send(attemptRequest, on: loop)
                response = r
                verdict = adapter.verdict(for: r, operation: operation)
            } catch {
                record(operation, "network_error", since: started)
                logger.bounded(.warning, "upstream unreachable", key: adapter.name + operation.rawValue, [("upstream", adapter.name), ("operation", operation.rawValue),
                                                        ("attempt", String(attempt)), ("error", "\(error.kind)")])
                verdict = .retry(afterSeconds: nil)
            }

            switch verdict {
            case .accepted:
                record(operation, "accepted", since: started)
                return response ?? HTTPClientResponse(status: 202, headers: [:], body: [])
            case .rejected(let raw):
                record(operation, "rejected", since: started)
                // Only a code the provider documents is shown as it is (`UpstreamErrorCode`).
                let code = raw.map(adapter.shownErrorCode) ?? UpstreamErrorCode.status(response?.status ?? 0)
                logger.bounded(.warning, "upstream rejected", key: adapter.name + operation.rawValue, [
                    ("upstream", adapter.name), ("operation", operation.rawValue),
                    ("status", String(response?.status ?? 0)), ("upstream_code", code),
                ])
                throw .rejected(upstream: adapter.name, status: response?.status ?? 0, code: code)
            case .authFailed:
                record(operation, "auth_failed", since: started)
                logger.bounded(.error, "upstream refused PushWarden's credential: check the policy's secret", key: adapter.name, [
                    ("upstream", adapter.name), ("operation", operation.rawValue), ("status", String(response?.status ?? 0)),
                ])
                throw .credentialRefused(upstream: adapter.name, status: response?.status ?? 0)
            case .callerRefused(let forbidden, let raw):
                record(operation, "caller_refused", since: started)
                let code = raw.map(adapter.shownErrorCode)
                logger.bounded(.info, "upstream refused the user's own credential", key: adapter.name, [
                    ("upstream", adapter.name), ("operation", operation.rawValue),
                    ("status", String(response?.status ?? 0)), ("upstream_code", code ?? ""),
                ])
                throw .callerRefused(upstream: adapter.name, forbidden: forbidden, code: code)
            case .staleIdentity:
                // A case of the verdict, never a provider's text: no code a provider sends can
                // reach this path.
                record(operation, "stale_identity", since: started)
                throw .staleIdentity(upstream: adapter.name)
            case .retry(let afterSeconds):
                if response != nil { record(operation, "retryable", since: started) }
                lastRetryAfter = afterSeconds ?? lastRetryAfter
                let wait = backoffMillis(attempt: attempt, retryAfterSeconds: afterSeconds)
                let nowAfter = MonotonicClock.nowMillis()
                let left = deadline > nowAfter ? Int(deadline - nowAfter) : 0
                // A provider's wait beyond what is left of the budget means "give up now".
                guard attempt < policy.retry.attempts, wait < left else {
                    let retryAfter = RetryAfter.forClient(lastRetryAfter ?? (policy.retry.maxBackoffMillis + 999) / 1000)
                    throw .unavailable(upstream: adapter.name, retryAfterSeconds: retryAfter)
                }
                try? await Task.sleep(for: .milliseconds(wait))
            }
        }
    }

    /// Full jitter (a random wait up to the exponential bound), unless the provider said how
    /// long to wait.
    func backoffMillis(attempt: Int, retryAfterSeconds: Int?) -> Int {
        if let retryAfterSeconds {
            // Saturating: the adapters already bound it, and an overflow here would end the process.
            let (millis, overflow) = retryAfterSeconds.multipliedReportingOverflow(by: 1000)
            return overflow || millis < 0 ? Int.max : millis
        }
        let exponential = policy.retry.backoffMillis << min(attempt - 1, 16)
        let bound = max(1, min(policy.retry.maxBackoffMillis, exponential))
        let random = SecureRandom.bytes(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        return Int(random % UInt32(bound)) + 1
    }

    private func record(_ operation: UpstreamOperation, _ outcome: String, since started: UInt64) {
        let seconds = Double(MonotonicClock.nowMillis() - started) / 1000
        metrics.upstreamCall(upstream: adapter.name, operation: operation.rawValue, outcome: outcome, seconds: seconds)
    }
}
