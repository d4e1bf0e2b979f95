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
/// Thread-safety: all methods may be called concurrently from any thread or task. Task
/// cancellation does not abandon a command already queued; it completes within the timeouts.
public final class RedisClient: Sendable {
    private let connections: [PipelinedConnection]
    private let nextConnection = Atomic<UInt>(0)
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
        connections = (0..<count).map { _ in PipelinedConnection(configuration: configuration) }
        for connection in connections { connection.start() }
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

    /// `true` when Redis answered PING with PONG.
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
    }
}
