import Foundation
import PushWardenTestSupport
import Testing
@testable import HTTPServer

/// What one raw exchange showed: the first answer (nil when none came), whether the server then
/// closed the connection, and every further answer it sent on the same connection.
struct Exchange: Sendable {
    var first: RawHTTPClient.Response?
    var closed: Bool
    var more: [RawHTTPClient.Response]
}

/// Sends `raw` on one connection, reads an answer and anything after it until the server
/// closes or stays silent for `timeoutSeconds`.
func exchange(_ raw: [UInt8], port: Int, timeoutSeconds: Int = 3) async throws -> Exchange {
    try await offPool {
        let client = try RawHTTPClient(port: port, timeoutSeconds: timeoutSeconds)
        try? client.send(raw)
        guard let first = try? client.readResponse() else {
            return Exchange(first: nil, closed: client.isClosedByServer(), more: [])
        }
        var more: [RawHTTPClient.Response] = []
        while let next = try? client.readResponse() { more.append(next) }
        return Exchange(first: first, closed: client.isClosedByServer(), more: more)
    }
}

func exchange(_ raw: String, port: Int, timeoutSeconds: Int = 3) async throws -> Exchange {
    try await exchange(Array(raw.utf8), port: port, timeoutSeconds: timeoutSeconds)
}

/// Request framing (RFC 9112 §6.1, §6.3) and head syntax: anything a front proxy could read
/// differently is refused with the connection closed, so a body framed another way never becomes
/// a second request.
@Suite struct RequestFramingTests {
    static let smuggled = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"

    /// The request must get `status`, `Connection: close` and a closed socket, and nothing after
    /// it (the smuggled request) may be answered or handled.
    func expectRefused(_ raw: String, status: Int, _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await withServer { server, handler in
            let seen = try await exchange(raw, port: server.port)
            #expect(seen.first?.status == status, comment, sourceLocation: sourceLocation)
            #expect(seen.first?.header("Connection")?.lowercased() == "close", comment, sourceLocation: sourceLocation)
            #expect(seen.closed, comment, sourceLocation: sourceLocation)
            #expect(seen.more.isEmpty, "answered after the refusal: \(seen.more.map(\.status)); \(comment)", sourceLocation: sourceLocation)
            #expect(handler.handledPaths.isEmpty, "\(handler.handledPaths); \(comment)", sourceLocation: sourceLocation)
        }
    }

    @Test func contentLengthWithTransferEncodingIsRefusedAndClosed() async throws {
        // CL.TE: a proxy that frames by Content-Length forwards the smuggled request as body.
        let body = "0\r\n\r\n" + Self.smuggled
        try await expectRefused(
            "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \(body.utf8.count)\r\nTransfer-Encoding: chunked\r\n\r\n" + body,
            status: 400, "CL then TE")
        try await expectRefused(
            "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n" + Self.smuggled,
            status: 400, "TE then CL")
    }

    @Test func twoDifferentContentLengthsAreRefusedAndClosed() async throws {
        let smuggledLength = Self.smuggled.utf8.count
        try await expectRefused(
            "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: \(smuggledLength)\r\n\r\n" + Self.smuggled,
            status: 400, "two lines")
        try await expectRefused(
            "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0, \(smuggledLength)\r\n\r\n" + Self.smuggled,
            status: 400, "comma list")
    }

    @Test func twoEqualContentLengthLinesAreOneLength() async throws {
        try await withServer { server, _ in
            let seen = try await exchange("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"
                                              + "GET /after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", port: server.port)
            #expect(seen.first?.status == 200 && seen.first?.text == "ok")
            #expect(seen.more.map(\.status) == [200])
        }
    }

    @Test func obsFoldIsRefused() async throws {
        try await expectRefused("GET /fold HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n" + Self.smuggled, status: 400, "space fold")
        try await expectRefused("GET /fold HTTP/1.1\r\nHost: t\r\nX-A: a\r\n\tb\r\n\r\n", status: 400, "tab fold")
    }

    @Test func bareLineFeedsAreRefused() async throws {
        try await expectRefused("GET /lf HTTP/1.1\nHost: t\n\n", status: 400, "all LF")
        try await expectRefused("GET /lf HTTP/1.1\r\nHost: t\nX-A: b\r\n\r\n", status: 400, "one LF in the headers")
        try await expectRefused("GET /lf HTTP/1.1\r\nHost: t\r\n\n" + Self.smuggled, status: 400, "LF ends the head")
    }

    @Test func whitespaceBeforeTheColonIsRefused() async throws {
        try await expectRefused("GET /sp HTTP/1.1\r\nHost: t\r\nX-A : b\r\n\r\n", status: 400, "space")
        try await expectRefused("GET /sp HTTP/1.1\r\nHost: t\r\nX-A\t: b\r\n\r\n", status: 400, "tab")
        try await expectRefused("POST /sp HTTP/1.1\r\nHost: t\r\nContent-Length : 5\r\n\r\nhello", status: 400, "Content-Length")
    }

    @Test func controlCharactersInTheHeadAreRefused() async throws {
        // MHD cuts a value at a NUL, so `0\0 5` would read as 0 here and as something else upstream.
        try await expectRefused("POST /nul HTTP/1.1\r\nHost: t\r\nContent-Length: 0\0 5\r\n\r\nhello", status: 400, "NUL in Content-Length")
        try await expectRefused("GET /nul HTTP/1.1\r\nHost: t\r\nX-A: b\0\r\n\r\n", status: 400, "NUL before CRLF")
        try await expectRefused("GET /cr HTTP/1.1\r\nHost: t\r\nX-A: b\rc\r\n\r\n", status: 400, "bare CR")
        try await expectRefused("GET /a\u{1}b HTTP/1.1\r\nHost: t\r\n\r\n", status: 400, "control in the target")
        try await expectRefused("GET /a b HTTP/1.1\r\nHost: t\r\n\r\n", status: 400, "space in the target")
    }

    @Test func hostMustBeThereOnceInHTTP11() async throws {
        try await expectRefused("GET /x HTTP/1.1\r\n\r\n", status: 400, "no Host")
        try await expectRefused("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", status: 400, "two Hosts")
        try await withServer { server, _ in
            let seen = try await exchange("GET /old HTTP/1.0\r\n\r\n", port: server.port)
            #expect(seen.first?.status == 200)
        }
    }

    @Test func unsupportedTransferEncodingsGet501AtOnce() async throws {
        for coding in ["gzip, chunked", "identity", "xchunked", "chunked, chunked", "chunked;x=1"] {
            let start = ContinuousClock.now
            try await expectRefused("POST /te HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: \(coding)\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + Self.smuggled,
                                    status: 501, "Transfer-Encoding: \(coding)")
            #expect(ContinuousClock.now - start < .seconds(2), "\(coding)")
        }
        try await expectRefused(
            "POST /te HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n", status: 501, "two lines")
        try await expectRefused(
            "POST /te HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + Self.smuggled, status: 400, "HTTP/1.0")
    }

    @Test func chunkedInAnyCaseIsStillServed() async throws {
        try await withServer { server, _ in
            let seen = try await exchange(
                "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
                    + "GET /after HTTP/1.1\r\nHost: t\r\nX-Empty:\r\nX-Tab:\tv \r\nConnection: close\r\n\r\n", port: server.port)
            #expect(seen.first?.status == 200 && seen.first?.text == "ok")
            #expect(seen.more.map(\.status) == [200])
        }
    }

    /// `chunked` followed by white space is `chunked` (RFC 9110 §5.5), but libmicrohttpd 0.9.75
    /// compares the value whole and would read such a body until the connection closes: it is
    /// refused at once instead of never answered. Every other spelling is answered too.
    @Test func everyTransferEncodingSpellingIsAnswered() async throws {
        for coding in ["chunked\t", "chunked ", "chunked \t ", "Chunked\t"] {
            let start = ContinuousClock.now
            try await expectRefused("POST /te HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: \(coding)\r\n\r\n2\r\nok\r\n0\r\n\r\n" + Self.smuggled,
                                    status: 400, "Transfer-Encoding: \(coding.debugDescription)")
            #expect(ContinuousClock.now - start < .seconds(2), "\(coding.debugDescription)")
        }
        try await expectRefused("POST /te HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                                status: 501, "chunked twice")
        try await expectRefused("POST /te HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", status: 501, "gzip, chunked")
        try await withServer { server, _ in
            let seen = try await exchange("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: CHUNKED\r\n\r\n2\r\nok\r\n0\r\n\r\n", port: server.port)
            #expect(seen.first?.status == 200 && seen.first?.text == "ok")
        }
    }

    @Test func refusalsGoThroughTheHandler() async throws {
        try await withServer { server, handler in
            let seen = try await exchange("POST /te HTTP/1.1\r\nHost: t\r\nX-Test: id-1\r\nTransfer-Encoding: gzip\r\n\r\n", port: server.port)
            #expect(seen.first?.status == 501)
            #expect(seen.first?.header("X-Refused") == "unsupportedTransferEncoding")
            #expect(seen.first?.header("X-Echo-Test") == "id-1")
            #expect(handler.handledPaths.isEmpty)
        }
    }
}
