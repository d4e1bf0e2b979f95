#if canImport(Glibc)
import Glibc
#endif
import HTTPClient
import PWCore
import PWCrypto
import PWPolicy
import PushWarden
import RedisStores
import Registration

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
    let text = flags["admin"] ?? ServeConfiguration.Variable.admin.value ?? "127.0.0.1:9090"
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

// MARK: outbox

/// `outbox list|replay|drop`: the dead-letter streams (tokens as short hashes). The policy
/// (`--policy`, else `PUSHWARDEN_POLICY`, signature checked with `--policy-key`/`PUSHWARDEN_POLICY_KEY`
/// as `serve` does) gives the store keys that open sealed entries and the layout `replay` places
/// entries by; without it, unsealed entries are handled and placed by the running sidecars' layout.
/// Exit 1 when any entry could not be handled (each is named by id), 2 on usage errors.
func outboxCommand(_ arguments: ArraySlice<String>) async -> Never {
    let shape = "usage: pushwarden outbox list|replay|drop --redis URL [--policy FILE] [--policy-key PUBLIC.pem] [--app APP] [--upstream NAME]"
    guard let verb = arguments.first, let action = OutboxCommand.Action(rawValue: verb) else { fail(shape) }
    let flags = parseFlags(arguments.dropFirst(), allowed: ["redis", "policy", "policy-key", "app", "upstream"])
    guard let url = flags["redis"] ?? ServeConfiguration.Variable.redisURL.value else { fail("outbox needs --redis URL (or PUSHWARDEN_REDIS_URL)") }
    var sealer = StoreSealer.none
    var digests = KeyDigest.unkeyed
    var policy: Policy?
    if let policyPath = flags["policy"] ?? ServeConfiguration.Variable.policy.value {
        var policyKey: Ed25519PublicKey?
        if let keyPath = flags["policy-key"] ?? ServeConfiguration.Variable.policyKey.value {
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

// MARK: audit

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
    guard let url = flags["redis"] ?? ServeConfiguration.Variable.redisURL.value else { fail("audit verify needs --redis URL") }
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
