import PWCore
import PWPolicy
import Synchronization

/// One upstream's circuit breaker (docs/architecture.md, the outbox): closed, open after `failures` failed calls
/// within `within`, failing fast while open, and letting one probe through after `open_for`.
///
/// What counts as a failure is a *call* that ends `.unavailable`: the upstream was unreachable or
/// answered 5xx/429 through every attempt its retry budget allowed. Single failed attempts do
/// not count: a blip the retries absorbed cost no client anything, and counting attempts would
/// make `failures` mean something different for every `retry.attempts`. Any other end (accepted,
/// or a 4xx refusal: the upstream answered and is up) is a success, and a success in the closed
/// state starts the count again, so the circuit opens on `failures` failures in a row, all
/// within `within`: an upstream failing now and then under heavy traffic is not cut off for
/// everyone.
///
/// Shared by every event loop. The closed state's fast path is one atomic load to ask, and one
/// short lock to report; nothing allocates (the failure times are a ring sized once).
public final class CircuitBreaker: Sendable {
    public enum State: Int, Sendable, Equatable {
        case closed = 0, open = 1, halfOpen = 2
    }

    /// Leave to make one call; hand it back to `record`.
    public struct Permit: Sendable, Equatable {
        /// The one call let through while half-open: its outcome closes or re-opens the circuit.
        public let probe: Bool
        let generation: UInt64
    }

    public enum Decision: Sendable, Equatable {
        case allowed(Permit)
        /// Fail fast: nothing is sent; a call may be let through in `waitMillis` (≥ 1).
        case refused(waitMillis: Int)
    }

    /// A change of state that a call caused, for the log.
    public enum Transition: Sendable, Equatable {
        /// `failures` calls failed within `within` (or, `afterProbe`, the probe failed).
        case opened(afterProbe: Bool)
        case closed
    }

    private enum Phase {
        case closed
        case open(until: UInt64)
        /// The probe left at `since`; after `staleProbeMillis` without a report another may go.
        case halfOpen(since: UInt64)
    }

    private struct Locked {
        var phase: Phase = .closed
        /// Bumped on every change of state: a report from a call let through in an earlier state
        /// changes nothing.
        var generation: UInt64 = 0
        /// The times of the current run of failures, a ring of `policy.failures` entries.
        var failureTimes: [UInt64]
        var failureCount = 0
        var next = 0
    }

    public let policy: CircuitPolicy
    /// How long a probe may stay out before another is let through (a call always reports, so
    /// this only guards against a permit that was never handed back).
    let staleProbeMillis: UInt64
    private let now: @Sendable () -> UInt64
    private let onChange: @Sendable (State) -> Void
    private let locked: Mutex<Locked>
    /// `generation << 2 | state`, written under the lock: the closed state is asked without it.
    private let published = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - staleProbeMillis: the longest one call may take (its budget), plus a margin.
    ///   - now: milliseconds on a monotonic clock (tests pass a manual one).
    ///   - onChange: called under the breaker's lock on every change of state, so a gauge it
    ///     sets never shows changes out of order; it must not call back into the breaker.
    public init(policy: CircuitPolicy, staleProbeMillis: Int = 60_000,
                now: @escaping @Sendable () -> UInt64 = { MonotonicClock.nowMillis() },
                onChange: @escaping @Sendable (State) -> Void = { _ in }) {
        self.policy = policy
        self.staleProbeMillis = UInt64(max(1, staleProbeMillis))
        self.now = now
        self.onChange = onChange
        locked = Mutex(Locked(failureTimes: [UInt64](repeating: 0, count: max(1, policy.failures))))
    }

    /// The state now (an open circuit whose `open_for` has run out reads open until a call probes).
    public var state: State {
        State(rawValue: Int(published.load(ordering: .acquiring) & 3)) ?? .closed
    }

    /// Asks to make a call. When half-open this takes the one probe's place: use `wait` to ask
    /// without taking it.
    public func acquire() -> Decision {
        let snapshot = published.load(ordering: .acquiring)
        if snapshot & 3 == UInt64(State.closed.rawValue) {
            return .allowed(Permit(probe: false, generation: snapshot >> 2))
        }
        let t = now()
        return locked.withLock { s in
            switch s.phase {
            case .closed:
                return .allowed(Permit(probe: false, generation: s.generation))
            case .open(let until) where t < until:
                return .refused(waitMillis: Int(until - t))
            case .halfOpen(let since) where t < since + staleProbeMillis:
                return .refused(waitMillis: Self.probeWaitMillis)
            case .open, .halfOpen:
                change(&s, to: .halfOpen(since: t))
                return .allowed(Permit(probe: true, generation: s.generation))
            }
        }
    }

    /// nil when a call may go now (closed, or a probe is due), else how long to wait: what a
    /// queued delivery asks before it takes a call's place. Takes nothing.
    public func wait() -> Int? {
        if state == .closed { return nil }
        let t = now()
        return locked.withLock { s -> Int? in
            switch s.phase {
            case .closed: return nil
            case .open(let until): return t < until ? Int(until - t) : nil
            case .halfOpen(let since): return t < since + staleProbeMillis ? Self.probeWaitMillis : nil
            }
        }
    }

    /// While a probe is out, how long others are told to wait: its answer is due soon.
    static let probeWaitMillis = 1_000

    /// Reports how the permitted call ended: `failed` when it ended `.unavailable`.
    ///
    /// - Returns: the change of state it caused, if any.
    @discardableResult
    public func record(_ permit: Permit, failed: Bool) -> Transition? {
        let t = now()
        return locked.withLock { s -> Transition? in
            guard permit.generation == s.generation else { return nil }
            switch s.phase {
            case .open:
                return nil
            case .halfOpen:
                guard permit.probe else { return nil }
                if failed {
                    change(&s, to: .open(until: t + UInt64(policy.openForMillis)))
                    return .opened(afterProbe: true)
                }
                change(&s, to: .closed)
                return .closed
            case .closed:
                guard failed else {
                    s.failureCount = 0
                    return nil
                }
                let capacity = s.failureTimes.count
                s.failureTimes[s.next] = t
                s.next = (s.next + 1) % capacity
                s.failureCount = min(s.failureCount + 1, capacity)
                // With the ring full, `next` is the oldest of the last `failures` failures.
                guard s.failureCount == capacity, t - min(t, s.failureTimes[s.next]) <= UInt64(policy.withinMillis) else {
                    return nil
                }
                change(&s, to: .open(until: t + UInt64(policy.openForMillis)))
                return .opened(afterProbe: false)
            }
        }
    }

    private func change(_ s: inout Locked, to phase: Phase) {
        s.phase = phase
        s.generation = (s.generation &+ 1) & ((1 << 62) - 1)  // what `published` holds of it
        s.failureCount = 0
        s.next = 0
        let state: State
        switch phase {
        case .closed: state = .closed
        case .open: state = .open
        case .halfOpen: state = .halfOpen
        }
        published.store(s.generation << 2 | UInt64(state.rawValue), ordering: .releasing)
        onChange(state)
    }
}
