#if canImport(Glibc)
import Glibc
#endif
import PWPolicy

let usage = """
    usage:
      pushwarden serve --policy FILE [--listen HOST:PORT] [--admin HOST:PORT] [--redis URL] [--log-level LEVEL] [--threads N]
                       [--connections-per-address N] [--head-timeout SECONDS] [--policy-key PUBLIC.pem] [--watch]
      pushwarden policy check FILE...
      pushwarden policy explain [--format text|html] FILE
      pushwarden policy sign --key PRIVATE.pem FILE
      pushwarden policy verify --key PUBLIC.pem FILE
      pushwarden dev-token --policy FILE --app APP --contact ID [--ttl SECONDS]
      pushwarden healthcheck [--admin HOST:PORT]
      pushwarden outbox list|replay|drop --redis URL [--policy FILE] [--policy-key PUBLIC.pem] [--app APP] [--upstream NAME]
      pushwarden tokens quarantine list|release|drop --policy FILE --redis URL --app APP [--token tok:1a2b3c4d,...]
      pushwarden import --policy FILE --redis URL --app APP [--rate N/s] [--refused PATH] [--policy-key PUBLIC.pem] FILE.ndjson
      pushwarden audit verify --redis URL --key PUBLIC.pem [--key OLDER.pem]... [--app APP]...

    environment (flags win): PUSHWARDEN_POLICY, PUSHWARDEN_LISTEN, PUSHWARDEN_ADMIN, PUSHWARDEN_REDIS_URL,
      PUSHWARDEN_LOG_LEVEL, PUSHWARDEN_THREADS, PUSHWARDEN_CONNECTIONS_PER_ADDRESS, PUSHWARDEN_HEAD_TIMEOUT,
      PUSHWARDEN_SHUTDOWN_GRACE, PUSHWARDEN_POLICY_KEY, PUSHWARDEN_WATCH (true or 1)

    serve reloads the policy on SIGHUP, and on a change of the file with --watch.
    """

func fail(_ message: String, code: Int32 = 2) -> Never {
    printError("pushwarden: \(message)")
    exit(code)
}

func printError(_ message: String) {
    var line = Array((message + "\n").utf8)
    _ = line.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}

/// `--name value` pairs (and `--name` alone for a flag in `switches`, read as "true"); a flag
/// given twice or without a value is an error (exit `code`).
func parseFlags(_ arguments: ArraySlice<String>, allowed: Set<String>, switches: Set<String> = [], code: Int32 = 2) -> [String: String] {
    var flags: [String: String] = [:]
    var i = arguments.startIndex
    while i < arguments.endIndex {
        let argument = arguments[i]
        var name = argument
        var value: String?
        if let eq = argument.firstIndex(of: "=") {
            name = String(argument[..<eq])
            value = String(argument[argument.index(after: eq)...])
        }
        let bare = String(name.dropFirst(2))
        guard name.hasPrefix("--"), allowed.contains(bare) || switches.contains(bare) else { fail("unknown argument \(argument)\n\(usage)", code: code) }
        if switches.contains(bare) {
            guard value == nil else { fail("\(name) takes no value", code: code) }
            value = "true"
        } else if value == nil {
            i += 1
            guard i < arguments.endIndex else { fail("\(name) needs a value", code: code) }
            value = arguments[i]
        }
        guard flags[String(name.dropFirst(2))] == nil else { fail("\(name) given twice", code: code) }
        flags[String(name.dropFirst(2))] = value
        i += 1
    }
    return flags
}

func loadPolicyOrExit(_ path: String) -> Policy {
    switch PolicyLoader.load(path: path) {
    case .success(let policy):
        return policy
    case .failure(let diagnostics):
        for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
        exit(1)
    }
}
