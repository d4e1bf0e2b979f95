internal import CShims
#if canImport(Glibc)
import Glibc
#endif
import Loops
import PWCore
import Synchronization

/// The client's own thread, driving one ``MultiDriver`` for callers that are not on an event
/// loop (tests, tools, the CLI).
///
/// Other threads only ever take `shared`'s lock to hand over new transfers, cancellations or the
/// shutdown request, and wake the thread through the poller's pipe while holding that lock.
/// Everything else (the driver, curl's callbacks) lives on the thread and needs no lock.
///
/// The multi handle is driven through curl's socket interface: curl registers each transfer socket
/// with the `SocketPoller`'s epoll set and names one deadline; the thread calls
/// `curl_multi_socket_action` only for sockets that are ready and when the deadline passes.
final class ClientThread: Sendable {
    private enum Phase { case running, stopping, stopped }

    private struct Shared {
        var phase: Phase = .running
        var pending: [Transfer] = []
        var cancelled: [Transfer] = []
        /// Present while the thread runs; cleared (under the lock) before the driver is freed.
        var multi: MultiHandle?
        var thread: OSThread?
    }

    private let shared: Mutex<Shared>
    /// Handed to the thread when it starts; the thread owns it from then on.
    private let driver: Mutex<MultiDriver?>

    init(configuration: HTTPClientConfiguration) throws(HTTPClientError) {
        let driver = try MultiDriver(configuration: configuration)
        self.shared = Mutex(Shared(multi: driver.multi))
        self.driver = Mutex(driver)
    }

    /// Starts the thread, which keeps `self` alive until it returns.
    func start() throws(HTTPClientError) {
        switch OSThread.start({ self.run() }) {
        case .success(let thread):
            shared.withLock { $0.thread = thread }
        case .failure(let error):
            shared.withLock { $0.phase = .stopped; $0.multi = nil }
            throw HTTPClientError(kind: .other, detail: error.description)
        }
    }

    /// Hands `transfer` to the thread; false once shutdown has begun.
    func enqueue(_ transfer: Transfer) -> Bool {
        shared.withLock { state in
            guard state.phase == .running else { return false }
            let wasIdle = state.pending.isEmpty && state.cancelled.isEmpty
            state.pending.append(transfer)
            // A non-empty queue means a wakeup is already on its way.
            if wasIdle { state.multi?.wakeup() }
            return true
        }
    }

    func cancel(_ transfer: Transfer) {
        transfer.cancelRequested.store(true, ordering: .releasing)
        shared.withLock { state in
            guard state.phase == .running else { return }
            let wasIdle = state.pending.isEmpty && state.cancelled.isEmpty
            state.cancelled.append(transfer)
            if wasIdle { state.multi?.wakeup() }
        }
    }

    /// Fails every unfinished transfer with `.shutdown` and joins the thread. Idempotent; a
    /// concurrent second caller returns without waiting for the join.
    func shutdown() {
        let thread: OSThread? = shared.withLock { state in
            guard state.phase == .running else { return nil }
            state.phase = .stopping
            state.multi?.wakeup()
            defer { state.thread = nil }
            return state.thread
        }
        thread?.join()
    }

    // MARK: - The thread

    private func run() {
        // Named so `top -H` and profilers show which thread is the upstream client.
        pw_set_thread_name("pw-curl")
        guard let driver = driver.withLock({ d in defer { d = nil }; return d }) else { return }
        let poller = driver.multi.poller
        while true {
            let (pending, cancelled, stopping) = shared.withLock { state in
                let taken = (state.pending, state.cancelled, state.phase != .running)
                state.pending = []
                state.cancelled = []
                return taken
            }
            if stopping {
                for transfer in pending { transfer.finish(.failure(.shutdown)) }
                driver.failAll(.shutdown)
                break
            }
            for transfer in pending { driver.begin(transfer) }
            for transfer in cancelled { driver.cancel(transfer) }
            driver.settle(now: MonotonicClock.nowNanos())
            // Sleeps until a socket is ready, curl's deadline, or a wakeup from another thread.
            poller.wait(capMillis: 1000) { socket, flags in driver.socketReady(socket, flags) }
            driver.settle(now: MonotonicClock.nowNanos())
        }
        shared.withLock { state in
            state.multi = nil
            state.phase = .stopped
        }
        // `driver` is the last reference: freeing it closes the cached connections here.
    }
}
