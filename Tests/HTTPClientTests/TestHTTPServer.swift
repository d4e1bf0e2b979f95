import Foundation
import Glibc
import PushWardenTestSupport
import Synchronization

/// What the test server saw of one request.
struct RecordedRequest: Sendable {
    var method: String
    var target: String
    /// In arrival order, names as sent.
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// How the test server answers one request.
struct Reply: Sendable {
    var status: Int = 200
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    var delayMillis: Int = 0
    /// Never answer; hold the connection until the peer closes it or the server stops.
    var hang = false
    /// Send the body with chunked transfer coding (no Content-Length up front).
    var chunked = false
    /// Close the connection right after the response without saying so (no `Connection: close`),
    /// as a server dropping an idle keep-alive connection does.
    var closeAfter = false
}

/// A minimal HTTP/1.1 server on 127.0.0.1 with keep-alive, for tests only: a polling accept thread
/// and one thread per connection. It counts accepted TCP connections so tests can check reuse.
/// Anything that does not look like an HTTP request line gets the connection closed.
final class TestHTTPServer: Sendable {
    let port: UInt16
    private let listenFD: Int32
    private let handler: @Sendable (RecordedRequest) -> Reply
    private let state = Mutex(State())
    private let acceptThreadDone = Mutex(false)

    private struct State {
        var stopped = false
        var acceptedConnections = 0
        var requests: [RecordedRequest] = []
        var openConnections = 0
    }

    var acceptedConnections: Int { state.withLock { $0.acceptedConnections } }
    var requests: [RecordedRequest] { state.withLock { $0.requests } }
    /// Connections the peer has not closed yet.
    var openConnections: Int { state.withLock { $0.openConnections } }
    private var stopped: Bool { state.withLock { $0.stopped } }

    init(handler: @escaping @Sendable (RecordedRequest) -> Reply) throws {
        guard let (fd, port) = Loopback.bind(reuseAddress: true, listen: 512) else { throw POSIXError(.EADDRINUSE) }
        self.listenFD = fd
        self.port = UInt16(port)
        self.handler = handler
        let server = self
        Thread.detachNewThread { server.acceptLoop() }
    }

    /// Stops accepting, lets connection threads finish within ~100 ms, and closes the listener.
    func stop() {
        state.withLock { $0.stopped = true }
        let deadline = Date().addingTimeInterval(2)
        while !acceptThreadDone.withLock({ $0 }) || state.withLock({ $0.openConnections }) > 0, Date() < deadline {
            usleep(10_000)
        }
        close(listenFD)
    }

    private func acceptLoop() {
        defer { acceptThreadDone.withLock { $0 = true } }
        while !stopped {
            var pfd = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 50) > 0 else { continue }
            let client = accept(listenFD, nil, nil)
            guard client >= 0 else { continue }
            state.withLock {
                $0.acceptedConnections += 1
                $0.openConnections += 1
            }
            let server = self
            Thread.detachNewThread { server.serve(client) }
        }
    }

    /// Waits up to 100 ms for input; nil on timeout, empty on EOF/error.
    private func receive(_ fd: Int32) -> [UInt8]? {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, 100) > 0 else { return nil }
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? Array(chunk[..<n]) : []
    }

    private func serve(_ fd: Int32) {
        defer {
            close(fd)
            state.withLock { $0.openConnections -= 1 }
        }
        var buffer: [UInt8] = []
        while !stopped {
            // Read one request head.
            var headEnd: Int?
            while headEnd == nil {
                if let first = buffer.first, !(first >= 0x41 && first <= 0x5A) { return }
                headEnd = Self.find([13, 10, 13, 10], in: buffer)
                if headEnd != nil { break }
                if stopped { return }
                guard let data = receive(fd) else { continue }
                if data.isEmpty { return }
                buffer += data
            }
            let head = String(decoding: buffer[..<headEnd!], as: UTF8.self)
            buffer.removeFirst(headEnd! + 4)
            var lines = head.components(separatedBy: "\r\n")
            let requestLine = lines.removeFirst().split(separator: " ")
            guard requestLine.count == 3 else { return }
            var request = RecordedRequest(method: String(requestLine[0]), target: String(requestLine[1]), headers: [], body: [])
            for line in lines {
                guard let colon = line.firstIndex(of: ":") else { return }
                request.headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
            }
            let length = Int(request.header("Content-Length") ?? "0") ?? 0
            while buffer.count < length {
                if stopped { return }
                guard let data = receive(fd) else { continue }
                if data.isEmpty { return }
                buffer += data
            }
            request.body = Array(buffer[..<length])
            buffer.removeFirst(length)
            state.withLock { $0.requests.append(request) }

            let reply = handler(request)
            if reply.hang {
                while !stopped {
                    if let data = receive(fd), data.isEmpty { return }
                }
                return
            }
            if reply.delayMillis > 0 { usleep(UInt32(reply.delayMillis * 1000)) }
            var out = "HTTP/1.1 \(reply.status) Test\r\n"
            for (name, value) in reply.headers { out += "\(name): \(value)\r\n" }
            var bytes: [UInt8]
            if reply.chunked {
                out += "Transfer-Encoding: chunked\r\n\r\n"
                bytes = Array(out.utf8)
                var offset = 0
                while offset < reply.body.count {
                    let end = min(offset + 4096, reply.body.count)
                    bytes += Array((String(end - offset, radix: 16) + "\r\n").utf8) + reply.body[offset..<end] + [13, 10]
                    offset = end
                }
                bytes += Array("0\r\n\r\n".utf8)
            } else {
                out += "Content-Length: \(reply.body.count)\r\n\r\n"
                bytes = Array(out.utf8) + reply.body
            }
            var sent = 0
            while sent < bytes.count {
                let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return }
                sent += n
            }
            if reply.closeAfter {
                usleep(20_000)
                return
            }
        }
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i..<(i + needle.count)].elementsEqual(needle) {
            return i
        }
        return nil
    }
}
