#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWCrypto
import PWPolicy
import PushWarden

/// `import --policy FILE --redis URL --app APP [--rate N/s] [--refused PATH] FILE`: an app
/// backend's installations into PushWarden (docs/operations.md). Exit 0 when every line was
/// imported or already there, 1 when some were refused or failed (listed in the refused file), 2
/// when the run could not start (usage, policy, store, a file that is not NDJSON).
func importCommand(_ arguments: ArraySlice<String>) async -> Never {
    let shape = "usage: pushwarden import --policy FILE --redis URL --app APP [--rate N/s] [--refused PATH] [--policy-key PUBLIC.pem] FILE.ndjson"
    var rest = arguments
    var file: String?
    if let last = rest.last, !last.hasPrefix("--"), rest.count % 2 == 1 { file = last; rest = rest.dropLast() }
    else if let first = rest.first, !first.hasPrefix("--") { file = first; rest = rest.dropFirst() }
    guard let file else { fail("import needs the NDJSON file to read\n" + shape) }
    let flags = parseFlags(rest, allowed: ["redis", "policy", "policy-key", "app", "rate", "refused"])
    guard let url = flags["redis"] ?? ServeConfiguration.Variable.redisURL.value else {
        fail("import needs --redis URL (or PUSHWARDEN_REDIS_URL): the outbox and the inventory live in Redis")
    }
    guard let policyPath = flags["policy"] ?? ServeConfiguration.Variable.policy.value else { fail("import needs --policy FILE") }
    guard let app = flags["app"] else { fail("import needs --app APP") }
    var rate = 100.0
    if let text = flags["rate"] {
        let number = text.hasSuffix("/s") ? String(text.dropLast(2)) : text
        guard let value = Double(number), value.isFinite, value > 0, value <= 1_000_000 else {
            fail("--rate must be a number of lines per second, 100/s say (more than 0, at most 1000000)")
        }
        rate = value
    }
    var policyKey: Ed25519PublicKey?
    if let keyPath = flags["policy-key"] ?? ServeConfiguration.Variable.policyKey.value {
        switch PolicyFile.publicKey(path: keyPath) {
        case .success(let key): policyKey = key
        case .failure(let error): fail(error.description)
        }
    }
    let policy: Policy
    switch PolicyFile.load(path: policyPath, key: policyKey) {
    case .success(let source): policy = source.policy
    case .failure(let diagnostics):
        for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
        exit(2)
    }
    let options = ImportCommand.Options(file: file, app: app, ratePerSecond: rate, refusedPath: flags["refused"],
                                        terminal: isatty(2) == 1)
    do {
        let report = try await ImportCommand.run(options, policy: policy, redisURL: url, logger: Logger(label: "pushwarden", level: .warning),
                                                 write: { print($0) }, progress: { text in
            var bytes = Array((options.terminal ? text : text + "\n").utf8)
            _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
        })
        exit(report.refused + report.failed > 0 ? 1 : 0)
    } catch {
        fail(error.description)
    }
}
