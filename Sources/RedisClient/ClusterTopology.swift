import CShims
import Loops
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Which master serves which slot, as one node told us (`CLUSTER SLOTS`). Immutable: a refresh
/// makes a new one, and the loops swap it in whole.
struct ClusterMap: Sendable, Equatable {
    /// Masters, in the order the reply named them.
    let nodes: [RedisEndpoint]
    /// Per slot, the index in `nodes` of its master; `ClusterMap.unassigned` when none serves it.
    let slots: [UInt16]

    static let unassigned = UInt16.max

    static let empty = ClusterMap(nodes: [], slots: [UInt16](repeating: unassigned, count: ClusterSlot.count))

    /// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, ...], replica...], ...]`.
    /// A master's host may be empty (a node that does not know its own address yet): the node
    /// asked, `answering`, is meant.
    static func parse(slotsReply reply: RedisReply, answering: RedisEndpoint) -> ClusterMap? {
        guard case .array(let ranges) = reply else { return nil }
        var nodes: [RedisEndpoint] = []
        var slots = [UInt16](repeating: unassigned, count: ClusterSlot.count)
        for range in ranges {
            guard case .array(let fields) = range, fields.count >= 3,
                  case .integer(let start) = fields[0], case .integer(let end) = fields[1],
                  0 <= start, start <= end, end < ClusterSlot.count,
                  case .array(let master) = fields[2], master.count >= 2,
                  case .integer(let port) = master[1], (1...65_535).contains(port)
            else { return nil }
            var host = master[0].string ?? ""
            if host.isEmpty || host == "?" { host = answering.host }
            let node = RedisEndpoint(host: host, port: Int(port))
            let index: Int
            if let known = nodes.firstIndex(of: node) {
                index = known
            } else {
                index = nodes.count
                nodes.append(node)
            }
            for slot in Int(start)...Int(end) { slots[slot] = UInt16(index) }
        }
        guard !nodes.isEmpty else { return nil }
        return ClusterMap(nodes: nodes, slots: slots)
    }
}

/// A cluster client's shared view of the cluster: the latest slot map and the thread that reads it.
///
/// The map is read from any node that answers (those of the current map first, then the seeds)
/// on a thread of its own, with a blocking connection: never on an event loop. It is read at
/// start, every `clusterRefreshMillis`, and soon after anyone calls ``requestRefresh()`` (a
/// `MOVED`, a node that failed, `CLUSTERDOWN`), at most once per `minimumInterval`. Loops check
/// ``version`` (one atomic load per command) and take the new map when it moved.
///
/// Thread-safety: all members may be used from any thread; the refresher thread holds a reference
/// until ``close()`` joins it.
final class ClusterTopology: Sendable {
    private struct Control {
        var wanted = false
        var closed = false
        /// Why the last refresh failed, for a debugger; empty after a success.
        var lastFailure = "slot map not read yet"
    }

    let configuration: RedisConfiguration
    private let current = Mutex(ClusterMap.empty)
    private let mapVersion = Atomic<UInt64>(0)
    private let control = Mutex(Control())
    private let thread = Mutex<OSThread?>(nil)
    private let wakeRead: Int32
    private let wakeWrite: Int32
    /// Refreshes asked for more often than this are merged into one.
    private let minimumIntervalMillis: Int32 = 100

    init(configuration: RedisConfiguration) {
        self.configuration = configuration
        var fds: [Int32] = [-1, -1]
        let status = pipe(&fds)
        precondition(status == 0, "pipe failed: errno \(errno)")
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        wakeRead = fds[0]
        wakeWrite = fds[1]
    }

    deinit {
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
    }

    func start() {
        switch OSThread.start({ self.run() }) {
        case .success(let started): thread.withLock { $0 = started }
        case .failure(let error): preconditionFailure("\(error)")
        }
    }

    /// Bumped whenever the map changes.
    var version: UInt64 { mapVersion.load(ordering: .acquiring) }

    /// The current map and its version.
    var map: (ClusterMap, UInt64) { current.withLock { ($0, mapVersion.load(ordering: .relaxed)) } }

    /// Asks for the map to be read again soon. Cheap; from any thread.
    func requestRefresh() {
        let wake = control.withLock { control -> Bool in
            guard !control.closed, !control.wanted else { return false }
            control.wanted = true
            return true
        }
        if wake { signal() }
    }

    func close() {
        control.withLock { $0.closed = true }
        signal()
        thread.withLock { handle in defer { handle = nil }; return handle }?.join()
    }

    private func signal() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private func run() {
        pw_set_thread_name("pw-redis-slots")
        var pipeMask = sigset_t()
        sigemptyset(&pipeMask)
        sigaddset(&pipeMask, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeMask, nil)
        while !control.withLock({ $0.closed }) {
            control.withLock { $0.wanted = false }
            refresh()
            // Merge bursts of requests, then wait for the next one or the periodic refresh.
            usleep(UInt32(minimumIntervalMillis) * 1000)
            drainWake()
            if control.withLock({ $0.wanted || $0.closed }) { continue }
            var poll = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
            _ = Glibc.poll(&poll, 1, Int32(clamping: max(100, configuration.clusterRefreshMillis)))
            drainWake()
        }
    }

    private func drainWake() {
        var drain = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while read(wakeRead, &drain, MemoryLayout.size(ofValue: drain)) > 0 {}
    }

    /// Asks the known masters, then the seeds, until one gives a map.
    private func refresh() {
        let known = current.withLock { $0.nodes }
        var candidates = known
        for seed in configuration.clusterSeeds where !candidates.contains(seed) { candidates.append(seed) }
        var why = "no node to ask"
        for node in candidates {
            switch fetch(from: node) {
            case .success(let map):
                let changed = current.withLock { current -> Bool in
                    guard current != map else { return false }
                    current = map
                    return true
                }
                if changed { mapVersion.wrappingAdd(1, ordering: .releasing) }
                control.withLock { $0.lastFailure = "" }
                return
            case .failure(let error):
                why = "CLUSTER SLOTS on \(node): \(error.detail)"
            }
        }
        control.withLock { $0.lastFailure = why }
    }

    private func fetch(from node: RedisEndpoint) -> Result<ClusterMap, RedisError> {
        let context: HiredisContext
        switch HiredisContext.connect(configuration.aimed(at: node)) {
        case .success(let connected): context = connected
        case .failure(let error): return .failure(error)
        }
        guard context.append([Array("CLUSTER".utf8), Array("SLOTS".utf8)]) else {
            return .failure(RedisError(kind: .unavailable, detail: "cannot buffer command"))
        }
        if let error = context.flush() { return .failure(error) }
        switch context.readReply() {
        case .failure(let error):
            return .failure(error)
        case .success(.error(let message)):
            return .failure(RedisError(kind: .unavailable, detail: message))
        case .success(let reply):
            guard let map = ClusterMap.parse(slotsReply: reply, answering: node) else {
                return .failure(RedisError(kind: .protocolError, detail: "unexpected CLUSTER SLOTS reply"))
            }
            return .success(map)
        }
    }
}
