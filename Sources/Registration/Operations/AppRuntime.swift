import PWCore
import PWPolicy
import SessionAuth

/// One app from the policy, ready to serve: how it authenticates sessions and its upstreams, the
/// primary first.
package final class AppRuntime: Sendable {
    package let policy: AppPolicy
    package let sessions: SessionAuthenticator
    package let upstreams: [UpstreamCaller]
    /// Keeps `sessions`' keys fresh when they come from a `jwks_url`; started when the app is put
    /// in force, stopped when a reload replaces it.
    package let jwks: JWKSRefresher?

    package init(policy: AppPolicy, sessions: SessionAuthenticator, upstreams: [UpstreamCaller], jwks: JWKSRefresher? = nil) {
        self.policy = policy
        self.sessions = sessions
        self.upstreams = upstreams
        self.jwks = jwks
    }

    /// An app whose sessions are JWTs.
    convenience init(policy: AppPolicy, sessions: SessionVerifier, upstreams: [UpstreamCaller], jwks: JWKSRefresher? = nil) {
        self.init(policy: policy, sessions: .jwt(sessions), upstreams: upstreams, jwks: jwks)
    }

    /// Runs `body` for every upstream, concurrently when there are several, and returns the
    /// outcomes in upstream order.
    func eachUpstream<Result: Sendable>(_ body: @escaping @Sendable (UpstreamCaller) async -> Result) async -> [(String, Result)] {
        let outcomes = await mapConcurrently(upstreams) { caller in await body(caller) }
        return zip(upstreams, outcomes).map { ($0.adapter.name, $1) }
    }

    /// Whether the primary took its part (or had none to take): what decides the client's answer.
    func primarySucceeded(_ outcomes: [(String, UpstreamOutcome)]) -> Bool {
        let primaryName = policy.primary?.name
        return !outcomes.contains { name, outcome in
            if case .failed = outcome { return name == primaryName }
            return false
        }
    }

    /// The client's answer: the primary's failure fails the request (as the contract's error);
    /// a shadow's failure only shows in the `upstreams` map (and in the log and metrics).
    package func answer(_ outcomes: [(String, UpstreamOutcome)], logger: Logger, requestID: String) throws(ContractError) -> JSONObject {
        let primaryName = policy.primary?.name
        var map = JSONObject()
        map.members.reserveCapacity(outcomes.count)
        for (name, outcome) in outcomes {
            if case .failed(let failure) = outcome {
                if name == primaryName { throw failure.contractError }
                logger.bounded(.warning, "shadow upstream failed", key: policy.id + "\u{0}" + name, [
                    ("app", policy.id), ("upstream", name), ("request_id", requestID), ("code", failure.code.rawValue),
                ])
            }
            map[name] = .string(outcome.name)
        }
        return JSONObject([JSONMember("upstreams", .object(map))])
    }
}
