import Loops
import Providers

/// What registering means at each upstream, decided before any lookup: skipped (the upstream
/// cannot take this installation), refused by the provider's own rules (a shadow; a refusing
/// primary fails the request before any plan exists), or a dedupe entry to look at, with the
/// keys every later step of this registration uses.
package struct RegisterPlan: Sendable {
    enum Step: Sendable {
        case skip
        case refused(UpstreamFailure)
        case dedupe(RegistrationKeys, fingerprint: String)
    }

    let steps: [(caller: UpstreamCaller, step: Step)]
    /// The app's `inventory.expire_after`: how fresh a dedupe hit keeps the last-seen time.
    var expireAfterMillis: Int? = nil
    /// The request's session at the identity provider (`backchannel_logout`).
    var sessionID: String? = nil

    /// What this process remembers the installation's last-seen refresh by: the first
    /// fingerprint (it covers the contact and the token), and the session id, so that a dedupe hit
    /// under a new session writes the record again and a logout of that session finds it. Nil
    /// when nothing is deduped.
    var touchKey: String? {
        for entry in steps {
            if case .dedupe(_, let fingerprint) = entry.step {
                guard let sessionID else { return fingerprint }
                return fingerprint + "\u{0}" + sessionID
            }
        }
        return nil
    }

    /// Looks every dedupe entry up on `loop`; `completion` gets the cached values (nil where
    /// there is nothing to look at or the store failed: those are looked at again, or forwarded
    /// without dedupe, by `Deduper.register`) once all are in, on the loop.
    func lookUp(in store: any DedupeStore, on loop: EventLoop, completion: @escaping ([String??]) -> Void) {
        let batch = LookupBatch(count: steps.count, on: loop, completion: completion)
        for (index, entry) in steps.enumerated() {
            guard case .dedupe(let keys, _) = entry.step else { continue }
            batch.expect()
            store.peek(keys.entry, on: loop) { result in
                switch result {
                case .success(let value): batch.deliver(index, .some(value))
                case .failure: batch.deliver(index, nil)
                }
            }
        }
        batch.sealed()
    }

    /// Each upstream's outcome when none needs a call (every entry current), else nil.
    func outcomesIfUnchanged(_ cached: [String??]) -> [(String, UpstreamOutcome)]? {
        var outcomes: [(String, UpstreamOutcome)] = []
        outcomes.reserveCapacity(steps.count)
        for (index, entry) in steps.enumerated() {
            switch entry.step {
            case .skip:
                outcomes.append((entry.caller.adapter.name, .skipped))
            case .refused(let failure):
                outcomes.append((entry.caller.adapter.name, .failed(failure)))
            case .dedupe(_, let fingerprint):
                guard index < cached.count, case .some(.some(let value)) = cached[index], value == fingerprint else { return nil }
                outcomes.append((entry.caller.adapter.name, .unchanged))
            }
        }
        return outcomes
    }
}

/// Collects one request's lookups on its loop (loop-confined, never shared: every entry point
/// checks its loop in debug builds).
private final class LookupBatch {
    private var results: [String??]
    private var outstanding = 1  // the seal
    private let completion: ([String??]) -> Void
    /// For the checks only; the loop outlives every request it serves (no reference counted here).
    private unowned(unsafe) let loop: EventLoop

    init(count: Int, on loop: EventLoop, completion: @escaping ([String??]) -> Void) {
        results = Array(repeating: nil, count: count)
        self.completion = completion
        self.loop = loop
    }

    func expect() {
        loop.assertOnLoop("LookupBatch")
        outstanding += 1
    }

    func deliver(_ index: Int, _ value: String??) {
        loop.assertOnLoop("LookupBatch")
        results[index] = value
        arrive()
    }

    /// All lookups are issued; those answered at once (an in-memory store) already arrived.
    func sealed() {
        loop.assertOnLoop("LookupBatch")
        arrive()
    }

    private func arrive() {
        outstanding -= 1
        if outstanding == 0 { completion(results) }
    }
}
