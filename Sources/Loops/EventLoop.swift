import PWCore
import CShims
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Something that owns a descriptor on a loop and wants to hear when it is ready.
/// Called on the loop's thread only.
public protocol LoopDescriptorHandler: AnyObject {
    /// `readable`/`writable` as epoll reported them; a hang-up or error sets both, so the owner
    /// reads or writes and learns the failure itself.
    func descriptorReady(readable: Bool, writable: Bool)
}

/// Something that works in batches: it hears once after every turn's events (to flush what the
/// turn buffered, e.g. pipelined commands) and names the next moment it must run even when no
/// descriptor is ready (a timeout). Called on the loop's thread only.
public protocol LoopParticipant: AnyObject {
    /// After each turn's ready descriptors and jobs, with the monotonic time in nanoseconds.
    func turnEnded(now: UInt64)
    /// The monotonic nanoseconds at which the participant next needs `turnEnded`, or nil.
    var nextDeadline: UInt64? { get }
}

/// One thread, one epoll set: the unit a request lives on from its first byte to its answer.
///
/// Everything registered on a loop (descriptors, participants, attachments) is touched on the
/// loop's thread only, so it needs no lock; `execute` and `stop` are the only calls other
/// threads may make. This is what makes the class `@unchecked Sendable`: the loop-confined
/// state is guarded by `precondition(isCurrent)` on every mutating entry point.
public final class EventLoop: @unchecked Sendable {
    /// What runs on the loop's thread, in the order it was posted: a closure, or a task's job
    /// (kept as it is, so resuming a task on the loop allocates nothing).
    private enum Job {
        case closure(@Sendable () -> Void)
        case task(UnownedJob)
    }

    private struct Inbox {
        var jobs: [Job] = []
        var stopping = false
    }

    public let name: String
    private let epollFD: Int32
    /// eventfd: other threads post jobs and wake the loop through it.
    private let wakeFD: Int32
    private let inbox = Mutex(Inbox())
    private let threadID = Atomic<UInt>(0)
    private let thread = Mutex<OSThread?>(nil)

    // Loop-confined.
    private var handlers: [Int32: LoopDescriptorHandler] = [:]
    private var participants: [LoopParticipant] = []
    private var attachments: [ObjectIdentifier: AnyObject] = [:]
    private var running = true

    /// The loop's epoll set and wake-up descriptor; the thread starts with `start()`.
    public init(name: String) throws(LoopError) {
        let epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else { throw LoopError(detail: "epoll_create1: \(String(cString: strerror(errno)))") }
        let wakeFD = pw_eventfd()
        guard wakeFD >= 0 else {
            close(epollFD)
            throw LoopError(detail: "eventfd: \(String(cString: strerror(errno)))")
        }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = wakeFD
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, wakeFD, &event) == 0 else {
            close(wakeFD)
            close(epollFD)
            throw LoopError(detail: "epoll_ctl: \(String(cString: strerror(errno)))")
        }
        self.name = name
        self.epollFD = epollFD
        self.wakeFD = wakeFD
    }

    deinit {
        close(wakeFD)
        close(epollFD)
    }

    /// Starts the thread, which holds a strong reference to the loop until `stop()` ends it.
    public func start() throws(LoopError) {
        switch OSThread.start({ self.run() }) {
        case .success(let started): thread.withLock { $0 = started }
        case .failure(let error): throw LoopError(detail: error.description)
        }
    }

    /// True on the loop's own thread.
    public var isCurrent: Bool { threadID.load(ordering: .relaxed) == UInt(bitPattern: Int(bitPattern: pthread_self())) }

    /// The loop whose thread this is, or nil off every loop. For checks and tests only: code
    /// that works for a loop (a request's store commands and upstream calls) is handed that loop
    /// and never asks the thread which one it is on.
    public static var current: EventLoop? {
        guard let pointer = pw_current_loop() else { return nil }
        return Unmanaged<EventLoop>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Runs `job` on the loop's thread, soon: within the current turn when called on the loop,
    /// else after a wake-up. From any thread; dropped once the loop is stopping.
    /// - Returns: false when the job was dropped.
    @discardableResult
    public func execute(_ job: @escaping @Sendable () -> Void) -> Bool {
        post(.closure(job))
    }

    private func post(_ job: Job) -> Bool {
        let onLoop = isCurrent
        let (posted, wake): (Bool, Bool) = inbox.withLock { inbox in
            guard !inbox.stopping else { return (false, false) }
            inbox.jobs.append(job)
            // A non-empty inbox already has a wake-up on its way, and the loop itself looks at
            // its inbox before it sleeps.
            return (true, inbox.jobs.count == 1 && !onLoop)
        }
        if wake { signal() }
        return posted
    }

    /// In debug builds, traps unless called on the loop's thread: the check loop-confined state
    /// makes on its entry points (as swift-nio's `NIOLoopBound` does). Nothing in release builds.
    @inlinable
    public func assertOnLoop(_ what: @autoclosure () -> String = "loop-confined state",
                             file: StaticString = #fileID, line: UInt = #line) {
        #if DEBUG
        precondition(isCurrent, "\(what()) used off its loop (\(name))", file: file, line: line)
        #endif
    }

    /// Ends the thread after its current turn (running the jobs already posted) and waits for it,
    /// unless called on the loop itself. Participants and attachments are released on the loop's
    /// thread as it exits. Idempotent.
    public func stop() {
        inbox.withLock { $0.stopping = true }
        signal()
        thread.withLock { handle in defer { handle = nil }; return handle }?.join()
    }

    // MARK: Loop-thread API

    /// Watches `fd` for reading and/or writing, replacing any earlier interest. The loop keeps
    /// `handler` alive until `unwatch`.
    public func watch(_ fd: Int32, read: Bool, write: Bool, handler: LoopDescriptorHandler) {
        precondition(isCurrent, "EventLoop.watch off its thread")
        var event = epoll_event()
        event.events = (read ? EPOLLIN.rawValue : 0) | (write ? EPOLLOUT.rawValue : 0)
        event.data.fd = fd
        if handlers.updateValue(handler, forKey: fd) == nil {
            if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0, errno == EEXIST {
                _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
            }
        } else {
            _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
        }
    }

    /// Stops watching `fd`. Call before closing it.
    public func unwatch(_ fd: Int32) {
        precondition(isCurrent, "EventLoop.unwatch off its thread")
        guard handlers.removeValue(forKey: fd) != nil else { return }
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
    }

    /// Adds a participant for the loop's lifetime.
    public func add(_ participant: LoopParticipant) {
        precondition(isCurrent, "EventLoop.add off its thread")
        participants.append(participant)
    }

    /// The loop's one instance of something keyed by `owner` (e.g. a Redis connection per client
    /// per loop), made by `make` on first use and released when the loop stops.
    public func attachment<T: AnyObject>(for owner: ObjectIdentifier, make: () -> T) -> T {
        precondition(isCurrent, "EventLoop.attachment off its thread")
        if let existing = attachments[owner] { return existing as! T }
        let made = make()
        attachments[owner] = made
        return made
    }

    // MARK: The loop

    private func run() {
        threadID.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .relaxed)
        pw_set_current_loop(Unmanaged.passUnretained(self).toOpaque())
        defer { pw_set_current_loop(nil) }
        pw_set_thread_name(name)
        // A write to a peer that hung up raises SIGPIPE; blocked here, it becomes EPIPE.
        var pipeMask = sigset_t()
        sigemptyset(&pipeMask)
        sigaddset(&pipeMask, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeMask, nil)

        let capacity: Int32 = 128
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(capacity))
        defer { events.deallocate() }
        var jobs: [Job] = []
        while running {
            let pendingJobs = inbox.withLock { !$0.jobs.isEmpty }
            let count = epoll_wait(epollFD, events, capacity, pendingJobs ? 0 : timeoutMillis())
            if count > 0 {
                for i in 0..<Int(count) {
                    let fd = events[i].data.fd
                    if fd == wakeFD {
                        drainWake()
                        continue
                    }
                    let flags = events[i].events
                    let failed = flags & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
                    handlers[fd]?.descriptorReady(readable: flags & EPOLLIN.rawValue != 0 || failed,
                                                  writable: flags & EPOLLOUT.rawValue != 0 || failed)
                }
            }
            // Jobs that jobs post (a task resumed by another's work) run in this turn too, for a
            // few rounds; what is left then waits for the next turn (which does not sleep).
            var stopping = false
            for _ in 0..<8 {
                stopping = inbox.withLock { inbox in
                    swap(&jobs, &inbox.jobs)
                    return inbox.stopping
                }
                if jobs.isEmpty { break }
                for job in jobs {
                    switch job {
                    case .closure(let body): body()
                    case .task(let task): task.runSynchronously(on: asUnownedTaskExecutor())
                    }
                }
                jobs.removeAll(keepingCapacity: true)
            }
            let now = Self.now()
            for participant in participants { participant.turnEnded(now: now) }
            if stopping { running = false }
        }
        // Swapped out before they are released: a deinit that calls back into the loop then
        // finds empty tables instead of one being torn down.
        var released = (participants, handlers, attachments)
        participants = []
        handlers = [:]
        attachments = [:]
        released = ([], [:], [:])
        _ = released
    }

    private func timeoutMillis() -> Int32 {
        var earliest: UInt64?
        for participant in participants {
            if let deadline = participant.nextDeadline, deadline < (earliest ?? .max) { earliest = deadline }
        }
        guard let earliest else { return -1 }
        let now = Self.now()
        guard earliest > now else { return 0 }
        // Rounded up: waking before the deadline would only cost another turn.
        return Int32(min(60_000, (earliest - now + 999_999) / 1_000_000))
    }

    private func signal() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    private func drainWake() {
        var value: UInt64 = 0
        _ = read(wakeFD, &value, 8)
    }

    /// CLOCK_MONOTONIC in nanoseconds (`MonotonicClock`, the one clock every deadline uses).
    @inline(__always)
    public static func now() -> UInt64 { MonotonicClock.nowNanos() }
}

public struct LoopError: Error, Sendable, CustomStringConvertible {
    public var detail: String
    public init(detail: String) { self.detail = detail }
    public var description: String { "LoopError: \(detail)" }
}

/// Tasks that prefer a loop (`Task(executorPreference: loop)`) run their jobs on its thread, so
/// that awaiting something the loop drives (its Redis connection) resumes without a thread hop.
extension EventLoop: TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        let task = UnownedJob(job)
        // A stopping loop runs no more jobs: the task goes on in the global pool rather than never
        // resuming (a shutdown awaits the outbox workers that prefer the loops).
        if !post(.task(task)) { globalConcurrentExecutor.enqueue(ExecutorJob(task)) }
    }
}
