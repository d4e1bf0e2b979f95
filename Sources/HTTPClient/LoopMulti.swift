import Loops
import Synchronization

/// What an ``HTTPClient`` shares with its loop-local multi handles: their configuration and
/// whether the client was shut down. It also keys those handles in their loops' attachment
/// tables; each handle retains it, so its address is not reused while a loop still holds one.
/// Thread-safety: immutable but for an atomic flag.
final class LoopClientState: Sendable {
    let configuration: HTTPClientConfiguration
    private let closed = Atomic<Bool>(false)

    init(configuration: HTTPClientConfiguration) { self.configuration = configuration }

    var isClosed: Bool { closed.load(ordering: .relaxed) }
    func close() { closed.store(true, ordering: .relaxed) }
}

/// One client's curl multi handle on one event loop: the calls a task makes while it runs on
/// that loop go out on the loop's own thread, and their completion resumes the task there, with
/// no thread hop either way.
///
/// The poller's epoll set sits inside the loop's (an epoll descriptor is readable while any of
/// its own descriptors is ready); curl's deadline is the loop's deadline. Transfers added during
/// a turn start together when it ends.
///
/// Loop-confined: created, used and freed on its loop's thread. The loop holds it as an
/// attachment, a participant and a descriptor handler until it stops; freeing it then fails its
/// transfers still running with `.shutdown` and closes its connections.
final class LoopMulti: LoopDescriptorHandler, LoopParticipant {
    /// Nil when curl could not make a multi handle (out of memory): calls then go to the
    /// client's thread.
    private let driver: MultiDriver?
    /// Kept so that the state's address stays this client's while the loop holds the handle.
    private let state: LoopClientState
    /// The loop owns this handle and outlives it.
    private unowned let loop: EventLoop

    init(loop: EventLoop, state: LoopClientState) {
        driver = try? MultiDriver(configuration: state.configuration)
        self.state = state
        self.loop = loop
        guard let driver else { return }
        loop.watch(driver.multi.poller.descriptor, read: true, write: false, handler: self)
        loop.add(self)
    }

    var isUsable: Bool { driver != nil }

    func begin(_ transfer: Transfer) {
        loop.assertOnLoop("LoopMulti")
        guard let driver else { return transfer.finish(.failure(.shutdown)) }
        driver.begin(transfer)
    }

    func cancel(_ transfer: Transfer) {
        loop.assertOnLoop("LoopMulti")
        driver?.cancel(transfer)
    }

    func descriptorReady(readable: Bool, writable: Bool) {
        loop.assertOnLoop("LoopMulti")
        guard let driver else { return }
        driver.multi.poller.wait(capMillis: 0) { socket, flags in driver.socketReady(socket, flags) }
    }

    func turnEnded(now: UInt64) {
        loop.assertOnLoop("LoopMulti")
        guard let driver else { return }
        driver.settle(now: now)
        if driver.connectionsIdle(now: now) {
            // Unwatched while still open: the new handle's descriptor may get the same number.
            loop.unwatch(driver.multi.poller.descriptor)
            driver.renew()
            loop.watch(driver.multi.poller.descriptor, read: true, write: false, handler: self)
        }
    }

    var nextDeadline: UInt64? {
        guard let driver else { return nil }
        switch (driver.multi.poller.nextDeadline, driver.idleDeadline) {
        case let (curl?, idle?): return min(curl, idle)
        case let (curl, idle): return curl ?? idle
        }
    }
}
