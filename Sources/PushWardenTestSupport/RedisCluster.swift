import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A real Redis Cluster on loopback for tests: three masters and three replicas, each a
/// ``RedisServer`` (so each runs under the same watchdog, and none outlives the test process
/// however it dies), made into a cluster by `redis-cli --cluster create`.
///
/// Every node gets a free client port and a free cluster-bus port (`--cluster-port`, Redis 7), and
/// keeps its `nodes.conf` in the cluster's own directory, so a node stopped by ``kill(port:)`` can
/// be started again by ``restart(port:)`` and rejoins (as a replica of whoever took its slots).
///
/// Thread-safety: all members may be used from any thread. The helpers block (they run
/// `redis-cli`); call them from tests, not from event loops.
public final class RedisCluster: Sendable {
    /// Runs `body` with the shared cluster, one test at a time across the whole test process:
    /// tests that kill a master or move slots must not overlap others that count on the map.
    ///
    /// The cluster is started on first use and stopped at exit. Before each body it is restored
    /// (a node a failed test left stopped is started again) and checked; one that cannot be made
    /// healthy is replaced by a new cluster, so one test's failure does not fail every test after it.
    public static func use<T>(_ body: (RedisCluster) async throws -> T) async throws -> T {
        await gate.enter()
        defer { gate.leave() }
        return try await body(try restoredShared())
    }

    private static let gate = AsyncGate()
    private static let shared = Mutex<RedisCluster?>(nil)
    private static let stopAtExit: Void = { atexit { RedisCluster.shared.withLock { $0 }?.stop() } }()

    private static func restoredShared() throws -> RedisCluster {
        stopAtExit
        return try shared.withLock { shared in
            if let cluster = shared {
                do {
                    try cluster.restore()
                    return cluster
                } catch {
                    print("the shared Redis Cluster could not be restored; starting a new one: \(error)")
                    cluster.stop()
                    shared = nil
                }
            }
            let cluster = try RedisCluster.start()
            shared = cluster
            return cluster
        }
    }

    /// A node as `CLUSTER NODES` describes it.
    public struct Node: Sendable, Equatable {
        public var id: String
        public var port: Int
        public var isMaster: Bool
        public var isFailed: Bool
        /// Slot ranges served (masters only).
        public var slots: [ClosedRange<Int>]
        /// The master's id (replicas only).
        public var masterID: String?
    }

    /// Client ports of the six nodes, in the order they were created (the first three were
    /// created as masters).
    public let ports: [Int]
    private let busPorts: [Int: Int]
    private let directory: URL
    private let servers: Mutex<[Int: RedisServer]>

    /// `redis+cluster://` with every node as a seed.
    public var url: String { "redis+cluster://" + ports.map { "127.0.0.1:\($0)" }.joined(separator: ",") }

    private init(ports: [Int], busPorts: [Int: Int], directory: URL, servers: [Int: RedisServer]) {
        self.ports = ports
        self.busPorts = busPorts
        self.directory = directory
        self.servers = Mutex(servers)
    }

    deinit { stop() }

    /// Starts six nodes, creates the cluster (`--cluster-replicas 1`) and waits until every node
    /// reports `cluster_state:ok` and agrees on the slot map.
    public static func start() throws -> RedisCluster {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("pushwarden-cluster-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var ports: [Int] = []
        var busPorts: [Int: Int] = [:]
        var servers: [Int: RedisServer] = [:]
        func fail(_ message: String) -> Error {
            for server in servers.values { server.stop() }
            try? FileManager.default.removeItem(at: directory)
            return RedisServer.StartError(description: message)
        }
        // The nodes' configuration files outlive a node's restart, so they are not in its own
        // directory: a watchdog of their own removes them when the test process is gone.
        let sweeper = Process()
        sweeper.executableURL = URL(fileURLWithPath: "/bin/sh")
        sweeper.arguments = ["-c", "while kill -0 \"$1\" 2>/dev/null; do sleep 0.5; done; rm -rf \"$2\"",
                             "redis-cluster-sweeper", String(getpid()), directory.path]
        // Not the test process's output: whoever waits for its end would wait for the sweeper too.
        sweeper.standardInput = FileHandle.nullDevice
        sweeper.standardOutput = FileHandle.nullDevice
        sweeper.standardError = FileHandle.nullDevice
        try? sweeper.run()
        var attempts = 0
        while ports.count < 6 {
            attempts += 1
            guard attempts < 20 else { throw fail("cannot start six cluster nodes") }
            guard let port = Loopback.unusedPort(), let bus = Loopback.unusedPort(), port != bus else { continue }
            do {
                servers[port] = try RedisServer.start(port: port, arguments: nodeArguments(port: port, bus: bus, directory: directory))
                ports.append(port)
                busPorts[port] = bus
            } catch {
                continue
            }
        }
        let cluster = RedisCluster(ports: ports, busPorts: busPorts, directory: directory, servers: servers)
        let create = ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + ["--cluster-replicas", "1", "--cluster-yes"]
        let (status, output) = cluster.cli(create)
        guard status == 0 else {
            cluster.stop()
            throw RedisServer.StartError(description: "redis-cli --cluster create failed:\n\(output)")
        }
        do {
            try cluster.waitUntilHealthy(seconds: 30)
        } catch {
            cluster.stop()
            throw error
        }
        return cluster
    }

    private static func nodeArguments(port: Int, bus: Int, directory: URL) -> [String] {
        ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--cluster-port", String(bus),
         "--cluster-config-file", directory.appendingPathComponent("nodes-\(port).conf").path]
    }

    /// Stops every node (SIGKILL, by pid, through each server's watchdog) and removes the
    /// cluster's directory. Idempotent.
    public func stop() {
        let all = servers.withLock { servers in defer { servers = [:] }; return Array(servers.values) }
        for server in all { server.stop() }
        try? FileManager.default.removeItem(at: directory)
    }

    // MARK: Looking

    /// Every node's view as one live node sees it (`CLUSTER NODES`).
    public func nodes() throws -> [Node] {
        var lastOutput = ""
        for port in livePorts {
            let (status, output) = cli(["-p", String(port), "CLUSTER", "NODES"])
            lastOutput = output
            guard status == 0, !output.hasPrefix("ERR"), !output.isEmpty else { continue }
            return Self.parseNodes(output)
        }
        throw RedisServer.StartError(description: "no node answered CLUSTER NODES: \(lastOutput)")
    }

    /// The live masters with slots, by port.
    public func masters() throws -> [Node] {
        try nodes().filter { $0.isMaster && !$0.isFailed && !$0.slots.isEmpty && livePorts.contains($0.port) }
    }

    /// The master serving `slot`.
    public func master(forSlot slot: Int) throws -> Node {
        guard let node = try masters().first(where: { $0.slots.contains { $0.contains(slot) } }) else {
            throw RedisServer.StartError(description: "no live master serves slot \(slot)")
        }
        return node
    }

    /// Ports whose server runs (not stopped by ``kill(port:)``).
    public var livePorts: [Int] { servers.withLock { servers in ports.filter { servers[$0] != nil } } }

    static func parseNodes(_ text: String) -> [Node] {
        text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count >= 8 else { return nil }
            let address = fields[1].split(separator: "@").first.map(String.init) ?? ""
            guard let port = address.split(separator: ":").last.flatMap({ Int($0) }) else { return nil }
            let flags = fields[2].split(separator: ",")
            var slots: [ClosedRange<Int>] = []
            for field in fields.dropFirst(8) where !field.hasPrefix("[") {
                let bounds = field.split(separator: "-").compactMap { Int($0) }
                if bounds.count == 2 { slots.append(bounds[0]...bounds[1]) } else if bounds.count == 1 { slots.append(bounds[0]...bounds[0]) }
            }
            return Node(id: fields[0], port: port, isMaster: flags.contains("master"),
                        isFailed: flags.contains("fail") || flags.contains("fail?"), slots: slots,
                        masterID: fields[3] == "-" ? nil : fields[3])
        }
    }

    // MARK: Acting

    /// SIGKILLs the node on `port` (by pid). Its replica is promoted once the others see it fail
    /// (`cluster-node-timeout` 2 s, then an election).
    public func kill(port: Int) {
        let server = servers.withLock { servers in servers.removeValue(forKey: port) }
        server?.stop()
    }

    /// Starts a node stopped by ``kill(port:)`` again on the same ports and `nodes.conf`; it rejoins
    /// the cluster (as a replica once its slots moved), and this returns once the cluster is healthy.
    public func restart(port: Int) throws {
        guard let bus = busPorts[port], servers.withLock({ $0[port] == nil }) else { return }
        let server = try RedisServer.start(port: port, arguments: Self.nodeArguments(port: port, bus: bus, directory: directory))
        servers.withLock { $0[port] = server }
        do {
            try waitUntilHealthy(seconds: 30)
        } catch {
            // Redis 7.0 once left a restarted master failing with one slot unassigned in its own
            // view while the five others agreed on all of them: a node with a new identity joins cleanly.
            print("node \(port) did not rejoin the cluster within 30 s; joining it as a new node")
            try rejoinAsNewNode(port: port)
            try waitUntilHealthy(seconds: 60)
        }
    }

    /// Replaces the node on `port` with a new, empty one (a new id, no `nodes.conf`) that joins as
    /// the replica of a master without one, and has every other node forget the old one.
    public func rejoinAsNewNode(port: Int) throws {
        guard let bus = busPorts[port] else { return }
        let oldID = cli(["-p", String(port), "CLUSTER", "MYID"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        kill(port: port)
        try? FileManager.default.removeItem(at: directory.appendingPathComponent("nodes-\(port).conf"))
        let known = try nodes()
        let oldIDs = Set([oldID] + known.filter { $0.port == port }.map(\.id)).filter { !$0.isEmpty && !$0.hasPrefix("ERR") }
        for other in livePorts {
            for id in oldIDs { cli(["-p", String(other), "CLUSTER", "FORGET", id]) }
        }
        let masters = try self.masters()
        let replicated = Set(try nodes().filter { !$0.isFailed && livePorts.contains($0.port) }.compactMap(\.masterID))
        guard let lonely = masters.first(where: { !replicated.contains($0.id) }) ?? masters.first else {
            throw RedisServer.StartError(description: "no master to replicate")
        }
        let server = try RedisServer.start(port: port, arguments: Self.nodeArguments(port: port, bus: bus, directory: directory))
        servers.withLock { $0[port] = server }
        let (status, output) = cli(["--cluster", "add-node", "127.0.0.1:\(port)", "127.0.0.1:\(lonely.port)",
                                    "--cluster-slave", "--cluster-master-id", lonely.id])
        guard status == 0 else { throw RedisServer.StartError(description: "add-node failed:\n\(output)") }
    }

    /// Starts again every node a test left stopped, then waits until the cluster is healthy.
    func restore() throws {
        for port in ports where !livePorts.contains(port) { try restart(port: port) }
        // The full check (`--cluster check`) takes most of a second; every node saying ok is the common case.
        if livePorts.allSatisfy({ cli(["-p", String($0), "CLUSTER", "INFO"]).output.contains("cluster_state:ok") }) { return }
        try waitUntilHealthy(seconds: 20)
    }

    /// Moves `count` slots from the master on `from` to the master on `to`, keys and all
    /// (`redis-cli --cluster reshard`: `CLUSTER SETSLOT ... MIGRATING/IMPORTING`, `MIGRATE`, then
    /// `SETSLOT ... NODE`), so clients meet `ASK` and then `MOVED` while it runs.
    public func reshard(count: Int, from: Node, to: Node) throws {
        let (status, output) = cli(["--cluster", "reshard", "127.0.0.1:\(to.port)", "--cluster-from", from.id,
                                    "--cluster-to", to.id, "--cluster-slots", String(count), "--cluster-yes",
                                    "--cluster-pipeline", "1"])
        guard status == 0 else { throw RedisServer.StartError(description: "reshard failed:\n\(output)") }
    }

    /// Waits until every live node says `cluster_state:ok`, every replica's link to its master is
    /// up (a replica that never synced cannot take over), and `redis-cli --cluster check` finds
    /// every slot covered and every node agreeing on the configuration.
    public func waitUntilHealthy(seconds: Double) throws {
        let deadline = Date().addingTimeInterval(seconds)
        var why = ""
        while Date() < deadline {
            let live = livePorts
            let states = live.map { cli(["-p", String($0), "CLUSTER", "INFO"]).output }
            let replication = live.map { cli(["-p", String($0), "INFO", "replication"]).output }
            let synced = replication.allSatisfy { !$0.contains("role:slave") || $0.contains("master_link_status:up") }
            if !synced {
                why = replication.joined(separator: "\n")
            } else if states.allSatisfy({ $0.contains("cluster_state:ok") }), let first = live.first {
                let (status, output) = cli(["--cluster", "check", "127.0.0.1:\(first)"])
                if status == 0, !output.contains("[ERR]"), !output.contains("[WARNING]") { return }
                why = output
            } else {
                why = states.joined(separator: "\n")
            }
            usleep(200_000)
        }
        throw RedisServer.StartError(description: "the cluster did not become healthy within \(seconds) s:\n\(why)")
    }

    /// Runs `redis-cli` with `arguments` and returns its status and output (stdout and stderr).
    @discardableResult
    public func cli(_ arguments: [String]) -> (status: Int32, output: String) {
        guard let executable = RedisServer.findExecutable("redis-cli") else { return (127, "redis-cli not found") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        // A file, not a pipe: FileHandle's read-to-end traps on EINTR.
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("pushwarden-cli-\(UUID().uuidString)").path
        guard FileManager.default.createFile(atPath: outputPath, contents: nil),
              let output = FileHandle(forWritingAtPath: outputPath) else { return (127, "cannot create \(outputPath)") }
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        process.standardOutput = output
        process.standardError = output
        do {
            try process.run()
        } catch {
            try? output.close()
            return (127, "cannot run redis-cli: \(error)")
        }
        process.waitUntilExit()
        try? output.close()
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        return (process.terminationStatus, text)
    }
}

/// A FIFO lock for async code: `enter` suspends (never blocks a thread) until `leave`.
final class AsyncGate: Sendable {
    private struct State {
        var busy = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    func enter() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let admitted = state.withLock { state -> Bool in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if admitted { continuation.resume() }
        }
    }

    func leave() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.busy = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
