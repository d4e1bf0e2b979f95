import Foundation
import PWCore
import PushWarden
import PushWardenTestSupport
@testable import RedisStores
@testable import Registration
import Testing

/// Requests refused before routing (framing, head syntax) as a client of the sidecar sees them:
/// the contract's envelope with `invalid_request`, `X-Request-Id`, and the connection closed.
/// Where libmicrohttpd answers before PushWarden sees the request, the test pins down what the
/// client gets instead, so a change there is noticed.
@Suite struct EarlyRefusalTests {
    struct Seen: Sendable {
        var response: RawHTTPClient.Response?
        var closed: Bool
        var json: JSONObject? { response.flatMap { (try? JSONValue.parse($0.body))?.objectValue } }
        var errorCode: String? { json?["error"]?.objectValue?["code"]?.stringValue }
        var requestID: String? { json?["error"]?.objectValue?["request_id"]?.stringValue }
    }

    func send(_ raw: String, port: Int) async throws -> Seen {
        try await offPool {
            let client = try RawHTTPClient(port: port, timeoutSeconds: 3)
            try? client.send(raw)
            let response = try? client.readResponse()
            return Seen(response: response, closed: client.isClosedByServer())
        }
    }

    @Test func framingAndSyntaxRefusalsUseTheEnvelope() async throws {
        let h = try await Harness(store: .memory)
        let path = "/v1/apps/\(h.app)/installations"
        let cases: [(String, Int)] = [
            ("POST \(path) HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
            ("POST \(path) HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello", 400),
            ("POST \(path) HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
            ("GET \(path) HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-1\r\nX-A: a\r\n b\r\n\r\n", 400),
            ("GET \(path) HTTP/1.1\nHost: t\nX-Request-Id: req-1\n\n", 400),
            ("GET \(path) HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-1\r\nX-A : b\r\n\r\n", 400),
            ("GET \(path) HTTP/1.1\r\nX-Request-Id: req-1\r\n\r\n", 400),  // no Host
            ("GET /a b HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-1\r\n\r\n", 400),
        ]
        for (raw, status) in cases {
            let seen = try await send(raw, port: h.sidecar.port)
            let name = raw.debugDescription
            #expect(seen.response?.status == status, "\(name)")
            #expect(seen.errorCode == "invalid_request", "\(name)")
            #expect(seen.json?["error"]?.objectValue?["message"]?.stringValue?.isEmpty == false, "\(name)")
            #expect(seen.requestID == "req-1", "\(name)")
            #expect(seen.response?.header("X-Request-Id") == "req-1", "\(name)")
            #expect(seen.response?.header("Content-Type") == "application/json", "\(name)")
            #expect(seen.response?.header("Connection")?.lowercased() == "close", "\(name)")
            #expect(seen.closed, "\(name)")
        }
        // The admin listener answers the same way.
        let admin = try await send("GET /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n\r\n", port: h.sidecar.adminPort)
        #expect(admin.response?.status == 501 && admin.errorCode == "invalid_request")
        #expect(admin.response?.header("X-Request-Id") == admin.requestID && admin.requestID != nil)
        #expect(h.mock.received.isEmpty)
        await h.stop()
    }

    /// A registration with a valid session whose `Transfer-Encoding` is `chunked` with trailing
    /// white space was never answered (libmicrohttpd read its body until the connection closed):
    /// every spelling now gets an answer, the envelope when refused.
    @Test func transferEncodingSpellingsAreAnswered() async throws {
        let h = try await Harness(store: .memory)
        let path = "/v1/apps/\(h.app)/installations"
        let body = #"{"platform":"ios","push_token":"\#(Harness.apnsToken())"}"#
        let chunk = String(body.utf8.count, radix: 16) + "\r\n" + body + "\r\n0\r\n\r\n"
        func head(_ encodings: [String]) -> String {
            "POST \(path) HTTP/1.1\r\nHost: t\r\nX-Request-Id: req-te\r\nAuthorization: Bearer \(h.token())\r\n"
                + "Content-Type: application/json\r\n" + encodings.map { "Transfer-Encoding: \($0)\r\n" }.joined() + "\r\n"
        }
        let cases: [([String], Int)] = [
            (["chunked\t"], 400), (["chunked "], 400), (["chunked \t "], 400),
            (["gzip, chunked"], 501), (["chunked", "chunked"], 501), (["Chunked"], 202),
        ]
        for (encodings, status) in cases {
            let seen = try await send(head(encodings) + chunk, port: h.sidecar.port)
            let name = encodings.debugDescription
            #expect(seen.response?.status == status, "\(name)")
            #expect(seen.response?.header("X-Request-Id") == "req-te", "\(name)")
            if status != 202 {
                #expect(seen.errorCode == "invalid_request", "\(name)")
                #expect(seen.closed, "\(name)")
            }
        }
        #expect(h.mock.received.count == 1)
        await h.stop()
    }

    /// Answers libmicrohttpd 0.9.75 sends itself, before any callback of ours can answer: kept
    /// refusals (status and a closed connection), without the envelope. docs/security.md lists them.
    @Test func answersLeftToLibmicrohttpd() async throws {
        let h = try await Harness(store: .memory)
        let port = h.sidecar.port
        let huge = String(repeating: "v", count: 64 * 1024)
        let cases: [(String, String, Int?)] = [
            ("header block too large", "GET /x HTTP/1.1\r\nHost: t\r\nX-Big: \(huge)\r\n\r\n", 431),
            ("request line too long", "GET /\(huge) HTTP/1.1\r\nHost: t\r\n\r\n", 414),
            ("HTTP/2.0 on the request line", "GET /x HTTP/2.0\r\nHost: t\r\n\r\n", 505),
            ("a bad version string", "GET /x HTTP/1.1x\r\nHost: t\r\n\r\n", 400),
            ("a field line without a colon", "GET /x HTTP/1.1\r\nHost: t\r\nnocolon\r\n\r\n", 400),
            ("a Content-Length comma list", "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0, 5\r\n\r\nhello", 400),
            ("a Content-Length that is not a number", "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: five\r\n\r\n", 400),
            ("a request line without a target", "GARBAGE\r\n\r\n", nil),
        ]
        for (name, raw, status) in cases {
            let seen = try await send(raw, port: port)
            #expect(seen.response?.status == status, "\(name)")
            #expect(seen.errorCode == nil, "\(name): now in the envelope? update the list in docs/security.md")
            #expect(seen.closed, "\(name)")
        }
        await h.stop()
    }
}
