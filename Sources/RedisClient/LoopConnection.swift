import Loops
import PWCore
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// What a ``RedisClient`` shares with its loop connections: the configuration and whether the
/// client was closed.
///
/// It is also the key of those connections in their loops' attachment tables. Each connection
/// retains it, so its address cannot be reused while a loop still holds a connection keyed by
/// it; the client's own address could be, once the client is freed, and a new client would then
/// find the old client's connection. Thread-safety: immutable but for an atomic flag.
final class LoopClientState: Sendable {
    let configuration: RedisConfiguration
    /// Where the loops connect, resolved off the loops.
    let resolver: HostResolver
    /// The slot map, for a cluster client; nil for a single Redis.
    let topology: ClusterTopology?
    private let closed = Atomic<Bool>(false)

    init(configuration: RedisConfiguration, lookUp: @escaping HostResolver.LookUp = HostResolver.resolve) {
        self.configuration = configuration
        resolver = HostResolver(host: configuration.host, lookUp: lookUp)
        topology = configuration.isCluster ? ClusterTopology(configuration: configuration) : nil
    }

    var isClosed: Bool { closed.load(ordering: .relaxed) }

    func close() {
        closed.store(true, ordering: .relaxed)
        topology?.close()
    }
}

extension RedisClient {
    /// Sends one command on `loop`'s own connection to this client's Redis and calls
    /// `completion` with the reply on the loop's thread, with no thread hop and no task.
    ///
    /// Each loop gets one connection per client, made on first use and kept until the loop stops.
    /// All commands a turn sends leave in one write when the turn ends; replies complete in the
    /// order the commands were sent. Failures follow ``RedisConfiguration``: a connect or AUTH/SELECT
    /// failure and a command timeout fail the connection's pending commands, then commands are
    /// refused with `.unavailable` for `reconnectBackoffMillis`; EOF or a reset fails the commands in
    /// flight with `.unavailable` and the next command reconnects at once.
    ///
    /// - Parameters:
    ///   - arguments: the command and its binary-safe arguments.
    ///   - loop: the loop whose thread calls this (a precondition).
    ///   - completion: called exactly once, on the loop's thread. It is called before `send`
    ///     returns only for a refusal, when nothing was sent: a closed client (`.closed`), a stopping
    ///     loop (`.closed`), the reconnect backoff (`.unavailable`), an empty command
    ///     (`.protocolError`). When the loop stops, commands still pending fail with `.closed`.
    ///     It may send again, on any loop connection of the loop.
    /// - Important: the completion never leaves the loop's thread, which is why it need not be
    ///   `Sendable`.
    public func send(bytes arguments: [[UInt8]], on loop: EventLoop,
                     completion: @escaping (Result<RedisReply, RedisError>) -> Void) {
        guard !arguments.isEmpty else {
            completion(.failure(RedisError(kind: .protocolError, detail: "empty command")))
            return
        }
        send(encoded: Hiredis.encode(arguments), slot: loopState.topology == nil ? nil : ClusterSlot.of(command: arguments), on: loop,
             completion: completion)
    }

    /// ``send(bytes:on:completion:)`` with UTF-8 arguments, e.g. `["GET", key]`: encoded from the
    /// strings' own storage, with no byte array per argument.
    public func send(_ arguments: [String], on loop: EventLoop,
                     completion: @escaping (Result<RedisReply, RedisError>) -> Void) {
        let views = arguments.map(\.utf8)
        guard !views.isEmpty else {
            completion(.failure(RedisError(kind: .protocolError, detail: "empty command")))
            return
        }
        send(encoded: Hiredis.encode(views), slot: loopState.topology == nil ? nil : ClusterSlot.of(command: views), on: loop,
             completion: completion)
    }

    /// Hands one encoded command to `loop`'s connection, or for a cluster to its router (which
    /// sends it to `slot`'s master). Call on `loop`.
    private func send(encoded command: [UInt8], slot: Int?, on loop: EventLoop,
                      completion: @escaping (Result<RedisReply, RedisError>) -> Void) {
        precondition(loop.isCurrent, "RedisClient.send(on:) called off the loop's thread")
        let state = loopState
        guard !state.isClosed else {
            completion(.failure(RedisError(kind: .closed, detail: "client closed")))
            return
        }
        guard !LoopConnection.isDraining else {
            completion(.failure(RedisError(kind: .closed, detail: "event loop stopped")))
            return
        }
        if let topology = state.topology {
            let router = loop.attachment(for: ObjectIdentifier(state)) { () -> ClusterRouter in
                let made = ClusterRouter(loop: loop, state: state, topology: topology)
                loop.add(made)
                return made
            }
            router.send(encoded: command, slot: slot, completion: completion)
            return
        }
        let connection = loop.attachment(for: ObjectIdentifier(state)) { () -> LoopConnection in
            let made = LoopConnection(loop: loop, state: state)
            loop.add(made)
            return made
        }
        connection.send(encoded: command, completion: completion)
    }

    /// Sends one command where the caller says: over `loop`'s own connection (as
    /// ``send(bytes:on:completion:)``, started on the loop's thread, right here when the task runs
    /// there), or through the client's pipelined pool when `loop` is nil, whichever thread the task
    /// runs on. The choice is the caller's: a task on a loop's thread that passes nil uses the pool.
    /// - Returns: Redis's reply; a server error (`-ERR ...`) is returned as `.error`, not thrown.
    /// - Throws: `RedisError` when no reply was obtained; `.closed` when `loop` is stopping.
    public func send(bytes arguments: [[UInt8]], on loop: EventLoop?) async throws(RedisError) -> RedisReply {
        guard let loop else { return try await send(bytes: arguments) }
        return try await reply(on: loop) { [self] completion in send(bytes: arguments, on: loop, completion: completion) }.get()
    }

    /// ``send(bytes:on:)`` with UTF-8 arguments, encoded from the strings' own storage on a loop.
    public func send(_ arguments: [String], on loop: EventLoop?) async throws(RedisError) -> RedisReply {
        guard let loop else { return try await send(arguments) }
        return try await reply(on: loop) { [self] completion in send(arguments, on: loop, completion: completion) }.get()
    }

    /// Runs `start` on `loop`'s thread (right here when the task runs there: the hop's closure is
    /// made only for a hop) and waits for the reply it completes with.
    private func reply(on loop: EventLoop,
                       _ start: @escaping @Sendable (@escaping (Result<RedisReply, RedisError>) -> Void) -> Void) async -> Result<RedisReply, RedisError> {
        await withCheckedContinuation { (continuation: CheckedContinuation<Result<RedisReply, RedisError>, Never>) in
            if loop.isCurrent {
                start { continuation.resume(returning: $0) }
            } else if !loop.execute({ start { continuation.resume(returning: $0) } }) {
                continuation.resume(returning: .failure(RedisError(kind: .closed, detail: "event loop stopped")))
            }
        }
    }
}

/// Set on a loop thread while a stopping loop's connections fail their commands (in `deinit`),
/// so a completion that sends again is refused instead of re-entering the loop's attachment
/// table while the loop tears it down. A `pthread_key_t` is a plain integer.
private let drainingKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key, nil)
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
}()

/// One client's connection to Redis on one event loop, driven by that loop's epoll set.
///
/// Commands are formatted into hiredis's output buffer as they are sent and written when the
/// turn ends, so a turn's commands share one write. The socket is always watched for reading,
/// and for writing only while a connect is in progress or the output buffer did not fit in the
/// socket. Replies complete the pending commands in FIFO order; the replies to AUTH and SELECT,
/// which go first on every new connection, are consumed here.
///
/// Completions are called only once this object's state is consistent, so one may send again.
/// Nothing a completion can do drops the connection synchronously: `send` only records failures,
/// and the turn's end acts on them.
///
/// Loop-confined: created, used and freed on its loop's thread. The loop holds it as an attachment
/// and as a participant until it stops; `deinit` (on the loop's thread as it exits) fails what is
/// still pending with `.closed`.
final class LoopConnection: LoopDescriptorHandler, LoopParticipant {
    typealias Completion = (Result<RedisReply, RedisError>) -> Void

    private struct Pending {
        let completion: Completion
        /// Monotonic nanoseconds of the first write attempt that included the command; 0 while it
        /// waits for the connect or for the turn's end.
        var sentAt: UInt64
    }

    /// The loop owns this connection and outlives it.
    private unowned let loop: EventLoop
    /// Retained so the client's attachment key stays unique while this lives.
    private let state: LoopClientState
    private let configuration: RedisConfiguration
    private let resolver: HostResolver
    private let target: String
    private let connectTimeout: UInt64
    private let commandTimeout: UInt64
    private let backoff: UInt64

    private var context: NonBlockingHiredisContext?
    /// Set while the connect is in progress.
    private var connectDeadline: UInt64?
    /// Whether the output buffer may hold bytes not yet written.
    private var outputPending = false
    private var watchingWrite = false
    /// AUTH/SELECT steps whose replies come before any command's.
    private var setupReplies: [String] = []
    private var setupReplyHead = 0
    private var pending: [Pending] = []
    private var head = 0
    /// A failure `send` met (a connect that failed at once, a command hiredis would not buffer);
    /// the turn's end fails the pending commands with it.
    private var deferredFailure: RedisError?
    /// Monotonic nanoseconds until which commands are refused; 0 when not backing off.
    private var downUntil: UInt64 = 0
    /// Which of the resolver's addresses the next connect tries: the one that worked last, or the
    /// one after those that failed.
    private var addressIndex = 0
    /// Connects that failed in a row since a connection was last up; the backoff starts only once
    /// every address has failed.
    private var failuresInRound = 0
    private var lastFailure = ""

    /// A connection to the client's own Redis (not a cluster).
    convenience init(loop: EventLoop, state: LoopClientState) {
        self.init(loop: loop, state: state, configuration: state.configuration, resolver: state.resolver)
    }

    /// A connection to one node of a cluster: `configuration` aimed at it, `resolver` for its host.
    init(loop: EventLoop, state: LoopClientState, configuration: RedisConfiguration, resolver: HostResolver) {
        self.loop = loop
        self.state = state
        self.configuration = configuration
        self.resolver = resolver
        target = Authority.format(host: configuration.host, port: configuration.port)
        connectTimeout = Self.nanos(millis: configuration.connectTimeoutMillis)
        commandTimeout = Self.nanos(millis: configuration.commandTimeoutMillis)
        backoff = Self.nanos(millis: configuration.reconnectBackoffMillis)
    }

    deinit {
        guard head < pending.count else { return }
        let abandoned = pending[head...]
        pending = []
        head = 0
        let error = RedisError(kind: .closed, detail: "event loop stopped")
        pthread_setspecific(drainingKey, UnsafeRawPointer(bitPattern: 1))
        defer { pthread_setspecific(drainingKey, nil) }
        for command in abandoned { command.completion(.failure(error)) }
    }

    static var isDraining: Bool { pthread_getspecific(drainingKey) != nil }

    private static func nanos(millis: Int) -> UInt64 { UInt64(max(0, millis)) * 1_000_000 }

    /// Queues one command, already encoded in RESP (``Hiredis/encode(_:)``), for this turn's write.
    func send(encoded command: [UInt8], completion: @escaping Completion) {
        loop.assertOnLoop("LoopConnection")
        if downUntil != 0 {
            if EventLoop.now() < downUntil {
                completion(.failure(RedisError(kind: .unavailable, detail: "\(lastFailure) (waiting to reconnect)")))
                return
            }
            downUntil = 0
        }
        if context == nil, deferredFailure == nil { open() }
        if let context, deferredFailure == nil, !context.append(encoded: command) {
            deferredFailure = RedisError(kind: .unavailable, detail: "\(target): cannot buffer command")
        }
        pending.append(Pending(completion: completion, sentAt: 0))
        outputPending = true
    }

    private func open() {
        let now = EventLoop.now()
        let addresses = resolver.addresses
        guard !addresses.isEmpty else {
            // Not yet resolved: fail this turn's commands, with no backoff, so the first ones
            // after the answer arrives connect.
            resolver.refresh()
            deferredFailure = RedisError(kind: .unavailable, detail: resolver.whyUnresolved)
            return
        }
        var attempt: Result<NonBlockingHiredisContext, RedisError>
        repeat {
            // A connect refused at once moves on to the next address at once.
            attempt = NonBlockingHiredisContext.connect(host: addresses[addressIndex % addresses.count], port: configuration.port)
        } while attempt.isFailure && connectFailed(among: addresses.count)
        switch attempt {
        case .failure(let error):
            backOff(after: error, now: now)
            deferredFailure = error
        case .success(let connection):
            context = connection
            connectDeadline = now + connectTimeout
            for step in Hiredis.setupSteps(configuration) {
                guard connection.append(step.argv) else {
                    deferredFailure = RedisError(kind: .unavailable, detail: "\(step.name) on \(target): cannot buffer command")
                    break
                }
                setupReplies.append(step.name)
            }
            outputPending = true
            watchingWrite = true
            loop.watch(connection.fd, read: true, write: true, handler: self)
        }
    }

    // MARK: LoopParticipant

    func turnEnded(now: UInt64) {
        loop.assertOnLoop("LoopConnection")
        if let error = deferredFailure {
            reset(failing: error, backOff: false, now: now)
        } else if let deadline = connectDeadline, now >= deadline {
            let another = connectFailed(among: resolver.addresses.count)
            reset(failing: RedisError(kind: .unavailable,
                                      detail: "connect \(target): no connection within \(configuration.connectTimeoutMillis) ms"),
                  backOff: !another, now: now)
        } else if head < pending.count, pending[head].sentAt != 0, now - pending[head].sentAt >= commandTimeout {
            reset(failing: RedisError(kind: .timeout,
                                      detail: "\(target): no reply within \(configuration.commandTimeoutMillis) ms"),
                  backOff: true, now: now)
        }
        // Also after a reset: its completions may have sent again.
        flush(now: now)
    }

    var nextDeadline: UInt64? {
        if deferredFailure != nil { return 0 }
        guard context != nil else { return nil }
        if let connectDeadline { return connectDeadline }
        // Sent after this connection's turnEnded (by a later participant): flush on the next turn.
        if outputPending, !watchingWrite { return 0 }
        if head < pending.count, pending[head].sentAt != 0 { return pending[head].sentAt + commandTimeout }
        return nil
    }

    // MARK: LoopDescriptorHandler

    func descriptorReady(readable: Bool, writable: Bool) {
        loop.assertOnLoop("LoopConnection")
        guard let connection = context else { return }
        if connectDeadline != nil {
            // A failed connect reports the socket writable (and a hang-up both).
            guard writable else { return }
            if let error = connection.connectOutcome() {
                let another = connectFailed(among: resolver.addresses.count)
                reset(failing: RedisError(kind: .unavailable, detail: "connect \(target) (\(connection.address)): \(error.detail)"),
                      backOff: !another, now: EventLoop.now())
                return
            }
            connectDeadline = nil
            failuresInRound = 0
            flush(now: EventLoop.now())
        } else if writable {
            flush(now: EventLoop.now())
        }
        if readable, context === connection { readReplies(from: connection) }
    }

    // MARK: I/O

    /// Writes the output buffer once the connection is up, stamping the commands it carries.
    private func flush(now: UInt64) {
        guard let connection = context, connectDeadline == nil, outputPending, deferredFailure == nil else { return }
        var index = pending.count - 1
        while index >= head, pending[index].sentAt == 0 {
            pending[index].sentAt = now
            index -= 1
        }
        switch connection.write() {
        case .failure(let error):
            reset(failing: error, backOff: false, now: now)
        case .success(let done):
            outputPending = !done
            if watchingWrite == done {
                watchingWrite = !done
                loop.watch(connection.fd, read: true, write: !done, handler: self)
            }
        }
    }

    /// Read until the socket is empty, within a bound per turn: one read a turn lets replies Redis
    /// already sent wait out the command timeout on a busy loop. Each chunk's replies go out before
    /// the next read, since hiredis compacts its buffer on every reply.
    private static let readsPerTurn = 64

    private func readReplies(from connection: NonBlockingHiredisContext) {
        for _ in 0..<Self.readsPerTurn {
            let filled: Bool
            switch connection.read() {
            case .failure(let error):
                reset(failing: error, backOff: false, now: EventLoop.now())
                return
            case .success(let value):
                filled = value
            }
            guard deliverReplies(from: connection), filled else { return }
        }
    }

    /// Completes pending commands with the replies read so far: true when every complete reply
    /// was delivered and `connection` is still this one's; false after a reset.
    private func deliverReplies(from connection: NonBlockingHiredisContext) -> Bool {
        while context === connection {
            switch connection.nextReply() {
            case .failure(let error):
                reset(failing: error, backOff: false, now: EventLoop.now())
                return false
            case .success(nil):
                return true
            case .success(let reply?):
                if setupReplyHead < setupReplies.count {
                    let step = setupReplies[setupReplyHead]
                    setupReplyHead += 1
                    if case .error(let message) = reply {
                        reset(failing: RedisError(kind: .unavailable, detail: "\(step) on \(target) refused: \(message)"),
                              backOff: true, now: EventLoop.now())
                        return false
                    }
                    continue
                }
                guard head < pending.count else {
                    reset(failing: RedisError(kind: .protocolError, detail: "\(target): a reply no command asked for"),
                          backOff: false, now: EventLoop.now())
                    return false
                }
                let command = pending[head]
                head += 1
                if head == pending.count {
                    pending.removeAll(keepingCapacity: true)
                    head = 0
                } else if head >= 1024, head * 2 >= pending.count {
                    pending.removeFirst(head)
                    head = 0
                }
                command.completion(.success(reply))
            }
        }
        return false
    }

    /// Drops the connection (closing its socket) and fails every pending command with `error`,
    /// after the state is clean, so completions may send again.
    private func reset(failing error: RedisError, backOff: Bool, now: UInt64) {
        if let context { loop.unwatch(context.fd) }
        context = nil
        connectDeadline = nil
        outputPending = false
        watchingWrite = false
        setupReplies = []
        setupReplyHead = 0
        deferredFailure = nil
        // Set before any caller learns of the failure, so its next command already sees it.
        if backOff { self.backOff(after: error, now: now) }
        let failed = pending[head...]
        pending = []
        head = 0
        for command in failed { command.completion(.failure(error)) }
    }

    /// Moves on to the next address after a failed connect. True while some address of this round
    /// is still untried; false once all have failed (the round starts again after the backoff).
    private func connectFailed(among count: Int) -> Bool {
        addressIndex = (addressIndex + 1) % max(1, count)
        failuresInRound += 1
        guard failuresInRound >= count else { return true }
        failuresInRound = 0
        return false
    }

    private func backOff(after error: RedisError, now: UInt64) {
        downUntil = now + backoff
        lastFailure = error.detail
        // The host may have moved (a failover, a rescheduled container): look it up again.
        resolver.refresh()
    }
}

private extension Result {
    var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}
