import Loops
import Synchronization

/// A pipelining Redis client for hot paths.
///
/// `configuration.connections` connections, each driven by one dedicated I/O thread; commands
/// are spread round-robin, and every thread writes all commands queued since its last batch in one
/// go before reading their replies in order. Many concurrent `send`s therefore share a few
/// round trips instead of blocking a thread each.
///
/// Connecting is lazy (on the first command). A connection that cannot connect, or whose batch
/// timed out, fails its commands with `.unavailable` at once for `reconnectBackoffMillis`;
/// commands then go to another connection if one is up. A broken connection (EOF, reset) fails
/// its in-flight commands and reconnects on the next command. Host names are resolved on the
/// pool's I/O threads by `getaddrinfo`, which the connect timeout does not bound. Loop connections
/// never resolve on their loop: see ``HostResolver``.
///
/// With a cluster configuration (`redis+cluster://`) the same calls go to a Redis Cluster: each
/// command to the master of its key's slot (see ``ClusterSlot`` for how a command names its key,
/// ``ClusterRouter`` for `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN`, ``ClusterTopology`` for the
/// slot map). The loop path keeps one connection per master per loop; the async path runs on a few
/// private event loops of the client's own (`connections` of them) instead of the blocking pool.
///
/// Thread-safety: all methods may be called concurrently from any thread or task. Task
/// cancellation does not abandon a command already queued; it completes within the timeouts.
public final class RedisClient: Sendable {
    private let connections: [PipelinedConnection]
    private let nextConnection = Atomic<UInt>(0)
    /// A cluster client's own loops, for `send` off the caller's loops; empty for a single Redis.
    private let clusterLoops: [EventLoop]
    /// Held while a job is handed to a cluster loop, so `close` cannot stop the loops between the
    /// check and the hand-over (a job posted to a stopping loop is dropped, its caller never resumed).
    private let clusterOpen = Mutex(true)
    /// Shared with the loop-local connections (``send(bytes:on:completion:)``).
    let loopState: LoopClientState

    /// Starts the I/O threads; does not block and does not connect.
    public convenience init(configuration: RedisConfiguration) {
        self.init(configuration: configuration, lookUp: HostResolver.resolve)
    }

    /// - Parameter lookUp: how loop connections' host name is looked up (off the loops); tests
    ///   pass a slow one.
    init(configuration: RedisConfiguration, lookUp: @escaping HostResolver.LookUp) {
        loopState = LoopClientState(configuration: configuration, lookUp: lookUp)
        let count = max(1, configuration.connections)
        if let topology = loopState.topology {
            connections = []
            clusterLoops = (0..<count).map { index in
                do {
                    let loop = try EventLoop(name: "pw-redis-c\(index)")
                    try loop.start()
                    return loop
                } catch {
                    preconditionFailure("cannot start a Redis Cluster loop: \(error)")
                }
            }
            topology.start()
        } else {
            clusterLoops = []
            connections = (0..<count).map { _ in PipelinedConnection(configuration: configuration) }
            for connection in connections { connection.start() }
        }
    }

    deinit {
        close()
    }

    /// Sends one command with UTF-8 arguments, e.g. `["SET", key, value, "NX", "PX", "60000"]`.
    /// - Returns: Redis's reply; a server error (`-ERR ...`) is returned as `.error`, not thrown.
    /// - Throws: `RedisError` when no reply was obtained (unavailable, timeout, protocol, closed).
    public func send(_ arguments: [String]) async throws(RedisError) -> RedisReply {
        try await send(bytes: arguments.map { Array($0.utf8) })
    }

    /// Sends one command with binary-safe arguments (values may hold NUL, CR, LF).
    /// - Returns: Redis's reply; a server error (`-ERR ...`) is returned as `.error`, not thrown.
    /// - Throws: `RedisError` when no reply was obtained (unavailable, timeout, protocol, closed).
    public func send(bytes arguments: [[UInt8]]) async throws(RedisError) -> RedisReply {
        guard !arguments.isEmpty else {
            throw RedisError(kind: .protocolError, detail: "empty command")
        }
        if !clusterLoops.isEmpty { return try await sendOnClusterLoop(arguments) }
        let connections = self.connections
        let start = nextConnection.wrappingAdd(1, ordering: .relaxed).oldValue
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<RedisReply, RedisError>, Never>) in
            let command = PendingCommand(arguments: arguments, continuation: continuation)
            var refusal = RedisError(kind: .closed, detail: "client closed")
            for offset in 0..<UInt(connections.count) {
                let connection = connections[Int((start &+ offset) % UInt(connections.count))]
                guard let error = connection.submit(command) else { return }
                refusal = error
            }
            continuation.resume(returning: .failure(refusal))
        }
        return try result.get()
    }

    private func sendOnClusterLoop(_ arguments: [[UInt8]]) async throws(RedisError) -> RedisReply {
        let loop = clusterLoops[Int(nextConnection.wrappingAdd(1, ordering: .relaxed).oldValue % UInt(clusterLoops.count))]
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<RedisReply, RedisError>, Never>) in
            let posted = clusterOpen.withLock { open -> Bool in
                guard open else { return false }
                loop.execute { [self] in
                    send(bytes: arguments, on: loop) { continuation.resume(returning: $0) }
                }
                return true
            }
            if !posted { continuation.resume(returning: .failure(RedisError(kind: .closed, detail: "client closed"))) }
        }
        return try result.get()
    }

    /// `true` when Redis answered PING with PONG (for a cluster: one of its masters did).
    public func ping() async -> Bool {
        (try? await send(["PING"])) == .status("PONG")
    }

    /// Fails queued commands with `.closed`, waits for batches in flight, joins the I/O threads
    /// and frees the hiredis contexts. Idempotent; later `send`s throw `.closed`. Loop-local
    /// connections stay until their loops stop (commands in flight there complete normally); later
    /// loop `send`s complete with `.closed`.
    public func close() {
        loopState.close()
        for connection in connections { connection.close() }
        clusterOpen.withLock { $0 = false }
        for loop in clusterLoops { loop.stop() }
    }
}
