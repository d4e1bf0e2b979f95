import Foundation
import Glibc

/// `bench-tool slowloris --port P [--connections N] [--source ADDR] [--seconds S] [--interval S] [--path PATH]`
///
/// Measures what slow clients cost everyone else, on loopback only: N connections from
/// `--source` (default 127.0.0.2, default N 10,000) each send a request line and then one header
/// line every `--interval` seconds (default 20), never finishing their head; one the server
/// closes is opened again at once, as an attacker would. Meanwhile a normal client on 127.0.0.1
/// sends `GET --path` on a fresh connection every 100 ms and times the answer (5 s timeout).
/// Stops by itself after `--seconds` (default 30) and prints one line of facts per second and a
/// summary. Raises its own RLIMIT_NOFILE to the hard limit. Benchmark tooling only.
func runSlowloris() throws {
    func flag(_ name: String, _ fallback: String) -> String { value(name) ?? fallback }
    guard let port = value("--port").flatMap(Int.init) else {
        throw SlowlorisError("usage: bench-tool slowloris --port P [--connections N] [--source ADDR] [--seconds S] [--interval S] [--path PATH]")
    }
    let connections = Int(flag("--connections", "10000")) ?? 10_000
    let source = flag("--source", "127.0.0.2")
    let seconds = Double(flag("--seconds", "30")) ?? 30
    let interval = Double(flag("--interval", "20")) ?? 20
    let path = flag("--path", "/healthz")
    guard source.hasPrefix("127.") else { throw SlowlorisError("--source must be a 127.0.0.0/8 address") }

    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    guard Int(limit.rlim_cur) > connections + 64 else {
        throw SlowlorisError("RLIMIT_NOFILE \(limit.rlim_cur) is too low for \(connections) connections")
    }

    let attacker = SlowClients(port: port, source: source, target: connections, interval: interval)
    let end = Date().addingTimeInterval(seconds)
    let thread = Thread { attacker.run(until: end) }
    thread.start()

    var latencies: [Double] = []
    var failures = 0
    var nextReport = Date().addingTimeInterval(1)
    let started = Date()
    while Date() < end {
        let t0 = Date()
        if let ok = timedRequest(port: port, path: path), ok { latencies.append(Date().timeIntervalSince(t0)) } else { failures += 1 }
        if Date() >= nextReport {
            nextReport = nextReport.addingTimeInterval(1)
            let s = attacker.snapshot()
            let recent = latencies.suffix(10).map { String(format: "%.1f", $0 * 1000) }.joined(separator: ",")
            print(String(format: "t=%4.1fs slow_open=%d slow_closed_by_server=%d slow_refused_at_once=%d normal_ok=%d normal_failed=%d recent_ms=[%@]",
                         Date().timeIntervalSince(started), s.open, s.closedByServer, s.refusedAtOnce, latencies.count, failures, recent))
        }
        let pause = 0.1 - Date().timeIntervalSince(t0)
        if pause > 0 { Thread.sleep(forTimeInterval: pause) }
    }
    while !attacker.finished { Thread.sleep(forTimeInterval: 0.05) }
    let sorted = latencies.sorted()
    func pct(_ p: Double) -> String {
        sorted.isEmpty ? "-" : String(format: "%.2f", sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000)
    }
    let s = attacker.snapshot()
    print("summary: slow_target=\(connections) slow_peak_open=\(s.peakOpen) slow_closed_by_server=\(s.closedByServer) "
          + "slow_refused_at_once=\(s.refusedAtOnce) normal_requests=\(latencies.count + failures) normal_ok=\(latencies.count) "
          + "normal_failed=\(failures) p50_ms=\(pct(0.5)) p99_ms=\(pct(0.99)) max_ms=\(sorted.last.map { String(format: "%.2f", $0 * 1000) } ?? "-")")
}

struct SlowlorisError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A socket connected from `source` (nil: any local address) to 127.0.0.1:`port`, with send and
/// receive timeouts (connect gives up after the send timeout), or nil.
private func connectSocket(port: Int, source: String?, timeoutMillis: Int) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var timeout = timeval(tv_sec: timeoutMillis / 1000, tv_usec: Int((timeoutMillis % 1000) * 1000))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    func address(_ host: String, _ port: Int) -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, host, &a.sin_addr)
        return a
    }
    let length = socklen_t(MemoryLayout<sockaddr_in>.size)
    if let source {
        var local = address(source, 0)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 } }
        guard bound else { close(fd); return nil }
    }
    var remote = address("127.0.0.1", port)
    let connected = withUnsafePointer(to: &remote) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) == 0 } }
    guard connected else { close(fd); return nil }
    return fd
}

private func sendAll(_ fd: Int32, _ text: String) -> Bool {
    let bytes = Array(text.utf8)
    return bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
}

/// One request from 127.0.0.1 on a fresh connection: true when a status line came back within
/// 5 s, false or nil otherwise.
private func timedRequest(port: Int, path: String) -> Bool? {
    guard let fd = connectSocket(port: port, source: nil, timeoutMillis: 5000) else { return nil }
    defer { close(fd) }
    guard sendAll(fd, "GET \(path) HTTP/1.1\r\nHost: measure\r\nConnection: close\r\n\r\n") else { return false }
    var buffer = [UInt8](repeating: 0, count: 512)
    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
    return n > 12 && buffer.starts(with: Array("HTTP/1.1 ".utf8))
}

/// The slow side: keeps `target` connections open from `source`, each with an unfinished head.
final class SlowClients: @unchecked Sendable {
    struct Snapshot { var open = 0, peakOpen = 0, closedByServer = 0, refusedAtOnce = 0 }
    private let port: Int, source: String, target: Int, interval: Double
    private let lock = NSLock()
    private var stats = Snapshot()
    private var done = false

    init(port: Int, source: String, target: Int, interval: Double) {
        self.port = port
        self.source = source
        self.target = target
        self.interval = interval
    }

    var finished: Bool { lock.withLock { done } }
    func snapshot() -> Snapshot { lock.withLock { stats } }

    func run(until end: Date) {
        var fds: [Int32] = []
        var opened: [Date] = []
        var nextLine = Date().addingTimeInterval(interval)
        var line = 0
        while Date() < end {
            // Top up to the target (a refused connect costs its 200 ms timeout, so at most a
            // second of connecting per round).
            let roundEnd = Date().addingTimeInterval(1)
            while fds.count < target, Date() < roundEnd, Date() < end {
                guard let fd = connectSocket(port: port, source: source, timeoutMillis: 200) else { break }
                guard sendAll(fd, "GET /slow HTTP/1.1\r\nHost: slow\r\n") else { close(fd); continue }
                fds.append(fd)
                opened.append(Date())
            }
            if Date() >= nextLine {
                line += 1
                for fd in fds { _ = sendAll(fd, "X-Trickle-\(line): y\r\n") }
                nextLine = Date().addingTimeInterval(interval)
            }
            // Which did the server close?
            var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&polls, nfds_t(polls.count), 100)
            var kept: [Int32] = [], keptOpened: [Date] = []
            var closed = 0, refused = 0
            for (i, entry) in polls.enumerated() {
                if entry.revents != 0 {
                    close(entry.fd)
                    closed += 1
                    if Date().timeIntervalSince(opened[i]) < 1.5 { refused += 1 }
                } else {
                    kept.append(entry.fd)
                    keptOpened.append(opened[i])
                }
            }
            fds = kept
            opened = keptOpened
            lock.withLock {
                stats.open = fds.count
                stats.peakOpen = max(stats.peakOpen, fds.count)
                stats.closedByServer += closed - refused
                stats.refusedAtOnce += refused
            }
        }
        for fd in fds { close(fd) }
        lock.withLock { done = true }
    }
}
