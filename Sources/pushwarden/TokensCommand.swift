#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWCrypto
import PWPolicy
import PushWarden

/// `tokens quarantine list|release|drop`: the dead-token reports the mass-death guard holds for
/// an app. The policy (`--policy`, else `PUSHWARDEN_POLICY`, signature checked as `serve` checks
/// it) gives the store keys, the upstreams a release calls, and the evidence trail. Exit 1 when a
/// report could not be handled (it stays held), 2 on usage errors.
func tokensCommand(_ arguments: ArraySlice<String>) async -> Never {
    let shape = "usage: pushwarden tokens quarantine list|release|drop --policy FILE --redis URL --app APP [--token tok:1a2b3c4d,...] [--policy-key PUBLIC.pem]"
    guard arguments.first == "quarantine", let verb = arguments.dropFirst().first,
          let action = QuarantineCommand.Action(rawValue: verb) else { fail(shape) }
    let flags = parseFlags(arguments.dropFirst(2), allowed: ["redis", "policy", "policy-key", "app", "token"])
    guard let url = flags["redis"] ?? ServeConfiguration.Variable.redisURL.value else {
        fail("tokens quarantine needs --redis URL (or PUSHWARDEN_REDIS_URL): the quarantine lives in Redis")
    }
    guard let policyPath = flags["policy"] ?? ServeConfiguration.Variable.policy.value else { fail("tokens quarantine needs --policy FILE") }
    guard let app = flags["app"] else { fail("tokens quarantine needs --app APP") }
    var policyKey: Ed25519PublicKey?
    if let keyPath = flags["policy-key"] ?? ServeConfiguration.Variable.policyKey.value {
        switch PolicyFile.publicKey(path: keyPath) {
        case .success(let key): policyKey = key
        case .failure(let error): fail(error.description, code: 1)
        }
    }
    let policy: Policy
    switch PolicyFile.load(path: policyPath, key: policyKey) {
    case .success(let source): policy = source.policy
    case .failure(let diagnostics):
        for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
        exit(1)
    }
    let tokens = flags["token"].map { Set($0.split(separator: ",").map(String.init)) }
    do {
        let report = try await QuarantineCommand.run(action, policy: policy, redisURL: url, app: app, tokens: tokens,
                                                     logger: Logger(label: "pushwarden", level: .warning)) { print($0) }
        exit(report.failed > 0 ? 1 : 0)
    } catch {
        fail(error.description, code: 1)
    }
}
