import PWCore
import CShims
import Loops
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A command waiting for its reply. The continuation is resumed exactly once: by the I/O thread
/// with the reply or the batch's error, by `close()` with `.closed`, or by the submitter when
/// no connection accepted it.
struct PendingCommand: Sendable {
    let arguments: [[UInt8]]
    let continuation: CheckedContinuation<Result<RedisReply, RedisError>, Never>
}

/// One Redis connection driven by its own I/O thread, pipelining whatever callers queued.
///
/// Callers append to a `Mutex`-protected queue and, if the thread sleeps, wake it through a
/// self-pipe. The thread takes the whole queue, writes it in one batch, then reads the replies in
/// order. A connection that fails to connect refuses commands for `reconnectBackoffMillis` without
/// touching the network, so an unreachable Redis costs one lock per request.
///
/// Thread-safety: `submit` and `close` may be called from any thread. The hiredis context lives
/// only on the I/O thread (a local in `run`).
final class PipelinedConnection: Sendable {
    private struct State {
        var queue: [PendingCommand] = []
        var sleeping = false
        var closed = false
        /// Monotonic nanoseconds until which commands fail fast; 0 while connected or untried.
        var downUntil: UInt64 = 0
        var lastFailure = ""
    }

    /// Bounds one pipelined batch, so a burst cannot hold replies back from the first callers
    /// for long or grow hiredis's buffers without limit.
    private static let maxBatch = 4096

    private let configuration: RedisConfiguration
    private let state = Mutex(State())
    private let thread = Mutex<OSThread?>(nil)
    /// Self-pipe: the I/O thread blocks reading `wakeRead`; submitters write a byte to the
    /// non-blocking `wakeWrite` (a full pipe already means a pending wake-up).
    private let wakeRead: Int32
    private let wakeWrite: Int32

    init(configuration: RedisConfiguration) {
        self.configuration = configuration
        var fds: [Int32] = [-1, -1]
        let status = pipe(&fds)
        precondition(status == 0, "pipe failed: errno \(errno)")
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        wakeRead = fds[0]
        wakeWrite = fds[1]
    }

    deinit {
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
    }

    /// Starts the I/O thread. The thread holds a strong reference until it exits.
    func start() {
        switch OSThread.start({ self.run() }) {
        case .success(let started): thread.withLock { $0 = started }
        case .failure(let error): preconditionFailure("\(error)")
        }
    }

    /// Queues a command, or returns why this connection will not take it (closed, or down within
    /// the backoff). On error the command was not stored and its continuation is untouched.
    func submit(_ command: PendingCommand) -> RedisError? {
        let (error, wake): (RedisError?, Bool) = state.withLock { state in
            if state.closed {
                return (RedisError(kind: .closed, detail: "client closed"), false)
            }
            if state.downUntil != 0, monotonicNanos() < state.downUntil {
                return (RedisError(kind: .unavailable, detail: "\(state.lastFailure) (waiting to reconnect)"), false)
            }
            state.queue.append(command)
            if state.sleeping {
                state.sleeping = false
                return (nil, true)
            }
            return (nil, false)
        }
        if wake { signal() }
        return error
    }

    /// Fails queued commands with `.closed`, lets the batch in flight finish (bounded by the
    /// command timeout), and joins the thread. Idempotent.
    func close() {
        let abandoned: [PendingCommand] = state.withLock { state in
            state.closed = true
            defer { state.queue = [] }
            return state.queue
        }
        for command in abandoned {
            command.continuation.resume(returning: .failure(RedisError(kind: .closed, detail: "client closed")))
        }
        signal()
        thread.withLock { handle in defer { handle = nil }; return handle }?.join()
    }

    private func signal() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private func waitForSignal() {
        var drain = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while read(wakeRead, &drain, MemoryLayout.size(ofValue: drain)) < 0, errno == EINTR {}
    }

    private func run() {
        // Named so `top -H` and profilers show which thread is the Redis connection.
        pw_set_thread_name("pw-redis")
        // A write to a socket Redis has closed raises SIGPIPE; blocked here, it becomes EPIPE.
        var pipeMask = sigset_t()
        sigemptyset(&pipeMask)
        sigaddset(&pipeMask, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeMask, nil)

        var context: HiredisContext?
        var batch: [PendingCommand] = []
        while true {
            let keepRunning: Bool = state.withLock { state in
                if state.closed { return false }
                if state.queue.count <= Self.maxBatch {
                    swap(&batch, &state.queue)
                } else {
                    batch.append(contentsOf: state.queue.prefix(Self.maxBatch))
                    state.queue.removeFirst(Self.maxBatch)
                }
                if batch.isEmpty { state.sleeping = true }
                return true
            }
            guard keepRunning else { break }
            if batch.isEmpty {
                waitForSignal()
                continue
            }
            if context == nil {
                switch HiredisContext.connect(configuration) {
                case .success(let connected):
                    context = connected
                    state.withLock { $0.downUntil = 0 }
                case .failure(let error):
                    backOff(after: error)
                    fail(batch[...], with: error)
                    batch.removeAll(keepingCapacity: true)
                    continue
                }
            }
            if execute(batch, on: context!) != nil {
                context = nil  // frees the broken context; a later batch reconnects
            }
            batch.removeAll(keepingCapacity: true)
        }
        context = nil
    }

    private func backOff(after error: RedisError) {
        let backoff = UInt64(max(0, configuration.reconnectBackoffMillis)) * 1_000_000
        state.withLock {
            $0.downUntil = monotonicNanos() + backoff
            $0.lastFailure = error.detail
        }
    }

    /// Pipelines `batch` and resumes every caller. Returns the error when the connection broke;
    /// then every command without a reply has been failed with it.
    private func execute(_ batch: [PendingCommand], on context: HiredisContext) -> RedisError? {
        for command in batch where !context.append(command.arguments) {
            let error = RedisError(kind: .unavailable, detail: "cannot buffer command")
            fail(batch[...], with: error)
            return error
        }
        if let error = context.flush() {
            fail(batch[...], with: error)
            return error
        }
        for index in batch.indices {
            switch context.readReply() {
            case .success(let reply):
                batch[index].continuation.resume(returning: .success(reply))
            case .failure(let error):
                fail(batch[index...], with: error)
                return error
            }
        }
        return nil
    }

    private func fail(_ commands: ArraySlice<PendingCommand>, with error: RedisError) {
        // A hung Redis accepts connections but never answers: back off so it costs requests
        // nothing. Set before any caller learns of the timeout, so its next command already
        // sees the backoff. A merely broken connection (EOF) reconnects at once.
        if error.kind == .timeout { backOff(after: error) }
        for command in commands {
            command.continuation.resume(returning: .failure(error))
        }
    }
}

func monotonicNanos() -> UInt64 { MonotonicClock.nowNanos() }
