import Loops

/// One cluster client's commands on one event loop: each goes to the master that serves its
/// key's slot, over this loop's own pipelined connection to that master (one per master per
/// loop, made on first use), and follows the cluster's answers:
///
/// - `MOVED slot host:port`: the slot has a new owner. This loop's map is patched at once, a
///   refresh of the whole map is asked for, and the command is sent again to the new owner.
/// - `ASK slot host:port`: the slot is being migrated and this key has moved already. `ASKING`
///   then the command go to that node, back to back on its connection; the map is unchanged.
/// - `TRYAGAIN` (a multi-key command while its keys are split by a migration) and `CLUSTERDOWN`
///   (a failover in progress): sent again after a short backoff (5 ms, doubling, at most 50 ms)
///   while the command's deadline (`commandTimeoutMillis` after it was first sent) allows; then the
///   error reply is returned.
/// - A failed connection or a timeout fails the command (it may have run) and asks for a refresh:
///   after a failover the map soon names the promoted replica.
///
/// At most five redirections per command, so two nodes that disagree cannot bounce it forever.
///
/// Loop-confined: created, used and freed on its loop's thread, as the loop's attachment for its
/// client and as a participant (which fires the backoff retries). Completions run on the loop's
/// thread; a completion called from a connection's teardown, after this router is gone, is
/// handed the connection's own failure.
final class ClusterRouter: LoopParticipant {
    typealias Completion = LoopConnection.Completion

    /// One command while it is routed (a class: its redirections and retries share it).
    private final class Command {
        /// The command in RESP, as it is sent (again, after a redirection).
        let encoded: [UInt8]
        let slot: Int?
        let completion: Completion
        let deadline: UInt64
        var redirects = 0
        var attempts = 0

        init(encoded: [UInt8], slot: Int?, completion: @escaping Completion, deadline: UInt64) {
            self.encoded = encoded
            self.slot = slot
            self.completion = completion
            self.deadline = deadline
        }
    }

    private struct Node {
        let endpoint: RedisEndpoint
        var connection: LoopConnection?
    }

    /// The loop owns this router and outlives it.
    private unowned let loop: EventLoop
    private let state: LoopClientState
    private let topology: ClusterTopology
    private let commandTimeout: UInt64
    private static let maxRedirects = 5
    private static let asking = Hiredis.encode([Array("ASKING".utf8)])

    /// Every node this loop has heard of (seeds first); indices never change.
    private var nodes: [Node] = []
    private var nodeIndex: [RedisEndpoint: Int] = [:]
    private let seedCount: Int
    /// Per slot, the index in `nodes` of its master, or `ClusterMap.unassigned`.
    private var slots = [UInt16](repeating: ClusterMap.unassigned, count: ClusterSlot.count)
    /// Nodes that serve slots: where keyless commands go, in turn.
    private var masters: [Int] = []
    private var nextKeyless = 0
    private var mapVersion: UInt64 = 0
    /// Commands waiting out a `TRYAGAIN`/`CLUSTERDOWN` backoff.
    private var retries: [(at: UInt64, command: Command)] = []

    init(loop: EventLoop, state: LoopClientState, topology: ClusterTopology) {
        self.loop = loop
        self.state = state
        self.topology = topology
        commandTimeout = UInt64(max(1, state.configuration.commandTimeoutMillis)) * 1_000_000
        seedCount = state.configuration.clusterSeeds.count
        for seed in state.configuration.clusterSeeds { _ = index(of: seed) }
        syncMap(force: true)
    }

    deinit {
        let waiting = retries
        retries = []
        let error = RedisError(kind: .closed, detail: "event loop stopped")
        for retry in waiting { retry.command.completion(.failure(error)) }
    }

    /// Sends one command, encoded in RESP, to the master of `slot` (nil: a keyless command).
    func send(encoded: [UInt8], slot: Int?, completion: @escaping Completion) {
        loop.assertOnLoop("ClusterRouter")
        syncMap(force: false)
        let command = Command(encoded: encoded, slot: slot, completion: completion,
                              deadline: EventLoop.now() + commandTimeout)
        dispatch(command, to: nil, asking: false)
    }

    // MARK: The map

    /// Takes the topology's map when it changed since this loop last looked (one atomic load).
    private func syncMap(force: Bool) {
        guard force || topology.version != mapVersion else { return }
        let (map, version) = topology.map
        mapVersion = version
        guard !map.nodes.isEmpty else { return }
        let local = map.nodes.map { UInt16(index(of: $0)) }
        slots = map.slots.map { $0 == ClusterMap.unassigned ? ClusterMap.unassigned : local[Int($0)] }
        masters = Array(Set(local.map(Int.init))).sorted()
    }

    private func index(of endpoint: RedisEndpoint) -> Int {
        if let known = nodeIndex[endpoint] { return known }
        nodes.append(Node(endpoint: endpoint, connection: nil))
        nodeIndex[endpoint] = nodes.count - 1
        return nodes.count - 1
    }

    /// The slot's master; for a keyless command, or a slot no map names yet, the masters (or,
    /// before any map, the seeds) in turn: a wrong guess costs a `MOVED`.
    private func target(for command: Command) -> Int {
        if let slot = command.slot, slots[slot] != ClusterMap.unassigned { return Int(slots[slot]) }
        nextKeyless &+= 1
        if !masters.isEmpty { return masters[nextKeyless % masters.count] }
        return nextKeyless % max(1, seedCount)
    }

    private func connection(to node: Int) -> LoopConnection {
        if let existing = nodes[node].connection { return existing }
        let endpoint = nodes[node].endpoint
        let made = LoopConnection(loop: loop, state: state, configuration: state.configuration.aimed(at: endpoint),
                                  resolver: HostResolver(host: endpoint.host))
        loop.add(made)
        nodes[node].connection = made
        return made
    }

    // MARK: Sending and following

    private func dispatch(_ command: Command, to chosen: Int?, asking: Bool) {
        let node = chosen ?? target(for: command)
        let connection = connection(to: node)
        if asking { connection.send(encoded: Self.asking) { _ in } }
        connection.send(encoded: command.encoded) { [weak self] result in
            guard let self else {
                command.completion(result)
                return
            }
            self.handle(result, of: command, from: node)
        }
    }

    private func handle(_ result: Result<RedisReply, RedisError>, of command: Command, from node: Int) {
        switch result {
        case .success(.error(let message)):
            guard let answer = ClusterAnswer(message) else { break }
            switch answer {
            case .moved(let slot, let endpoint):
                guard command.redirects < Self.maxRedirects else { break }
                command.redirects += 1
                let owner = index(of: endpoint.host.isEmpty ? RedisEndpoint(host: nodes[node].endpoint.host, port: endpoint.port) : endpoint)
                if slot >= 0, slot < ClusterSlot.count { slots[slot] = UInt16(owner) }
                if !masters.contains(owner) { masters.append(owner) }
                topology.requestRefresh()
                dispatch(command, to: owner, asking: false)
                return
            case .ask(let endpoint):
                guard command.redirects < Self.maxRedirects else { break }
                command.redirects += 1
                let owner = index(of: endpoint.host.isEmpty ? RedisEndpoint(host: nodes[node].endpoint.host, port: endpoint.port) : endpoint)
                dispatch(command, to: owner, asking: true)
                return
            case .tryAgain, .down:
                if case .down = answer { topology.requestRefresh() }
                let delay = UInt64(min(50, 5 << min(command.attempts, 4))) * 1_000_000
                let at = EventLoop.now() + delay
                guard at < command.deadline else { break }
                command.attempts += 1
                retries.append((at, command))
                return
            }
        case .failure(let error) where error.kind == .unavailable || error.kind == .timeout:
            // The node may have failed over: look again, soon.
            topology.requestRefresh()
        default:
            break
        }
        command.completion(result)
    }

    // MARK: LoopParticipant

    func turnEnded(now: UInt64) {
        loop.assertOnLoop("ClusterRouter")
        guard retries.contains(where: { $0.at <= now }) else { return }
        var due: [Command] = []
        retries.removeAll { retry in
            guard retry.at <= now else { return false }
            due.append(retry.command)
            return true
        }
        syncMap(force: false)
        for command in due {
            if state.isClosed {
                command.completion(.failure(RedisError(kind: .closed, detail: "client closed")))
            } else {
                dispatch(command, to: nil, asking: false)
            }
        }
    }

    var nextDeadline: UInt64? { retries.lazy.map(\.at).min() }
}

/// The error replies a cluster gives instead of an answer, read from their first word (the
/// error code) at the protocol's edge.
enum ClusterAnswer: Equatable {
    case moved(slot: Int, RedisEndpoint)
    case ask(RedisEndpoint)
    case tryAgain
    case down

    init?(_ message: String) {
        let words = message.split(separator: " ", maxSplits: 3)
        guard let code = words.first else { return nil }
        switch code {
        case "MOVED", "ASK":
            guard words.count >= 3, let slot = Int(words[1]), let endpoint = Self.endpoint(words[2]) else { return nil }
            self = code == "MOVED" ? .moved(slot: slot, endpoint) : .ask(endpoint)
        case "TRYAGAIN":
            self = .tryAgain
        case "CLUSTERDOWN":
            self = .down
        default:
            return nil
        }
    }

    /// `host:port`, split at the last colon (an IPv6 host has colons of its own); an empty host
    /// means the node that answered.
    private static func endpoint(_ text: Substring) -> RedisEndpoint? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
              (1...65_535).contains(port) else { return nil }
        var host = text[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return RedisEndpoint(host: String(host), port: port)
    }
}
