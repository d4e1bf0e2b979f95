import Foundation
import RedisClient
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A real `redis-server` on a free loopback port, for tests.
///
/// The server runs under a `/bin/sh` watchdog that polls the test process's pid and kills redis
/// when the test process disappears, however it dies (a crash or SIGKILL included), so no server
/// outlives the test run. Each server gets its own temporary directory for its log and pid file.
///
/// Thread-safety: all members may be used from any thread.
public final class RedisServer: Sendable {
    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    /// One server per test process, started on first use.
    public static let shared: RedisServer = {
        do {
            return try RedisServer.start()
        } catch {
            fatalError("redis-server not found: run make test, which installs it (\(error))")
        }
    }()

    public let port: Int
    /// The `--requirepass` password, if the server was started with one.
    public let password: String?
    public var url: String { "redis://127.0.0.1:\(port)" }

    /// A client configuration for this server with the password filled in.
    public func configuration(database: Int = 0) -> RedisConfiguration {
        RedisConfiguration(host: "127.0.0.1", port: port, password: password, database: database)
    }

    private struct Running {
        var watchdog: Process?
        let directory: URL
    }
    private let running: Mutex<Running>

    private init(port: Int, password: String?, watchdog: Process, directory: URL) {
        self.port = port
        self.password = password
        self.running = Mutex(Running(watchdog: watchdog, directory: directory))
    }

    deinit {
        stop()
    }

    /// Starts `redis-server --port P --bind 127.0.0.1 --save "" --appendonly no --protected-mode yes`
    /// and waits (at most 5 s) until it answers on that port.
    /// - Parameters:
    ///   - port: a fixed port (to restart a stopped server in place); `nil` picks a free one.
    ///   - password: passed as `--requirepass`.
    ///   - arguments: more `redis-server` options (a cluster node's `--cluster-enabled yes ...`).
    /// - Throws: `StartError` with redis's log when redis-server is missing or does not come up.
    ///   - directory: where the server keeps its files (an append-only file, with
    ///     `arguments: ["--appendonly", "yes"]`); a new temporary one when nil. A server started
    ///     again on the directory of one stopped with `stop(keepingData: true)` finds its data.
    public static func start(port: Int? = nil, password: String? = nil, arguments extra: [String] = [],
                             directory: URL? = nil) throws -> RedisServer {
        guard let executable = findExecutable("redis-server") else {
            throw StartError(description: "redis-server not found in PATH: run make test, which installs it")
        }
        var lastError = StartError(description: "redis-server did not start")
        for _ in 0..<(port == nil ? 3 : 1) {
            let chosen = try port ?? freeLoopbackPort()
            do {
                return try launch(executable: executable, port: chosen, password: password, extra: extra, reuse: directory)
            } catch {
                lastError = error
            }
        }
        throw lastError
    }

    private static func launch(executable: String, port: Int, password: String?, extra: [String],
                               reuse: URL?) throws(StartError) -> RedisServer {
        let directory = reuse ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("pushwarden-redis-\(UUID().uuidString)", isDirectory: true)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw StartError(description: "cannot create \(directory.path): \(error)")
        }
        let logPath = directory.appendingPathComponent("redis.log").path
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)

        var arguments = [
            executable, "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--protected-mode", "yes", "--dir", directory.path,
        ]
        if let password { arguments += ["--requirepass", password] }
        arguments += extra

        // $1: pid to watch, $2: pid file, the rest: the redis command line. Processes spawned from
        // the test process inherit a signal mask that blocks SIGTERM, so redis is stopped with
        // SIGKILL (it persists nothing, so nothing is lost).
        let script = """
            parent=$1; pidfile=$2; shift 2
            "$@" &
            child=$!
            echo $child > "$pidfile"
            while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 0.1; done
            kill -KILL $child 2>/dev/null
            wait $child
            kill -0 "$parent" 2>/dev/null || rm -rf "${pidfile%/*}"
            """
        let watchdog = Process()
        watchdog.executableURL = URL(fileURLWithPath: "/bin/sh")
        watchdog.arguments = ["-c", script, "redis-watchdog", String(getpid()),
                              directory.appendingPathComponent("redis.pid").path] + arguments
        watchdog.standardInput = FileHandle.nullDevice
        let log = FileHandle(forWritingAtPath: logPath)
        watchdog.standardOutput = log
        watchdog.standardError = log
        do {
            try watchdog.run()
        } catch {
            throw StartError(description: "cannot spawn /bin/sh for redis-server: \(error)")
        }
        try? log?.close()
        let server = RedisServer(port: port, password: password, watchdog: watchdog, directory: directory)

        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            // The directory name is unique: finding it in CONFIG GET dir proves this is our redis
            // and not one another process started on the same port.
            if probe(port: port, password: password, expecting: directory.lastPathComponent) {
                return server
            }
            if !watchdog.isRunning { break }
            usleep(20_000)
        }
        let output = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        server.stop()
        throw StartError(description: "redis-server on port \(port) did not answer within 5 s; its output:\n\(output)")
    }

    /// Stops redis (SIGKILL; the watchdog then reaps it and exits) and removes its directory.
    /// Returns once the port is free again. Idempotent.
    public func stop() { stop(keepingData: false) }

    /// Where this server keeps its files.
    public var directory: URL { running.withLock { $0.directory } }

    /// `stop()`, keeping the directory (and the append-only file in it) when `keepingData`.
    public func stop(keepingData: Bool) {
        let (watchdog, directory): (Process?, URL) = running.withLock { running in
            defer { running.watchdog = nil }
            return (running.watchdog, running.directory)
        }
        guard let watchdog else { return }
        let pidFile = directory.appendingPathComponent("redis.pid")
        var redisPID: pid_t?
        let pidDeadline = Date().addingTimeInterval(1)
        while redisPID == nil, watchdog.isRunning, Date() < pidDeadline {
            let text = (try? String(contentsOf: pidFile, encoding: .utf8)) ?? ""
            redisPID = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
            if redisPID == nil { usleep(5_000) }
        }
        // Only while the watchdog runs has it not reaped redis, so the pid cannot have been reused.
        if watchdog.isRunning, let redisPID { kill(redisPID, SIGKILL) }
        let deadline = Date().addingTimeInterval(3)
        while watchdog.isRunning, Date() < deadline { usleep(5_000) }
        if watchdog.isRunning { kill(watchdog.processIdentifier, SIGKILL) }
        watchdog.waitUntilExit()
        if !keepingData { try? FileManager.default.removeItem(at: directory) }
    }

    /// Deletes every key in every database, for tests that need an empty server.
    public func flushAll() async throws {
        let client = RedisClient(configuration: configuration())
        defer { client.close() }
        let reply = try await client.send(["FLUSHALL"])
        guard reply == .status("OK") else {
            throw StartError(description: "FLUSHALL on port \(port) answered \(reply)")
        }
    }

    // MARK: - Helpers

    static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin", "/usr/sbin"]
        return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    private static func freeLoopbackPort() throws(StartError) -> Int {
        guard let port = Loopback.unusedPort() else { throw StartError(description: "cannot bind a loopback port: errno \(errno)") }
        return port
    }

    /// Sends `[AUTH password] CONFIG GET dir` over a plain socket and looks for `marker` in the answer.
    private static func probe(port: Int, password: String?, expecting marker: String) -> Bool {
        guard let fd = Loopback.connect(port: port) else { return false }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        func command(_ parts: [String]) -> String {
            "*\(parts.count)\r\n" + parts.map { "$\($0.utf8.count)\r\n\($0)\r\n" }.joined()
        }
        var request = ""
        if let password { request += command(["AUTH", password]) }
        request += command(["CONFIG", "GET", "dir"])
        let bytes = Array(request.utf8)
        guard send(fd, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { return false }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while received.count < 65536 {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count > 0 else { return false }
            received += buffer[0..<count]
            if String(decoding: received, as: UTF8.self).contains(marker) { return true }
        }
        return false
    }
}
