import PWCore
import PWPolicy
import SessionAuth

/// One app from the policy, ready to serve: its session verifier and its upstreams, the primary
/// first.
final class AppRuntime: Sendable {
    let policy: AppPolicy
    let sessions: SessionVerifier
    let upstreams: [UpstreamCaller]

    init(policy: AppPolicy, sessions: SessionVerifier, upstreams: [UpstreamCaller]) {
        self.policy = policy
        self.sessions = sessions
        self.upstreams = upstreams
    }

    /// Runs `body` for every upstream, concurrently when there are several, and returns the
    /// outcomes in upstream order.
    func eachUpstream(_ body: @escaping @Sendable (UpstreamCaller) async -> UpstreamOutcome) async -> [(String, UpstreamOutcome)] {
        if upstreams.count == 1 {
            let caller = upstreams[0]
            return [(caller.adapter.name, await body(caller))]
        }
        return await withTaskGroup(of: (Int, UpstreamOutcome).self) { group in
            for (index, caller) in upstreams.enumerated() {
                group.addTask { (index, await body(caller)) }
            }
            var results = [(String, UpstreamOutcome)?](repeating: nil, count: upstreams.count)
            for await (index, outcome) in group {
                results[index] = (upstreams[index].adapter.name, outcome)
            }
            return results.compactMap { $0 }
        }
    }

    /// The client's answer: the primary's failure fails the request; a shadow's failure only
    /// shows in the `upstreams` map (and in the log and metrics).
    func answer(_ outcomes: [(String, UpstreamOutcome)], logger: Logger, requestID: String) throws(ContractError) -> JSONObject {
        let primaryName = policy.primary?.name
        var map = JSONObject()
        for (name, outcome) in outcomes {
            if case .failed(let error) = outcome {
                if name == primaryName { throw error }
                logger.bounded(.warning, "shadow upstream failed", key: policy.id + "\u{0}" + name, [("app", policy.id), ("upstream", name), ("request_id", requestID),
                                                          ("code", error.code.rawValue)])
            }
            map[name] = .string(outcome.name)
        }
        return JSONObject([JSONMember("upstreams", .object(map))])
    }
}
