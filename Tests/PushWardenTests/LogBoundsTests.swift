import Foundation
import PWCore
@testable import Providers
import PushWarden
@testable import RedisStores
@testable import Registration
import SessionAuth
import Synchronization
import Testing

/// Lines an attacker (or a failing provider) causes once per request are bounded: the red-team
/// pass found one info line per unauthenticated request at the default level.
@Suite(.serialized) struct LogBoundsTests {
    private func lines(_ logs: LogSink, _ message: String) -> [JSONObject] {
        logs.text.split(separator: "\n").compactMap { (try? JSONValue.parse(String($0)))?.objectValue }
            .filter { $0["msg"]?.stringValue == message }
    }

    @Test func aFloodOfRefusedSessionsWritesALineASecond() async throws {
        let h = try await SidecarHarness(upstreams: "      - name: voyado\n        provider: dry_run", memoryStore: true)
        let started = Date()
        for _ in 0..<300 {
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-1"}"#, token: "x.y.z")
            #expect(reply.status == 401)
            #expect(reply.errorCode == "unauthorized")
        }
        let seconds = Date().timeIntervalSince(started)
        let flood = lines(h.logs, "session refused")
        // One line per reason per second: the run took `seconds`, so at most that many windows.
        #expect(flood.count >= 1)
        #expect(flood.count <= Int(seconds.rounded(.up)) + 1, "\(flood.count) lines in \(seconds) s")

        // The next window's line says how many were left out.
        try await Task.sleep(for: .milliseconds(1100))
        _ = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-1"}"#, token: "x.y.z")
        let after = lines(h.logs, "session refused")
        let suppressed = after.compactMap { $0["suppressed"]?.stringValue.flatMap { Int($0) } }.reduce(0, +)
        #expect(after.count == flood.count + 1)
        #expect(suppressed == 301 - after.count)
        await h.stop()
    }

    /// A red-team case put a provider key where a token names its algorithm (or key id): the
    /// refusal's log line echoed it. It shows only a short hash now, the client's answer echoes
    /// nothing, and varying the value does not buy a line per value.
    @Test func headerValuesInRefusedSessionsAreLoggedAsHashes() async throws {
        let h = try await SidecarHarness(upstreams: "      - name: voyado\n        provider: dry_run", memoryStore: true)
        // Short enough to have fitted whole in the 40 characters reasons used to keep.
        let key = "vk_live_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(24)
        let values = [key, "\u{202E}" + key, "\u{1B}[2J" + key]
        for value in values {
            let header = JSONValue.object(JSONObject([JSONMember("alg", .string(value)), JSONMember("kid", .string(value))])).encodedString()
            let token = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(#"{"contact_id":"alice"}"#.utf8)) + ".c2ln"
            let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-1"}"#, token: token)
            #expect(reply.status == 401 && reply.errorCode == "unauthorized")
            #expect(!reply.text.contains(key))
        }
        #expect(!h.logs.text.contains(key))
        let refused = lines(h.logs, "session refused")
        #expect(refused.count == 1, "\(refused)")
        #expect(refused.first?["reason"]?.stringValue == "alg " + SessionVerifier.echo(key) + " not allowed")
        await h.stop()
    }

    @Test func aDryRunShowsTheContactAsAShortHash() async throws {
        let h = try await SidecarHarness(upstreams: "      - name: voyado\n        provider: dry_run", memoryStore: true)
        let contact = "contact-" + UUID().uuidString
        let reply = try await h.post("/installations", #"{"platform":"android","push_token":"fcm-\#(UUID().uuidString)"}"#, contact: contact)
        #expect(reply.status == 202)
        let sent = try #require(lines(h.logs, "dry_run: would send").first)
        #expect(!h.logs.text.contains(contact))
        #expect(sent["body"]?.stringValue?.contains(Redact.contact(contact)) == true)
        await h.stop()
    }
}

@Suite struct LogLimiterTests {
    final class FakeClock: Sendable {
        let millis = Mutex<UInt64>(1_000)
        func advance(_ by: UInt64) { millis.withLock { $0 += by } }
        var now: UInt64 { millis.withLock { $0 } }
    }

    @Test func oneLinePerKeyPerWindowAndTheCountOfTheRest() {
        let clock = FakeClock()
        let limiter = LogLimiter(windowMillis: 1000, now: { clock.now })
        #expect(limiter.admit("a") == 0)
        for _ in 0..<9 { #expect(limiter.admit("a") == nil) }
        #expect(limiter.admit("b") == 0)  // another key has its own window
        clock.advance(999)
        #expect(limiter.admit("a") == nil)
        clock.advance(1)
        #expect(limiter.admit("a") == 10)
        #expect(limiter.admit("a") == nil)
        clock.advance(5_000)
        #expect(limiter.admit("a") == 1)
    }

    @Test func manyDistinctKeysShareOneOverflowLine() {
        let clock = FakeClock()
        let limiter = LogLimiter(windowMillis: 1000, maxKeys: 4, now: { clock.now })
        for i in 0..<4 { #expect(limiter.admit("k\(i)") == 0) }
        #expect(limiter.admit("k4") == 0)  // the first overflowing key writes the window's one line
        for i in 5..<100 { #expect(limiter.admit("k\(i)") == nil) }
        // Past the window the table is swept and new keys get their own lines again.
        clock.advance(1000)
        #expect(limiter.admit("fresh") == 0)
    }
}
