import Foundation
import HTTPClient
import PWCore
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// The `pushwarden` binary as an operator runs it: the README walkthrough, end to end.
@Suite struct CommandLineTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static var binary: URL {
        // Tests run from .build/<config>/; the executable sits beside the test bundle.
        let candidates = [
            Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("pushwarden"),
            Bundle.main.bundleURL.appendingPathComponent("pushwarden"),
            packageRoot.appendingPathComponent(".build/debug/pushwarden"),
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[2]
    }

    struct Run { var status: Int32; var stdout: String; var stderr: String }

    /// Sends `signal` and waits up to `seconds` for the process to exit; one that does not is
    /// SIGKILLed (and the test fails), so a stuck child never hangs the suite.
    static func stop(_ process: Process, signal: Int32 = SIGINT, within seconds: Double = 10,
                     sourceLocation: SourceLocation = #_sourceLocation) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, signal)
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        if process.isRunning {
            Issue.record("pid \(process.processIdentifier) did not exit within \(seconds) s of signal \(signal)", sourceLocation: sourceLocation)
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
    }

    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Run {
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.currentDirectoryURL = packageRoot
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Starts `pushwarden serve` on the example policy with loopback ports 0 and `extra`
    /// arguments; returns the process, its stderr, the log so far and the bound addresses.
    static func serve(_ extra: [String], environment: [String: String],
                      policy: String = "policies/example.yaml") throws -> (Process, Pipe, String, String, String) {
        let process = Process()
        process.executableURL = binary
        process.arguments = ["serve", "--policy", policy, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"] + extra
        process.currentDirectoryURL = packageRoot
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // The first log line names the bound ports.
        var logText = ""
        let deadline = Date().addingTimeInterval(20)
        while !logText.contains("pushwarden listening"), Date() < deadline {
            let chunk = err.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            logText += String(decoding: chunk, as: UTF8.self)
        }
        guard let line = logText.split(separator: "\n").first(where: { $0.contains("pushwarden listening") }),
              let fields = (try? JSONValue.parse(String(line)))?.objectValue,
              let listen = fields["listen"]?.stringValue, let admin = fields["admin"]?.stringValue else {
            if process.isRunning { process.terminate() }
            throw RawHTTPClient.Failure(description: "serve did not start: \(logText)")
        }
        return (process, err, logText, listen, admin)
    }

    @Test func connectionLimitsFromFlagsAndEnvironment() async throws {
        let env = ["PUSHWARDEN_DEMO_SESSION_SECRET": "walkthrough-secret-0123456789abcdef0123", "PUSHWARDEN_HEAD_TIMEOUT": "1"]
        let (process, _, _, listen, _) = try Self.serve(["--connections-per-address", "2"], environment: env)
        defer { if process.isRunning { process.terminate() } }
        let port = try #require(Int(listen.split(separator: ":").last ?? ""))
        let (closedByDeadline, refused, other) = try await offPool { () throws -> (Bool?, Bool?, Int) in
            let trickling = try RawHTTPClient(port: port)
            try trickling.send("GET /healthz HTTP/1.1\r\n")
            let second = try RawHTTPClient(port: port)
            try second.send("GET /healthz HTTP/1.1\r\n")
            // Both accepted (by whichever loop) before the third arrives.
            Thread.sleep(forTimeInterval: 0.3)
            let third = try RawHTTPClient(port: port)
            let refused = third.waitForClose(milliseconds: 1000)
            let other = try RawHTTPClient(port: port, source: "127.0.0.2")
            try other.send("GET /v1/apps/demo/nowhere HTTP/1.1\r\nHost: t\r\n\r\n")
            let status = try other.readResponse().status
            var closed: Bool?
            for n in 0..<10 where closed == nil {
                try? trickling.send("X-\(n): y\r\n")
                closed = trickling.waitForClose(milliseconds: 300)
            }
            return (closed, refused, status)
        }
        #expect(refused == true, "the third connection from one address")
        #expect(other == 404)
        #expect(closedByDeadline == true, "a trickled head after PUSHWARDEN_HEAD_TIMEOUT=1")
        Self.stop(process)

        for bad in [["--connections-per-address", "-1"], ["--head-timeout", "soon"]] {
            let result = try Self.run(["serve", "--policy", "policies/example.yaml"] + bad)
            #expect(result.status == 2, "\(bad)")
            #expect(result.stderr.contains(bad[0]), "\(result.stderr)")
        }
    }

    @Test func policyCheckExitCodes() throws {
        let good = try Self.run(["policy", "check", "policies/example.yaml"])
        #expect(good.status == 0, "\(good.stdout)\(good.stderr)")
        let bad = FileManager.default.temporaryDirectory.appendingPathComponent("bad-\(UUID().uuidString).yaml")
        try "version: 1\napps:\n  demo:\n    sesion: {}\n".write(to: bad, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: bad) }
        let result = try Self.run(["policy", "check", bad.path])
        #expect(result.status == 1)
        #expect(result.stdout.contains("\(bad.path):4:5:"))
    }

    @Test func readmeWalkthroughOnTheExamplePolicy() async throws {
        let secret = "walkthrough-secret-0123456789abcdef0123"
        let env = ["PUSHWARDEN_DEMO_SESSION_SECRET": secret]
        let minted = try Self.run(["dev-token", "--policy", "policies/example.yaml", "--app", "demo", "--contact", "alice"], environment: env)
        try #require(minted.status == 0, "\(minted.stderr)")
        let token = minted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(token.split(separator: ".").count == 3)

        let (process, err, firstLog, listen, admin) = try Self.serve([], environment: env)
        defer { if process.isRunning { process.terminate() } }
        var logText = firstLog

        let client = try HTTPClient()
        defer { client.shutdown() }
        func post(_ path: String, _ body: String) async throws -> JSONObject? {
            let response = try await client.execute(.init(method: "POST", url: "http://\(listen)/v1/apps/demo\(path)",
                headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"], body: Array(body.utf8)))
            #expect(response.status == 202, "\(String(decoding: response.body, as: UTF8.self))")
            return (try? JSONValue.parse(response.body))?.objectValue
        }
        let apns = String(repeating: "ab", count: 32)
        let first = try await post("/installations", #"{"platform":"ios","push_token":"\#(apns)"}"#)
        #expect(first?["upstreams"]?.objectValue?["voyado"] == "forwarded")
        let second = try await post("/installations", #"{"platform":"ios","push_token":"\#(apns)"}"#)
        #expect(second?["upstreams"]?.objectValue?["voyado"] == "unchanged")
        let third = try await post("/installations/unregister", #"{"push_token":"\#(apns)"}"#)
        #expect(third?["upstreams"]?.objectValue?["voyado"] == "forwarded")
        let ready = try await client.execute(.init(method: "GET", url: "http://\(admin)/readyz"))
        #expect(ready.status == 200)

        Self.stop(process)  // SIGINT, like Ctrl-C; SIGTERM takes the same path
        #expect(process.terminationStatus == 0)
        logText += String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(logText.contains("dry_run: would send"))
        #expect(logText.contains("stopped"))
        #expect(!logText.contains(apns))
        #expect(!logText.contains(token))
    }

    /// `serve` on the example policy, ports the kernel picks, with its stderr drained from then on
    /// (nothing reads it, so the sidecar never blocks on a full pipe).
    static func startSidecar(environment: [String: String]) throws -> (process: Process, listen: String, admin: String) {
        let (process, err, _, listen, admin) = try serve([], environment: environment)
        err.fileHandleForReading.readabilityHandler = { _ = $0.availableData }
        return (process, listen, admin)
    }

    /// The container's HEALTHCHECK: 0 and one line when /healthz answers 200 (by flag or by
    /// PUSHWARDEN_ADMIN, a wildcard address reached on loopback), 1 and one line otherwise.
    @Test func healthcheckAgainstARunningSidecar() throws {
        let sidecar = try Self.startSidecar(environment: ["PUSHWARDEN_DEMO_SESSION_SECRET": "healthcheck-secret-0123456789abcdef"])
        defer { Self.stop(sidecar.process, signal: SIGTERM) }
        let byFlag = try Self.run(["healthcheck", "--admin", sidecar.admin])
        #expect(byFlag.status == 0, "\(byFlag.stdout)\(byFlag.stderr)")
        #expect(byFlag.stdout == "healthy: http://\(sidecar.admin)/healthz answered 200\n")
        let port = try #require(sidecar.admin.split(separator: ":").last)
        let byEnvironment = try Self.run(["healthcheck"], environment: ["PUSHWARDEN_ADMIN": "0.0.0.0:\(port)"])
        #expect(byEnvironment.status == 0, "\(byEnvironment.stdout)\(byEnvironment.stderr)")
        #expect(byEnvironment.stdout.contains("http://127.0.0.1:\(port)/healthz answered 200"))
        // The client listener is no admin listener: its /healthz is the contract's 404.
        let wrongListener = try Self.run(["healthcheck", "--admin", sidecar.listen])
        #expect(wrongListener.status == 1)
        #expect(wrongListener.stderr.contains("answered 404"), "\(wrongListener.stderr)")
    }

    @Test func healthcheckAgainstAClosedPort() throws {
        let port = try #require(Loopback.unusedPort())
        let started = Date()
        let closed = try Self.run(["healthcheck", "--admin", "127.0.0.1:\(port)"])
        #expect(closed.status == 1)
        #expect(closed.stdout.isEmpty)
        #expect(closed.stderr.hasSuffix("\n") && closed.stderr.dropLast().split(separator: "\n").count == 1, "\(closed.stderr)")
        #expect(closed.stderr.contains("unhealthy: http://127.0.0.1:\(port)/healthz: connect"), "\(closed.stderr)")
        #expect(Date().timeIntervalSince(started) < 5)
        let usage = try Self.run(["healthcheck", "--admin", "not-an-address"])
        #expect(usage.status == 1, "Docker reserves exit code 2")
        #expect(usage.stderr.contains("--admin must be HOST:PORT"))
    }
}
