#if canImport(Glibc)
import Glibc
#endif
import CShims
import Dispatch
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
import PushWarden
import SessionAuth
import Synchronization

/// `pushwarden`: a thin command layer over the PushWarden module. See CONTRACT.md section 3.

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

func environment(_ name: String) -> String? {
    guard let value = getenv(name) else { return nil }
    let s = String(cString: value)
    return s.isEmpty ? nil : s
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

// MARK: serve

func serve(_ arguments: ArraySlice<String>) async -> Never {
    let flags = parseFlags(arguments, allowed: ["policy", "listen", "admin", "redis", "log-level", "threads",
                                                "connections-per-address", "head-timeout", "policy-key"], switches: ["watch"])
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
    var policyKey: Ed25519PublicKey?
    if let keyPath = flags["policy-key"] ?? environment("PUSHWARDEN_POLICY_KEY") {
        switch PolicyFile.publicKey(path: keyPath) {
        case .success(let key): policyKey = key
        case .failure(let error): fail(error.description, code: 1)
        }
    }
    let watchValue = flags["watch"] ?? environment("PUSHWARDEN_WATCH") ?? "false"
    guard ["true", "1", "false", "0"].contains(watchValue) else { fail("PUSHWARDEN_WATCH must be true, 1, false or 0") }
    let watch = watchValue == "true" || watchValue == "1"
    // A SIGHUP before the reloader exists must not end the process (its default action).
    signal(SIGHUP, SIG_IGN)
    let source: PolicySource
    switch PolicyFile.load(path: policyPath, key: policyKey) {
    case .success(let loaded): source = loaded
    case .failure(let diagnostics):
        for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
        exit(1)
    }
    let logger = Logger(label: "pushwarden", level: configuration.logLevel)
    signal(SIGPIPE, SIG_IGN)
    let signals = TerminationSignals()
    let sidecar: Sidecar
    do {
        sidecar = try await Sidecar.start(policy: source.policy, sha256: source.sha256, signed: source.signed, configuration: configuration,
                                          logger: logger)
    } catch {
        fail(error.description, code: 1)
    }
    let reloader = PolicyReloader(path: policyPath, key: policyKey, sidecar: sidecar, logger: logger.with(label: "policy"))
    let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "pushwarden.sighup"))
    hangup.setEventHandler { reloader.request(reason: "SIGHUP") }
    hangup.resume()
    if watch { reloader.watch() }
    let received = await signals.wait()
    hangup.cancel()
    reloader.stopWatching()
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
                // What serve reads at start-up: the JWKS files, by serve's rules, and the store keys
                // (a reference that cannot be read here is a warning: checks seldom hold the secrets).
                let found = SessionPolicyCheck.diagnostics(for: policy) + StoreKeys.diagnostics(for: policy)
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
        // `--format text|html` (default text) before FILE; html is one self-contained page.
        var rest = Array(files), format = "text"
        if let first = rest.first, first == "--format" || first.hasPrefix("--format=") {
            if first == "--format" {
                guard rest.count > 1 else { fail("--format needs a value") }
                format = rest[1]
                rest.removeFirst(2)
            } else {
                format = String(first.dropFirst("--format=".count))
                rest.removeFirst()
            }
        }
        guard format == "text" || format == "html" else { fail("--format must be text or html, not \(format)") }
        guard rest.count == 1, let file = rest.first, !file.hasPrefix("--") else { fail("policy explain needs exactly one FILE") }
        let policy = loadPolicyOrExit(file)
        print(format == "html" ? PolicyExplainerHTML.render(policy) : PolicyExplainer.explain(policy), terminator: "")
        exit(0)
    case "sign", "verify":
        signOrVerify(sub, files)
    default:
        fail("unknown policy command \(sub)\n\(usage)")
    }
}

/// `policy sign --key PRIVATE.pem FILE` writes `FILE.sig`; `policy verify --key PUBLIC.pem FILE`
/// checks it. Exit 0 on success, 1 when the signature is missing or wrong (or a file unreadable),
/// 2 on usage errors.
func signOrVerify(_ command: String, _ arguments: ArraySlice<String>) -> Never {
    var rest = arguments
    var keyPath: String?
    var files: [String] = []
    while let argument = rest.popFirst() {
        if argument == "--key" {
            guard keyPath == nil, let value = rest.popFirst() else { fail("policy \(command): --key needs one value") }
            keyPath = value
        } else if argument.hasPrefix("--key=") {
            guard keyPath == nil else { fail("policy \(command): --key given twice") }
            keyPath = String(argument.dropFirst("--key=".count))
        } else if argument.hasPrefix("--") {
            fail("unknown argument \(argument)\n\(usage)")
        } else {
            files.append(argument)
        }
    }
    guard let keyPath, files.count == 1, let file = files.first else { fail("policy \(command) needs --key KEY.pem and exactly one FILE") }
    guard let bytes = readWholeFile(file) else { fail("cannot read \(file)", code: 1) }
    if command == "sign" {
        // Only what `serve --policy-key` would take is signed: a valid policy with a serial.
        guard let text = String(validating: bytes, as: UTF8.self) else { fail("\(file): the policy file is not valid UTF-8", code: 1) }
        let serial: Int
        switch PolicyLoader.load(text: text, path: file) {
        case .failure(let diagnostics):
            for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
            exit(1)
        case .success(let policy):
            guard let value = policy.serial else { fail(policy.diagnostic(at: "serial", PolicyFile.missingSerial).description, code: 1) }
            serial = value
        }
        guard let pem = readWholeFile(keyPath) else { fail("cannot read the key \(keyPath)", code: 1) }
        do {
            let key = try Ed25519PrivateKey(pem: pem)
            let signature = try key.sign(bytes)
            let target = PolicyFile.signaturePath(file)
            guard writeWholeFile(target, signature) else { fail("cannot write \(target)", code: 1) }
            print("\(target): signed \(file) (sha256 \(SHA256.hexHash(bytes)), serial \(serial))")
            exit(0)
        } catch {
            fail("the key \(keyPath) is not a PEM Ed25519 private key (\(error.message))", code: 1)
        }
    }
    let key: Ed25519PublicKey
    switch PolicyFile.publicKey(path: keyPath) {
    case .success(let loaded): key = loaded
    case .failure(let error): fail(error.description, code: 1)
    }
    if let problem = PolicyFile.signatureProblem(bytes: bytes, path: file, key: key) { fail("\(file): \(problem)", code: 1) }
    print("\(file): signature ok (sha256 \(SHA256.hexHash(bytes)))")
    exit(0)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader (a watching
/// `serve`) never sees half a signature.
func writeWholeFile(_ path: String, _ bytes: [UInt8]) -> Bool {
    let temporary = path + ".tmp-\(getpid())"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    guard fd >= 0 else { return false }
    let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    guard close(fd) == 0, written == bytes.count, rename(temporary, path) == 0 else {
        unlink(temporary)
        return false
    }
    return true
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
    // An introspected session is the app backend's to issue: there is nothing to mint here.
    guard let session = app.session.jwt else { fail("dev-token works only for apps whose session uses hmac_secret with HS256", code: 1) }
    do {
        print(try DevToken.mint(session: session, contactID: contact, ttlSeconds: ttl))
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
/// `outbox list|replay|drop`: the dead-letter streams (tokens as short hashes). The policy
/// (`--policy`, else `PUSHWARDEN_POLICY`, signature checked with `--policy-key`/`PUSHWARDEN_POLICY_KEY`
/// as `serve` does) gives the store keys that open sealed entries and the layout `replay` places
/// entries by; without it, unsealed entries are handled and placed by the running sidecars' layout.
/// Exit 1 when any entry could not be handled (each is named by id), 2 on usage errors.
func outboxCommand(_ arguments: ArraySlice<String>) async -> Never {
    let shape = "usage: pushwarden outbox list|replay|drop --redis URL [--policy FILE] [--policy-key PUBLIC.pem] [--app APP] [--upstream NAME]"
    guard let verb = arguments.first, let action = OutboxCommand.Action(rawValue: verb) else { fail(shape) }
    let flags = parseFlags(arguments.dropFirst(), allowed: ["redis", "policy", "policy-key", "app", "upstream"])
    guard let url = flags["redis"] ?? environment("PUSHWARDEN_REDIS_URL") else { fail("outbox needs --redis URL (or PUSHWARDEN_REDIS_URL)") }
    var sealer = StoreSealer.none
    var digests = KeyDigest.unkeyed
    var policy: Policy?
    if let policyPath = flags["policy"] ?? environment("PUSHWARDEN_POLICY") {
        var policyKey: Ed25519PublicKey?
        if let keyPath = flags["policy-key"] ?? environment("PUSHWARDEN_POLICY_KEY") {
            switch PolicyFile.publicKey(path: keyPath) {
            case .success(let key): policyKey = key
            case .failure(let error): fail(error.description, code: 1)
            }
        }
        let loaded: Policy
        switch PolicyFile.load(path: policyPath, key: policyKey) {
        case .success(let source): loaded = source.policy
        case .failure(let diagnostics):
            for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
            exit(1)
        }
        do {
            sealer = try StoreSealer.make(for: loaded, secrets: SecretResolver())
            digests = try KeyDigest.make(for: loaded, secrets: SecretResolver())
        } catch {
            fail(error.description, code: 1)
        }
        policy = loaded
    }
    do {
        let report = try await OutboxCommand.run(action, redisURL: url, app: flags["app"], upstream: flags["upstream"], policy: policy,
                                                 sealer: sealer, digests: digests) { print($0) }
        exit(report.failed > 0 ? 1 : 0)
    } catch {
        fail(error.description, code: 1)
    }
}

/// `audit verify`: checks apps' evidence trails against the public half of `audit.signing_key`;
/// exit 0 when every trail is intact, 1 on a gap or an edit.
func auditCommand(_ arguments: ArraySlice<String>) async {
    let shape = "usage: pushwarden audit verify --redis URL --key PUBLIC.pem [--key OLDER.pem]... [--app APP]..."
    guard arguments.first == "verify" else { fail(shape) }
    var apps: [String] = []
    var keyPaths: [String] = []
    var rest: [String] = []
    var index = arguments.index(after: arguments.startIndex)
    while index < arguments.endIndex {
        let flag = arguments[index]
        if flag == "--app" || flag == "--key", arguments.index(after: index) < arguments.endIndex {
            let value = arguments[arguments.index(after: index)]
            if flag == "--app" { apps.append(value) } else { keyPaths.append(value) }
            index = arguments.index(index, offsetBy: 2)
        } else {
            rest.append(arguments[index])
            index = arguments.index(after: index)
        }
    }
    let flags = parseFlags(rest[...], allowed: ["redis"])
    guard let url = flags["redis"] ?? environment("PUSHWARDEN_REDIS_URL") else { fail("audit verify needs --redis URL") }
    guard !keyPaths.isEmpty else { fail(shape) }
    var pems: [[UInt8]] = []
    for path in keyPaths {
        guard let pem = readWholeFile(path) else { fail("cannot read \(path)", code: 1) }
        pems.append(pem)
    }
    do {
        let intact = try await AuditVerification.run(redisURL: url, publicKeyPEMs: pems, apps: apps) { print($0) }
        exit(intact ? 0 : 1)
    } catch {
        fail(error.description, code: 1)
    }
}

switch arguments.first {
case "serve": await serve(arguments.dropFirst())
case "policy": policyCommand(arguments.dropFirst())
case "dev-token": devToken(arguments.dropFirst())
case "healthcheck": await healthcheck(arguments.dropFirst())
case "outbox": await outboxCommand(arguments.dropFirst())
case "audit": await auditCommand(arguments.dropFirst())
case "-h", "--help", "help": print(usage); exit(0)
default: fail(usage)
}
