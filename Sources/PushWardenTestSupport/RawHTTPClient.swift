import Foundation
import Glibc

/// A deliberately small blocking HTTP/1.1 client over a raw socket, so the tests see exactly
/// what goes over the wire (keep-alive, early answers, unread bodies). Blocking calls run on
/// their own thread (`offPool`) so they never starve Swift concurrency's cooperative pool,
/// which the server's handlers need.
public final class RawHTTPClient {
    public struct Response: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: [UInt8]

        public func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public var errnoValue: Int32 = 0

        public init(description: String, errnoValue: Int32 = 0) {
            self.description = description
            self.errnoValue = errnoValue
        }
    }

    private let fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to `host` (IPv4 or IPv6 literal) with a receive timeout (5 s by default), from
    /// `source` when given (another loopback address such as 127.0.0.2, to be a second client).
    public init(host: String = "127.0.0.1", port: Int, source: String? = nil, timeoutSeconds: Int = 5) throws {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var info: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &info) == 0, let info else {
            throw Failure(description: "bad host \(host)")
        }
        defer { freeaddrinfo(info) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket failed", errnoValue: errno) }
        if let source {
            var local = addrinfo()
            local.ai_flags = AI_NUMERICHOST
            local.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var localInfo: UnsafeMutablePointer<addrinfo>?
            guard getaddrinfo(source, "0", &local, &localInfo) == 0, let localInfo else {
                close(fd)
                throw Failure(description: "bad source \(source)")
            }
            defer { freeaddrinfo(localInfo) }
            guard bind(fd, localInfo.pointee.ai_addr, localInfo.pointee.ai_addrlen) == 0 else {
                let e = errno
                close(fd)
                throw Failure(description: "bind to \(source) failed: \(String(cString: strerror(e)))", errnoValue: e)
            }
        }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
            let e = errno
            close(fd)
            throw Failure(description: "connect failed: \(String(cString: strerror(e)))", errnoValue: e)
        }
        self.fd = fd
    }

    deinit { close(fd) }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw Failure(description: "send failed", errnoValue: errno) }
            offset += n
        }
    }

    /// Reads one response (Content-Length or chunked body, or up to EOF when neither is given).
    public func readResponse() throws -> Response {
        let headEnd = try fill { buffer in buffer.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound }
        let headText = String(decoding: buffer[..<headEnd], as: UTF8.self)
        buffer.removeFirst(headEnd)
        var lines = headText.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            throw Failure(description: "bad status line in \(headText)")
        }
        let headers = lines.map { line -> (String, String) in
            let parts = line.split(separator: ":", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : "")
        }
        var response = Response(status: status, headers: headers, body: [])
        if status == 204 || status == 304 || status < 200 {
            return response
        } else if let length = response.header("Content-Length").flatMap(Int.init) {
            _ = try fill { $0.count >= length ? length : nil }
            response.body = Array(buffer.prefix(length))
            buffer.removeFirst(length)
        } else if response.header("Transfer-Encoding")?.lowercased() == "chunked" {
            while true {
                let lineEnd = try fill { $0.firstRange(of: Array("\r\n".utf8))?.upperBound }
                let size = Int(String(decoding: buffer[..<(lineEnd - 2)], as: UTF8.self), radix: 16) ?? 0
                buffer.removeFirst(lineEnd)
                _ = try fill { $0.count >= size + 2 ? size + 2 : nil }
                response.body += buffer.prefix(size)
                buffer.removeFirst(size + 2)
                if size == 0 { break }
            }
        } else {
            while try readMore() {}
            response.body = buffer
            buffer = []
        }
        return response
    }

    /// True when the server closed the connection (EOF) within the receive timeout.
    public func isClosedByServer() -> Bool {
        do {
            while try readMore() {}
            return true
        } catch {
            return false
        }
    }

    /// Waits up to `milliseconds` for the server to do something: true when it closed the
    /// connection, false when it sent bytes (kept for `readResponse`), nil when it did neither.
    public func waitForClose(milliseconds: Int32) -> Bool? {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, milliseconds) > 0 else { return nil }
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if n > 0 {
            buffer += chunk.prefix(n)
            return false
        }
        if n == 0 || errno == ECONNRESET { return true }
        return nil
    }

    private func fill(until complete: ([UInt8]) -> Int?) throws -> Int {
        while true {
            if let index = complete(buffer) { return index }
            guard try readMore() else { throw Failure(description: "connection closed early") }
        }
    }

    /// Reads what is available; false on EOF (or a reset, which the tests treat the same).
    private func readMore() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n > 0 {
            buffer += chunk.prefix(n)
            return true
        }
        if n == 0 || errno == ECONNRESET { return false }
        throw Failure(description: "recv failed: \(String(cString: strerror(errno)))", errnoValue: errno)
    }
}

/// Runs a blocking closure on a fresh thread.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}

/// One request on a fresh connection.
public func fetch(_ request: String, host: String = "127.0.0.1", port: Int, source: String? = nil) async throws -> RawHTTPClient.Response {
    try await offPool {
        let client = try RawHTTPClient(host: host, port: port, source: source)
        try client.send(request)
        return try client.readResponse()
    }
}
