import ClientAPI
import Foundation
import HTTPClient
import Loops
import PWCore
import PWPolicy
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// A clock the test moves by hand.
final class ManualClock: Sendable {
    private let millis = Mutex<UInt64>(1_000_000)
    var now: @Sendable () -> UInt64 { { [self] in millis.withLock { $0 } } }
    func advance(_ by: UInt64) { millis.withLock { $0 += by } }
}

/// The circuit breaker's states on their own, on a manual clock: nothing sleeps.
@Suite struct CircuitBreakerTests {
    final class Changes: Sendable {
        let seen = Mutex<[CircuitBreaker.State]>([])
        var all: [CircuitBreaker.State] { seen.withLock { $0 } }
    }

    static func breaker(failures: Int = 3, within: Int = 10_000, openFor: Int = 30_000, staleProbe: Int = 60_000,
                        clock: ManualClock, changes: Changes = Changes()) -> CircuitBreaker {
        CircuitBreaker(policy: CircuitPolicy(failures: failures, withinMillis: within, openForMillis: openFor),
                       staleProbeMillis: staleProbe, now: clock.now) { state in changes.seen.withLock { $0.append(state) } }
    }

    /// Acquires (it must be allowed) and reports.
    @discardableResult
    static func call(_ breaker: CircuitBreaker, failed: Bool, sourceLocation: SourceLocation = #_sourceLocation) -> CircuitBreaker.Transition? {
        guard case .allowed(let permit) = breaker.acquire() else {
            Issue.record("the circuit refused a call", sourceLocation: sourceLocation)
            return nil
        }
        return breaker.record(permit, failed: failed)
    }

    @Test func opensAfterFailuresWithinTheWindowAndFailsFastWithTheTimeLeft() {
        let clock = ManualClock(), changes = Changes()
        let b = Self.breaker(clock: clock, changes: changes)
        #expect(b.state == .closed)
        #expect(Self.call(b, failed: true) == nil)
        clock.advance(1_000)
        #expect(Self.call(b, failed: true) == nil)
        #expect(b.state == .closed)
        clock.advance(1_000)
        #expect(Self.call(b, failed: true) == .opened(afterProbe: false))
        #expect(b.state == .open)
        #expect(b.acquire() == .refused(waitMillis: 30_000))
        #expect(b.wait() == 30_000)
        clock.advance(12_345)
        #expect(b.acquire() == .refused(waitMillis: 17_655))
        #expect(changes.all == [.open])
    }

    @Test func failuresFurtherApartThanTheWindowDoNotOpen() {
        let clock = ManualClock()
        let b = Self.breaker(clock: clock)
        Self.call(b, failed: true)
        clock.advance(6_000)
        Self.call(b, failed: true)
        clock.advance(6_000)
        #expect(Self.call(b, failed: true) == nil)  // three failures over 12 s
        #expect(b.state == .closed)
        clock.advance(4_000)
        // The window slides: the last three now span 10 s, which is within.
        #expect(Self.call(b, failed: true) == .opened(afterProbe: false))
    }

    @Test func aSuccessStartsTheCountAgain() {
        let clock = ManualClock()
        let b = Self.breaker(clock: clock)
        Self.call(b, failed: true)
        Self.call(b, failed: true)
        Self.call(b, failed: false)
        Self.call(b, failed: true)
        Self.call(b, failed: true)
        #expect(b.state == .closed)
        #expect(Self.call(b, failed: true) == .opened(afterProbe: false))
    }

    @Test func oneFailureOpensWhenFailuresIsOne() {
        let clock = ManualClock()
        let b = Self.breaker(failures: 1, clock: clock)
        #expect(Self.call(b, failed: true) == .opened(afterProbe: false))
    }

    @Test func afterOpenForOneProbeGoesAndItsSuccessCloses() {
        let clock = ManualClock(), changes = Changes()
        let b = Self.breaker(failures: 1, clock: clock, changes: changes)
        Self.call(b, failed: true)
        clock.advance(29_999)
        #expect(b.acquire() == .refused(waitMillis: 1))
        clock.advance(1)
        // Asking does not take the probe's place.
        #expect(b.wait() == nil)
        #expect(b.state == .open)
        guard case .allowed(let probe) = b.acquire() else { Issue.record("no probe"); return }
        #expect(probe.probe)
        #expect(b.state == .halfOpen)
        // Everyone else fails fast while the probe is out.
        #expect(b.acquire() == .refused(waitMillis: CircuitBreaker.probeWaitMillis))
        #expect(b.wait() == CircuitBreaker.probeWaitMillis)
        #expect(b.record(probe, failed: false) == .closed)
        #expect(b.state == .closed)
        #expect(b.wait() == nil)
        #expect(changes.all == [.open, .halfOpen, .closed])
        // Closed again with a fresh count.
        #expect(Self.call(b, failed: false) == nil)
    }

    @Test func aFailedProbeReopensForAnotherOpenFor() {
        let clock = ManualClock(), changes = Changes()
        let b = Self.breaker(failures: 1, openFor: 5_000, clock: clock, changes: changes)
        Self.call(b, failed: true)
        clock.advance(5_000)
        #expect(Self.call(b, failed: true) == .opened(afterProbe: true))
        #expect(b.state == .open)
        #expect(b.acquire() == .refused(waitMillis: 5_000))
        clock.advance(5_000)
        #expect(Self.call(b, failed: false) == .closed)
        #expect(changes.all == [.open, .halfOpen, .open, .halfOpen, .closed])
    }

    @Test func callsLetThroughBeforeAChangeDoNotCountAfterIt() {
        let clock = ManualClock()
        let b = Self.breaker(failures: 1, clock: clock)
        guard case .allowed(let early) = b.acquire() else { Issue.record("refused"); return }
        Self.call(b, failed: true)  // opens
        // A call that started while closed and fails late neither extends nor re-opens anything.
        #expect(b.record(early, failed: true) == nil)
        #expect(b.acquire() == .refused(waitMillis: 30_000))
        clock.advance(30_000)
        guard case .allowed(let probe) = b.acquire() else { Issue.record("no probe"); return }
        // Nor does its success close the circuit: only the probe decides.
        #expect(b.record(early, failed: false) == nil)
        #expect(b.state == .halfOpen)
        #expect(b.record(probe, failed: false) == .closed)
    }

    @Test func aProbeThatNeverReportsIsReplacedAfterItsBudget() {
        let clock = ManualClock()
        let b = Self.breaker(failures: 1, openFor: 1_000, staleProbe: 3_000, clock: clock)
        Self.call(b, failed: true)
        clock.advance(1_000)
        guard case .allowed(let lost) = b.acquire() else { Issue.record("no probe"); return }
        clock.advance(2_999)
        #expect(b.acquire() == .refused(waitMillis: CircuitBreaker.probeWaitMillis))
        clock.advance(1)
        guard case .allowed(let second) = b.acquire() else { Issue.record("no second probe"); return }
        #expect(second.probe)
        #expect(b.record(lost, failed: false) == nil)
        #expect(b.record(second, failed: false) == .closed)
    }

    @Test func concurrentCallersGetExactlyOneProbe() async {
        let clock = ManualClock()
        let b = Self.breaker(failures: 1, clock: clock)
        Self.call(b, failed: true)
        clock.advance(30_000)
        let allowed = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    if case .allowed = b.acquire() { return true }
                    return false
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(allowed == 1)
    }
}

/// The breaker inside an `UpstreamCaller`, on a manual clock, in front of a transport that
/// answers as told and counts what it is sent.
@Suite struct UpstreamCallerCircuitTests {
    final class ScriptedTransport: UpstreamTransport {
        let status = Mutex(503)
        let sent = Atomic<Int>(0)
        func send(_ request: HTTPClientRequest, on loop: EventLoop?) async throws(HTTPClientError) -> HTTPClientResponse {
            sent.add(1, ordering: .relaxed)
            return HTTPClientResponse(status: status.withLock { $0 }, headers: [:], body: [])
        }
    }

    static func caller(clock: ManualClock, transport: ScriptedTransport, metrics: Metrics) throws -> UpstreamCaller {
        let yaml = """
            version: 1
            apps:
              shop:
                session:
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: SESSION}
                client:
                  platforms: [ios, android]
                upstreams:
                  - name: voyado
                    provider: voyado
                    base_path: http://127.0.0.1:1/api/v1/acme/abc123/default
                    api_key: {env: VOYADO_KEY}
                    timeout: 100ms
                    retry: {attempts: 1, backoff: 5ms, max_backoff: 10ms}
                    circuit: {failures: 2, within: 10s, open_for: 30s}
            """
        let policy = try PolicyLoader.load(text: yaml, path: "circuit.yaml").get()
        let logger = Logger(label: "test", level: .debug, sink: .memory())
        let secrets = StaticSecrets([.env("SESSION"): Array(repeating: 7, count: 32), .env("VOYADO_KEY"): Array("vk".utf8)])
        let upstream = policy.apps[0].upstreams[0]
        let (adapter, made) = try ProviderFactory.make(upstream, app: "shop", secrets: secrets, network: transport, logger: logger)
        return UpstreamCaller(app: "shop", adapter: adapter, policy: upstream, transport: made, metrics: metrics, logger: logger,
                              now: clock.now)
    }

    static func register(_ caller: UpstreamCaller) async -> UpstreamFailure? {
        let installation = Installation(platform: .android, pushService: .fcm, pushToken: "fcm-" + UUID().uuidString)
        do throws(UpstreamFailure) {
            let request: HTTPClientRequest
            do throws(ContractError) {
                request = try caller.adapter.registerRequest(installation, context: CallContext(contactID: "alice"), identity: nil, previous: nil)
            } catch {
                return .refusedBeforeCall(error)
            }
            _ = try await caller.call(request, operation: .register, on: nil)
            return nil
        } catch {
            return error
        }
    }

    @Test func anOpenCircuitSendsNothingAndTellsTheTimeLeftRoundedUp() async throws {
        let clock = ManualClock(), transport = ScriptedTransport(), metrics = Metrics()
        let caller = try Self.caller(clock: clock, transport: transport, metrics: metrics)
        #expect(metrics.render().contains(#"pushwarden_upstream_circuit_state{app="shop",upstream="voyado"} 0"#))
        #expect(caller.circuitAllowsCall)
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 1))
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 1))
        #expect(transport.sent.load(ordering: .relaxed) == 2)
        #expect(metrics.render().contains(#"pushwarden_upstream_circuit_state{app="shop",upstream="voyado"} 1"#))
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 30))
        clock.advance(2_500)
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 28))
        #expect(transport.sent.load(ordering: .relaxed) == 2)
        #expect(!caller.circuitAllowsCall)
        #expect(caller.circuitWaitMillis == 27_500)
        clock.advance(27_499)
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 1))
        clock.advance(1)
        #expect(caller.circuitAllowsCall)
        #expect(caller.circuitWaitMillis == nil)
        transport.status.withLock { $0 = 202 }
        #expect(await Self.register(caller) == nil)
        #expect(transport.sent.load(ordering: .relaxed) == 3)
        #expect(metrics.render().contains(#"pushwarden_upstream_circuit_state{app="shop",upstream="voyado"} 0"#))
    }

    @Test func aProviderRefusalIsNotAFailure() async throws {
        let clock = ManualClock(), transport = ScriptedTransport(), metrics = Metrics()
        let caller = try Self.caller(clock: clock, transport: transport, metrics: metrics)
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 1))
        transport.status.withLock { $0 = 400 }
        guard case .rejected = await Self.register(caller) else { Issue.record("not rejected"); return }
        transport.status.withLock { $0 = 503 }
        #expect(await Self.register(caller) == .unavailable(upstream: "voyado", retryAfterSeconds: 1))
        #expect(caller.breaker.state == .closed)  // a refusal came between the two failures
        #expect(transport.sent.load(ordering: .relaxed) == 3)
    }
}
