import Foundation
import HTTPClient
import PWCore
import PWCrypto
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import SessionAuth
import Synchronization
import Testing

/// `pushwarden serve` as an operator runs it, with a policy it reloads (docs/operations.md):
/// SIGHUP and `--watch`, apps added and removed, a rotated secret file, an invalid file, a
/// ConfigMap-style symlink swap, signed policies; requests in flight finish on their policy.
@Suite(.serialized) struct PolicyReloadTests {
    /// A running `serve` whose stderr is collected as it comes.
    final class Served: Sendable {
        let process: Process
        let listen: String
        let admin: String
        final class Buffer: Sendable {
            let text = Mutex("")
        }
        private let log: Buffer

        init(_ arguments: [String], environment: [String: String] = [:]) throws {
            let process = Process()
            process.executableURL = CommandLineTests.binary
            process.arguments = ["serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"] + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            let err = Pipe()
            process.standardError = err
            process.standardOutput = FileHandle.nullDevice
            let log = Buffer()
            err.fileHandleForReading.readabilityHandler = { handle in
                let chunk = handle.availableData
                log.text.withLock { $0 += String(decoding: chunk, as: UTF8.self) }
            }
            try process.run()
            self.process = process
            self.log = log
            let deadline = Date().addingTimeInterval(20)
            var fields: JSONObject?
            while fields == nil, Date() < deadline, process.isRunning {
                Thread.sleep(forTimeInterval: 0.02)
                fields = log.text.withLock { $0 }.split(separator: "\n").first { $0.contains("pushwarden listening") }
                    .flatMap { try? JSONValue.parse(String($0)).objectValue }
            }
            guard let fields, let listen = fields["listen"]?.stringValue, let admin = fields["admin"]?.stringValue else {
                if process.isRunning { process.terminate() }
                throw RawHTTPClient.Failure(description: "serve did not start: \(log.text.withLock { $0 })")
            }
            self.listen = listen
            self.admin = admin
        }

        var text: String { log.text.withLock { $0 } }
        func count(_ message: String) -> Int { text.components(separatedBy: message).count - 1 }
        func hangUp() { kill(process.processIdentifier, SIGHUP) }

        /// Waits until `message` has been logged `count` times.
        func waitFor(_ message: String, count: Int, seconds: Double = 10) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while self.count(message) < count, Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            return self.count(message) >= count
        }

        func stop() {
            CommandLineTests.stop(process)
        }
    }

    final class Scratch: Sendable {
        let directory: URL
        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-reload-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
        func write(_ name: String, _ text: String) throws { try text.write(toFile: path(name), atomically: true, encoding: .utf8) }
        deinit { try? FileManager.default.removeItem(at: directory) }
    }

    /// A policy whose apps each take HS256 sessions signed with the secret in `secretFile`, and
    /// forward to `upstream` (YAML under `upstreams:`, default a dry run).
    static func policy(apps: [String], secretFile: String, upstream: String? = nil, extraSessionKey: String = "", serial: Int? = nil) -> String {
        var yaml = "version: 1\n" + (serial.map { "serial: \($0)\n" } ?? "") + "apps:\n"
        for app in apps {
            yaml += """
                  \(app):
                    session:
                      type: jwt
                      algorithms: [HS256]
                      hmac_secret: {file: \(secretFile)}
                      contact_claim: contact_id
                \(extraSessionKey)    client:
                      platforms: [ios]
                    upstreams:
                \(upstream ?? "      - name: voyado\n        provider: dry_run\n")
                """
        }
        return yaml
    }

    static func token(_ secret: String, contact: String = "alice") -> String {
        JWTMinter.mintHS256(claims: JSONObject([JSONMember("contact_id", .string(contact)),
                                                JSONMember("exp", .number(String(Int(Date().timeIntervalSince1970) + 600)))]),
                            secret: Array(secret.utf8))
    }

    static func register(_ served: Served, app: String, token: String, client: HTTPClient) async throws -> Int {
        let apns = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        let response = try await client.execute(HTTPClientRequest(
            method: "POST", url: "http://\(served.listen)/v1/apps/\(app)/installations",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
            body: Array(#"{"platform":"ios","push_token":"\#(apns)"}"#.utf8), timeoutMillis: 10_000))
        return response.status
    }

    static func metrics(_ served: Served, client: HTTPClient) async throws -> String {
        String(decoding: try await client.execute(HTTPClientRequest(method: "GET", url: "http://\(served.admin)/metrics")).body, as: UTF8.self)
    }

    static func sha256(_ path: String) throws -> String {
        SHA256.hexHash(Array(try Data(contentsOf: URL(fileURLWithPath: path))))
    }

    static let secret1 = "first-session-secret-0123456789abcdef"
    static let secret2 = "second-session-secret-0123456789abcdef"

    @Test func sighupAddsAndRemovesAppsRotatesSecretsAndKeepsTheRunningPolicyOnErrors() async throws {
        let s = try Scratch()
        try s.write("secret", Self.secret1)
        try s.write("p.yaml", Self.policy(apps: ["one"], secretFile: s.path("secret")))
        let served = try Served(["--policy", s.path("p.yaml")])
        defer { served.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        #expect(served.text.contains(#""policy_sha256":"\#(try Self.sha256(s.path("p.yaml")))""#), "logged at start")
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 202)

        // Add two, remove one.
        try s.write("p.yaml", Self.policy(apps: ["two"], secretFile: s.path("secret")))
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 1), "\(served.text)")
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 404)
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 202)
        var metrics = try await Self.metrics(served, client: client)
        #expect(metrics.contains(#"pushwarden_policy_reloads_total{result="ok"} 1"#), "\(metrics)")
        #expect(metrics.contains(#"pushwarden_policy_info{sha256="\#(try Self.sha256(s.path("p.yaml")))",serial=""} 1"#), "\(metrics)")

        // The secret file rotated: the same policy, loaded again, takes the new secret.
        try s.write("secret", Self.secret2)
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 2), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 401)
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret2), client: client) == 202)
        let goodSHA = try Self.sha256(s.path("p.yaml"))

        // An invalid file: logged with its diagnostics, counted, and the running policy stays.
        try s.write("p.yaml", Self.policy(apps: ["three"], secretFile: s.path("secret"), extraSessionKey: "      audiense: x\n"))
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 1), "\(served.text)")
        #expect(served.text.contains("\(s.path("p.yaml")):9:7: apps.three.session: unknown key 'audiense'"), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret2), client: client) == 202)
        #expect(try await Self.register(served, app: "three", token: Self.token(Self.secret2), client: client) == 404)
        // A secret that cannot be read is refused the same way.
        try s.write("p.yaml", Self.policy(apps: ["three"], secretFile: s.path("no-such-secret")))
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 2), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret2), client: client) == 202)
        metrics = try await Self.metrics(served, client: client)
        #expect(metrics.contains(#"pushwarden_policy_reloads_total{result="error"} 2"#), "\(metrics)")
        #expect(metrics.contains(#"pushwarden_policy_info{sha256="\#(goodSHA)",serial=""} 1"#), "\(metrics)")
    }

    /// A request that began before a reload removed its app finishes on the policy it began with.
    @Test func requestsInFlightFinishOnTheirPolicy() async throws {
        let s = try Scratch()
        let mock = try MockVoyado(apiKey: "vk-reload", latencyMillis: 1_500)
        try s.write("secret", Self.secret1)
        let upstream = "      - name: voyado\n        provider: voyado\n        base_path: \(mock.basePath)\n        api_key: {env: RELOAD_VOYADO_KEY}\n        timeout: 5s\n"
        try s.write("p.yaml", Self.policy(apps: ["one"], secretFile: s.path("secret"), upstream: upstream))
        let served = try Served(["--policy", s.path("p.yaml")], environment: ["RELOAD_VOYADO_KEY": "vk-reload"])
        defer { served.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        async let slow = Self.register(served, app: "one", token: Self.token(Self.secret1), client: client)
        try await Task.sleep(for: .milliseconds(300))
        try s.write("p.yaml", Self.policy(apps: ["two"], secretFile: s.path("secret")))
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 1), "\(served.text)")
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 404)
        #expect(try await slow == 202, "the request in flight kept its app")
        #expect(mock.received.count == 1)
        await mock.stop()
    }

    /// Kubernetes mounts a ConfigMap as `policy.yaml -> ..data/policy.yaml` and `..data -> ..<stamp>`,
    /// and updates it by pointing `..data` at a new directory.
    @Test func watchSeesAConfigMapSymlinkSwap() async throws {
        let s = try Scratch()
        try s.write("secret", Self.secret1)
        let fm = FileManager.default
        try fm.createDirectory(atPath: s.path("..2026_01"), withIntermediateDirectories: true)
        try s.write("..2026_01/policy.yaml", Self.policy(apps: ["one"], secretFile: s.path("secret")))
        try fm.createSymbolicLink(atPath: s.path("..data"), withDestinationPath: "..2026_01")
        try fm.createSymbolicLink(atPath: s.path("policy.yaml"), withDestinationPath: "..data/policy.yaml")
        let served = try Served(["--policy", s.path("policy.yaml"), "--watch"])
        defer { served.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 202)

        try fm.createDirectory(atPath: s.path("..2026_02"), withIntermediateDirectories: true)
        try s.write("..2026_02/policy.yaml", Self.policy(apps: ["two"], secretFile: s.path("secret")))
        try fm.createSymbolicLink(atPath: s.path("..data_tmp"), withDestinationPath: "..2026_02")
        #expect(rename(s.path("..data_tmp"), s.path("..data")) == 0)
        try fm.removeItem(atPath: s.path("..2026_01"))
        #expect(served.waitFor("\"policy reloaded\"", count: 1), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 202)
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 404)
        #expect(served.text.contains("the policy file changed"))
    }

    @Test func signedPolicyTamperedReloadIsRefusedWhileTheOldOneServes() async throws {
        let s = try Scratch()
        try JWKSCommandLineTests.Keys.openssl(["genpkey", "-algorithm", "ed25519", "-out", s.path("priv.pem")])
        try JWKSCommandLineTests.Keys.openssl(["pkey", "-in", s.path("priv.pem"), "-pubout", "-out", s.path("pub.pem")])
        try s.write("secret", Self.secret1)
        try s.write("p.yaml", Self.policy(apps: ["one"], secretFile: s.path("secret"), serial: 1))
        let signed = try CommandLineTests.run(["policy", "sign", "--key", s.path("priv.pem"), s.path("p.yaml")])
        try #require(signed.status == 0, "\(signed.stderr)")
        let served = try Served(["--policy", s.path("p.yaml"), "--policy-key", s.path("pub.pem")])
        defer { served.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 202)

        // Changed after signing: refused, and one keeps serving.
        try s.write("p.yaml", Self.policy(apps: ["one", "two"], secretFile: s.path("secret"), serial: 2))
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 1), "\(served.text)")
        #expect(served.text.contains("does not match"), "\(served.text)")
        #expect(try await Self.register(served, app: "one", token: Self.token(Self.secret1), client: client) == 202)
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 404)
        let metrics = try await Self.metrics(served, client: client)
        #expect(metrics.contains(#"pushwarden_policy_reloads_total{result="error"} 1"#), "\(metrics)")

        // Signed again: reloaded.
        #expect(try CommandLineTests.run(["policy", "sign", "--key", s.path("priv.pem"), s.path("p.yaml")]).status == 0)
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 1), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 202)
    }

    // MARK: Rollback of a signed policy

    /// Keys made by `openssl`, and `FILE` written and signed as the reviewers would.
    final class Signer: Sendable {
        let scratch: Scratch
        init(_ scratch: Scratch) throws {
            self.scratch = scratch
            try JWKSCommandLineTests.Keys.openssl(["genpkey", "-algorithm", "ed25519", "-out", scratch.path("priv.pem")])
            try JWKSCommandLineTests.Keys.openssl(["pkey", "-in", scratch.path("priv.pem"), "-pubout", "-out", scratch.path("pub.pem")])
        }
        var publicKey: String { scratch.path("pub.pem") }

        /// Writes `text` to `name` and signs it; returns the file's SHA-256.
        @discardableResult
        func write(_ name: String, _ text: String) throws -> String {
            try scratch.write(name, text)
            let signed = try CommandLineTests.run(["policy", "sign", "--key", scratch.path("priv.pem"), scratch.path(name)])
            guard signed.status == 0 else { throw RawHTTPClient.Failure(description: "policy sign: \(signed.stderr)") }
            return try PolicyReloadTests.sha256(scratch.path(name))
        }

        /// Puts `from` and its signature in place of `to` (an attacker replaying an old file).
        func replay(_ from: String, as to: String) throws {
            for suffix in ["", ".sig"] {
                let data = try Data(contentsOf: URL(fileURLWithPath: scratch.path(from + suffix)))
                try data.write(to: URL(fileURLWithPath: scratch.path(to + suffix)))
            }
        }
    }

    /// A signed policy that was once in force (serial 1) is replayed after serial 2 replaced
    /// it: its signature still verifies, but a reload refuses it, counts it and keeps serial 2;
    /// so is another file signed with the same serial. The running file itself reloads (a
    /// rotated secret), and a signed file without a serial is refused.
    @Test func aSignedPolicyCannotBeRolledBackByAReload() async throws {
        let s = try Scratch()
        let signer = try Signer(s)
        try s.write("secret", Self.secret1)
        try signer.write("v1.yaml", Self.policy(apps: ["one"], secretFile: s.path("secret"), serial: 1))
        try signer.replay("v1.yaml", as: "p.yaml")
        let served = try Served(["--policy", s.path("p.yaml"), "--policy-key", signer.publicKey])
        defer { served.stop() }
        let client = try HTTPClient()
        defer { client.shutdown() }
        #expect(served.text.contains(#""policy_serial":"1""#), "\(served.text)")

        let v2 = try signer.write("p.yaml", Self.policy(apps: ["one", "two"], secretFile: s.path("secret"), serial: 2))
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 1), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 202)
        var metrics = try await Self.metrics(served, client: client)
        #expect(metrics.contains(#"pushwarden_policy_info{sha256="\#(v2)",serial="2"} 1"#), "\(metrics)")

        // The old file and its (valid) signature put back.
        try signer.replay("v1.yaml", as: "p.yaml")
        #expect(try CommandLineTests.run(["policy", "verify", "--key", signer.publicKey, s.path("p.yaml")]).status == 0)
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 1), "\(served.text)")
        #expect(served.text.contains("serial: serial 1 is lower than the running policy's serial 2: a signed policy is never rolled back"), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret1), client: client) == 202, "serial 2 still serves")

        // Another file signed with the running serial.
        try signer.write("p.yaml", Self.policy(apps: ["one", "two", "three"], secretFile: s.path("secret"), serial: 2))
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 2), "\(served.text)")
        #expect(served.text.contains("serial: serial 2 is the running policy's, but the file differs (sha256 "), "\(served.text)")
        #expect(try await Self.register(served, app: "three", token: Self.token(Self.secret1), client: client) == 404)

        // Signed (by openssl: `policy sign` refuses it), but without a serial.
        try s.write("p.yaml", Self.policy(apps: ["one", "two", "three"], secretFile: s.path("secret")))
        try JWKSCommandLineTests.Keys.openssl(["pkeyutl", "-sign", "-inkey", s.path("priv.pem"), "-rawin", "-in", s.path("p.yaml"),
                                               "-out", s.path("p.yaml.sig")])
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 3), "\(served.text)")
        #expect(served.text.contains("serial: a signed policy needs a top-level serial"), "\(served.text)")

        // The very file in force again (its secret rotated): same serial, same bytes, reloaded.
        try signer.write("p.yaml", Self.policy(apps: ["one", "two"], secretFile: s.path("secret"), serial: 2))
        try s.write("secret", Self.secret2)
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 2), "\(served.text)")
        #expect(try await Self.register(served, app: "two", token: Self.token(Self.secret2), client: client) == 202)
        metrics = try await Self.metrics(served, client: client)
        #expect(metrics.contains(#"pushwarden_policy_reloads_total{result="error"} 3"#), "\(metrics)")
        #expect(metrics.contains(#"pushwarden_policy_info{sha256="\#(v2)",serial="2"} 1"#), "\(metrics)")
    }

    /// With the Redis store, the highest serial any replica put in force is kept in Redis: a
    /// restart (or another replica) with an older signed file does not start, nor one with the
    /// same serial and other bytes; a reload to a higher serial raises the record.
    @Test func aSignedPolicyCannotBeRolledBackByARestart() async throws {
        let redis = try RedisServer.start()
        defer { redis.stop() }
        let s = try Scratch()
        let signer = try Signer(s)
        try s.write("secret", Self.secret1)
        try signer.write("v1.yaml", Self.policy(apps: ["one"], secretFile: s.path("secret"), serial: 1))
        let v2 = try signer.write("v2.yaml", Self.policy(apps: ["one", "two"], secretFile: s.path("secret"), serial: 2))
        try signer.write("v2b.yaml", Self.policy(apps: ["one", "three"], secretFile: s.path("secret"), serial: 2))
        try signer.write("v3.yaml", Self.policy(apps: ["one", "two", "three"], secretFile: s.path("secret"), serial: 3))
        let redisClient = RedisClient(configuration: redis.configuration())
        defer { redisClient.close() }
        func recorded() async throws -> String? { try await redisClient.send(["HGET", "pw:v2:{policy}:serial", "serial"]).string }

        try signer.replay("v2.yaml", as: "p.yaml")
        let first = try Served(["--policy", s.path("p.yaml"), "--policy-key", signer.publicKey, "--redis", redis.url])
        first.stop()
        #expect(try await recorded() == "2")

        for (name, message) in [
            ("v1.yaml", "serial: serial 1 is lower than serial 2, the highest this store has seen: a signed policy is never rolled back"),
            ("v2b.yaml", "serial: serial 2 was seen by this store with other content (sha256 \(v2)"),
        ] {
            try signer.replay(name, as: "p.yaml")
            let refused = try CommandLineTests.run(["serve", "--policy", s.path("p.yaml"), "--policy-key", signer.publicKey, "--redis", redis.url,
                                                    "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            #expect(refused.status == 1, "\(name)")
            #expect(refused.stderr.contains(message), "\(name): \(refused.stderr)")
        }
        #expect(try await recorded() == "2")

        // The same file starts again; a reload to serial 3 raises the record.
        try signer.replay("v2.yaml", as: "p.yaml")
        let served = try Served(["--policy", s.path("p.yaml"), "--policy-key", signer.publicKey, "--redis", redis.url])
        defer { served.stop() }
        try signer.replay("v3.yaml", as: "p.yaml")
        served.hangUp()
        #expect(served.waitFor("\"policy reloaded\"", count: 1), "\(served.text)")
        #expect(try await recorded() == "3")
        try signer.replay("v2.yaml", as: "p.yaml")
        served.hangUp()
        #expect(served.waitFor("policy reload refused; the running policy stays", count: 1), "\(served.text)")
        #expect(try await recorded() == "3")
    }
}
