#if canImport(Glibc)
import Glibc
#endif
import CShims
import Dispatch
import HTTPClient
import PWCore
import PWPolicy
import PushWarden
import SessionAuth
import Synchronization

/// `pushwarden`: a thin command layer over the PushWarden module. See CONTRACT.md section 3.

let usage = """
    usage:
      pushwarden serve --policy FILE [--listen HOST:PORT] [--admin HOST:PORT] [--redis URL] [--log-level LEVEL] [--threads N]
                       [--connections-per-address N] [--head-timeout SECONDS]
      pushwarden policy check FILE...
      pushwarden policy explain FILE
      pushwarden dev-token --policy FILE --app APP --contact ID [--ttl SECONDS]
      pushwarden healthcheck [--admin HOST:PORT]

    environment (flags win): PUSHWARDEN_POLICY, PUSHWARDEN_LISTEN, PUSHWARDEN_ADMIN, PUSHWARDEN_REDIS_URL,
      PUSHWARDEN_LOG_LEVEL, PUSHWARDEN_THREADS, PUSHWARDEN_CONNECTIONS_PER_ADDRESS, PUSHWARDEN_HEAD_TIMEOUT,
      PUSHWARDEN_SHUTDOWN_GRACE
    """

func fail(_ message: String, code: Int32 = 2) -> Never {
    printError("pushwarden: \(message)")
    exit(code)
}

func printError(_ message: String) {
    var line = Array((message + "\n").utf8)
    _ = line.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}

func environment(_ name: String) -> String? {
    guard let value = getenv(name) else { return nil }
    let s = String(cString: value)
    return s.isEmpty ? nil : s
}

/// `--name value` pairs; a flag given twice or without a value is an error (exit `code`).
func parseFlags(_ arguments: ArraySlice<String>, allowed: Set<String>, code: Int32 = 2) -> [String: String] {
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
        guard name.hasPrefix("--"), allowed.contains(String(name.dropFirst(2))) else { fail("unknown argument \(argument)\n\(usage)", code: code) }
        if value == nil {
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

// MARK: serve

func serve(_ arguments: ArraySlice<String>) async -> Never {
    let flags = parseFlags(arguments, allowed: ["policy", "listen", "admin", "redis", "log-level", "threads",
                                                "connections-per-address", "head-timeout"])
    guard let policyPath = flags["policy"] ?? environment("PUSHWARDEN_POLICY") else { fail("serve needs --policy FILE") }
    var configuration = ServeConfiguration()
    if let listen = flags["listen"] ?? environment("PUSHWARDEN_LISTEN") {
        guard let hostPort = HostPort(listen) else { fail("--listen must be HOST:PORT") }
        configuration.listen = hostPort
    }
    if let admin = flags["admin"] ?? environment("PUSHWARDEN_ADMIN") {
        guard let hostPort = HostPort(admin) else { fail("--admin must be HOST:PORT") }
        configuration.admin = hostPort
    }
    configuration.redisURL = flags["redis"] ?? environment("PUSHWARDEN_REDIS_URL")
    if let level = flags["log-level"] ?? environment("PUSHWARDEN_LOG_LEVEL") {
        guard let parsed = Logger.Level(name: level) else { fail("--log-level must be debug, info, warning or error") }
        configuration.logLevel = parsed
    }
    if let threads = flags["threads"] ?? environment("PUSHWARDEN_THREADS") {
        guard let n = Int(threads), (1...256).contains(n) else { fail("--threads must be 1 to 256") }
        configuration.threads = n
    }
    if let limit = flags["connections-per-address"] ?? environment("PUSHWARDEN_CONNECTIONS_PER_ADDRESS") {
        guard let n = Int(limit), (0...1_000_000).contains(n) else { fail("--connections-per-address must be 0 (no limit) to 1000000") }
        configuration.connectionsPerAddress = n
    }
    if let timeout = flags["head-timeout"] ?? environment("PUSHWARDEN_HEAD_TIMEOUT") {
        guard let seconds = Double(timeout), seconds >= 0, seconds <= 86_400 else { fail("--head-timeout must be 0 (no limit) to 86400 seconds") }
        configuration.headTimeoutSeconds = seconds
    }
    if let grace = environment("PUSHWARDEN_SHUTDOWN_GRACE") {
        guard let seconds = Double(grace), seconds >= 0 else { fail("PUSHWARDEN_SHUTDOWN_GRACE must be seconds") }
        configuration.shutdownGraceSeconds = seconds
    }

    // glibc gives every thread that allocates an arena of its own, up to 8 per core. The event
    // loops do nearly all the allocating, so each needs one: two shared arenas made the loops
    // wait on each other's malloc lock (futex waits were ~14% of a forwarded request's CPU).
    // The rest (main, admin, curl and Redis pool threads, the Swift pool) allocate little; the cap
    // leaves them room without one arena per idle thread on large machines. Resident memory with
    // 1,000 connections measured the same with 2, 3 and 8 arenas (52.5-52.8 MiB).
    let loops = configuration.threads > 0 ? configuration.threads : max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    _ = pw_limit_malloc_arenas(Int32(loops + 8))
    let policy = loadPolicyOrExit(policyPath)
    let logger = Logger(label: "pushwarden", level: configuration.logLevel)
    signal(SIGPIPE, SIG_IGN)
    let signals = TerminationSignals()
    let sidecar: Sidecar
    do {
        sidecar = try Sidecar(policy: policy, configuration: configuration, logger: logger)
    } catch {
        fail(error.description, code: 1)
    }
    let received = await signals.wait()
    logger.info("signal received", [("signal", received == SIGTERM ? "SIGTERM" : "SIGINT")])
    await sidecar.shutdown(gracePeriodSeconds: configuration.shutdownGraceSeconds)
    exit(0)
}

/// SIGTERM and SIGINT, caught from construction on: a signal that arrives while the sidecar starts
/// (or right after it logged that it listens) is kept and answered once `wait` is called, instead
/// of killing the process (default action) or being lost (ignored before a handler exists).
final class TerminationSignals: @unchecked Sendable {
    // `sources` is written only in `init`; `state` is behind its own lock.
    private var sources: [any DispatchSourceSignal] = []
    private let state = Mutex<(received: Int32?, waiter: CheckedContinuation<Int32, Never>?)>((nil, nil))

    init() {
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let queue = DispatchQueue(label: "pushwarden.signals")
        for number in [SIGTERM, SIGINT] {
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [weak self] in self?.fire(number) }
            source.resume()
            sources.append(source)
        }
    }

    private func fire(_ number: Int32) {
        let waiter = state.withLock { state -> CheckedContinuation<Int32, Never>? in
            guard state.received == nil else { return nil }
            state.received = number
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: number)
    }

    /// Suspends until the first SIGTERM or SIGINT (returns at once if one already came).
    func wait() async -> Int32 {
        await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let received = state.withLock { state -> Int32? in
                if let received = state.received { return received }
                state.waiter = continuation
                return nil
            }
            if let received { continuation.resume(returning: received) }
        }
    }
}

// MARK: policy

func policyCommand(_ arguments: ArraySlice<String>) -> Never {
    guard let sub = arguments.first else { fail(usage) }
    let files = arguments.dropFirst()
    switch sub {
    case "check":
        guard !files.isEmpty else { fail("policy check needs at least one FILE") }
        var failed = false
        for file in files {
            switch PolicyLoader.load(path: file) {
            case .success(let policy):
                // What serve reads at start-up besides secrets: the JWKS files, by serve's rules.
                let found = SessionPolicyCheck.diagnostics(for: policy)
                for diagnostic in found { print(diagnostic.description) }
                if found.contains(where: { $0.severity == .error }) {
                    failed = true
                } else {
                    print("\(file): ok")
                }
            case .failure(let diagnostics):
                failed = true
                for diagnostic in diagnostics.diagnostics { print(diagnostic.description) }
            }
        }
        exit(failed ? 1 : 0)
    case "explain":
        guard files.count == 1, let file = files.first else { fail("policy explain needs exactly one FILE") }
        print(PolicyExplainer.explain(loadPolicyOrExit(file)), terminator: "")
        exit(0)
    default:
        fail("unknown policy command \(sub)\n\(usage)")
    }
}

// MARK: dev-token

func devToken(_ arguments: ArraySlice<String>) -> Never {
    let flags = parseFlags(arguments, allowed: ["policy", "app", "contact", "ttl"])
    guard let policyPath = flags["policy"], let appID = flags["app"], let contact = flags["contact"] else {
        fail("dev-token needs --policy FILE --app APP --contact ID")
    }
    let ttl = Int(flags["ttl"] ?? "3600") ?? -1
    guard ttl > 0, ttl <= 7 * 86_400 else { fail("--ttl must be 1 to 604800 seconds") }
    let policy = loadPolicyOrExit(policyPath)
    guard let app = policy.app(appID) else { fail("no app \(appID) in \(policyPath)") }
    do {
        print(try DevToken.mint(session: app.session, contactID: contact, ttlSeconds: ttl))
    } catch {
        fail(error.description, code: 1)
    }
    exit(0)
}

// MARK: healthcheck

/// `pushwarden healthcheck`: GET /healthz on the admin listener with the project's own HTTP
/// client, for a container's HEALTHCHECK (the runtime image has no curl). Exit 0 on 200 and 1 on
/// anything else, usage errors included (Docker reserves 2); one line says why.
func healthcheck(_ arguments: ArraySlice<String>) async -> Never {
    let flags = parseFlags(arguments, allowed: ["admin"], code: 1)
    let text = flags["admin"] ?? environment("PUSHWARDEN_ADMIN") ?? "127.0.0.1:9090"
    guard var admin = HostPort(text), admin.port > 0 else { fail("healthcheck: --admin must be HOST:PORT, not \(text)", code: 1) }
    // A wildcard listen address (the image's PUSHWARDEN_ADMIN=0.0.0.0:9090) is reached on loopback.
    if admin.host == "0.0.0.0" { admin.host = "127.0.0.1" } else if admin.host == "::" { admin.host = "::1" }
    let url = "http://\(admin)/healthz"
    let client: HTTPClient
    do {
        client = try HTTPClient(configuration: .init(maxConnectionsPerHost: 1, maxTotalConnections: 1,
                                                     maxResponseBytes: 64 * 1024, userAgent: "pushwarden-healthcheck"))
    } catch {
        fail("healthcheck: unhealthy: cannot start the HTTP client: \(error.detail)", code: 1)
    }
    let outcome: Result<HTTPClientResponse, HTTPClientError>
    do {
        outcome = .success(try await client.execute(.init(method: "GET", url: url, timeoutMillis: 1500, connectTimeoutMillis: 1000)))
    } catch {
        outcome = .failure(error)
    }
    client.shutdown()
    switch outcome {
    case .success(let response) where response.status == 200:
        print("healthy: \(url) answered 200")
        exit(0)
    case .success(let response):
        fail("healthcheck: unhealthy: \(url) answered \(response.status)", code: 1)
    case .failure(let error):
        fail("healthcheck: unhealthy: \(url): \(error.kind) (\(error.detail))", code: 1)
    }
}

// MARK: main

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "serve": await serve(arguments.dropFirst())
case "policy": policyCommand(arguments.dropFirst())
case "dev-token": devToken(arguments.dropFirst())
case "healthcheck": await healthcheck(arguments.dropFirst())
case "-h", "--help", "help": print(usage); exit(0)
default: fail(usage)
}
