import Synchronization

/// A store operation whose commands were sent before anyone waits for it, so that they leave in
/// the same write as what the request sends next: `value()` returns its result once it is in.
package final class Started<Value: Sendable>: Sendable {
    private let state = Mutex<(value: Value?, waiter: CheckedContinuation<Value, Never>?)>((nil, nil))

    package init() {}

    /// One that needs no waiting.
    package init(_ value: Value) { state.withLock { $0.value = value } }

    /// Hands the result over; the first call counts.
    package func complete(_ value: Value) {
        let waiter: CheckedContinuation<Value, Never>? = state.withLock { state in
            guard state.value == nil else { return nil }
            state.value = value
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: value)
    }

    /// The result, once it is in (one waiter).
    package func value() async -> Value {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value, Never>) in
            let now: Value? = state.withLock { state in
                if let value = state.value { return value }
                state.waiter = continuation
                return nil
            }
            if let now { continuation.resume(returning: now) }
        }
    }
}
