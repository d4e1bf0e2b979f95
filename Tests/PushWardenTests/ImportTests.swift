import Foundation
import PWCore
import PWPolicy
import Providers
import PushWarden
import PushWardenTestSupport
import RedisStores
@testable import Registration
import Testing

/// `pushwarden import`: installations an app backend already holds, one JSON object per line,
/// validated as client registrations are, queued through the outbox that a running sidecar's
/// workers deliver, kept in the inventory (docs/operations.md, importing installations).
@Suite(.serialized) struct ImportTests {
    static func file(_ lines: [String]) throws -> String {
        let path = NSTemporaryDirectory() + "import-" + UUID().uuidString + ".ndjson"
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func line(_ contact: String, _ token: String, platform: String = "android") -> String {
        #"{"contact_id":"\#(contact)","platform":"\#(platform)","push_token":"\#(token)","app_version":"4.2.0"}"#
    }

    struct Run {
        var report: ImportCommand.Report
        var output: [String]
        var progress: [String]
    }

    static func run(_ h: SidecarHarness, _ path: String, rate: Double = 10_000) async throws -> Run {
        var output: [String] = [], progress: [String] = []
        let report = try await ImportCommand.run(ImportCommand.Options(file: path, app: h.app, ratePerSecond: rate, progressEverySeconds: 0),
                                                 policy: h.policy, redisURL: RedisServer.shared.url, secrets: h.secrets,
                                                 logger: Logger(label: "test", level: .warning, sink: h.logs),
                                                 write: { output.append($0) }, progress: { progress.append($0) })
        return Run(report: report, output: output, progress: progress)
    }

    static func refused(_ path: String) throws -> [JSONObject] {
        try String(contentsOfFile: path + ".refused.ndjson", encoding: .utf8).split(separator: "\n")
            .compactMap { try? JSONValue.parse(String($0)).objectValue }
    }

    /// Good lines are queued and delivered by the sidecar's workers, and kept in the inventory;
    /// bad ones are refused with the client API's error codes, named by their line numbers. A
    /// second run of the same file makes no upstream call.
    @Test func goodAndBadLinesAndASecondRunThatCallsNoUpstream() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await OutboxTests.harness(OutboxTests.voyado(mock), key: "vk")
        let tokens = (0..<3).map { _ in OutboxTests.fcm() }
        let path = try Self.file([
            Self.line("alice", tokens[0]),
            Self.line("alice", OutboxTests.fcm(), platform: "windows"),
            #"{"contact_id":"bob","platform":"android"}"#,
            "",
            Self.line("bob", tokens[1]),
            #"{"contact_id":"carol","platform":"android","push_token":"#,
            #"{"platform":"android","push_token":"\#(OutboxTests.fcm())"}"#,
            Self.line("carol", tokens[2]),
        ])
        let first = try await Self.run(h, path)
        #expect(first.report.lines == 7 && first.report.queued == 3 && first.report.refused == 4 && first.report.failed == 0,
                "\(first.report)")
        let refusals = try Self.refused(path)
        #expect(refusals.map { $0["line"] } == [.number("2"), .number("3"), .number("6"), .number("7")], "\(refusals)")
        #expect(refusals.map { $0["code"]?.stringValue } == ["invalid_platform", "invalid_request", "invalid_json", "invalid_request"])
        #expect(refusals.map { $0["field"]?.stringValue } == ["platform", "push_token", nil, "contact_id"])
        // It echoes the lines, tokens included: the operator's alone.
        let mode = try FileManager.default.attributesOfItem(atPath: path + ".refused.ndjson")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(first.output.joined().contains("3 queued") && first.output.joined().contains(path + ".refused.ndjson"), "\(first.output)")
        // Progress and summary never show a token.
        #expect(!first.progress.isEmpty)
        #expect(!(first.progress + first.output).contains { text in tokens.contains { text.contains($0) } })

        #expect(await OutboxTests.eventually { mock.received(path: "/installations").count == 3 })
        #expect(Set(mock.received(path: "/installations").compactMap { $0.object?["push_token"]?.stringValue }) == Set(tokens))
        let alice = try await InventoryTests.list(h, "alice")
        #expect(alice.map(\.token) == [Redact.token(tokens[0])] && alice.first?.upstreams == ["voyado"], "\(alice)")
        #expect(try await InventoryTests.list(h, "carol").count == 1)

        let second = try await Self.run(h, path)
        #expect(second.report.unchanged == 3 && second.report.queued == 0 && second.report.refused == 4, "\(second.report)")
        try await Task.sleep(for: .milliseconds(500))
        #expect(mock.received(path: "/installations").count == 3)
        await h.stop()
        await mock.stop()
    }

    /// A line longer than `client.max_body`, even one longer than the read buffer, is refused as
    /// `payload_too_large` with only its start echoed; the lines after it still count from there.
    @Test func overlongLinesAreRefusedAndTheRestGoOn() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await OutboxTests.harness(OutboxTests.voyado(mock), key: "vk")
        let padding = { (bytes: Int) in #"{"contact_id":"e","platform":"android","push_token":"fcm-1","device_model":""# + String(repeating: "x", count: bytes) + #""}"# }
        let path = try Self.file([padding(20_000), padding(200_000), Self.line("erin", OutboxTests.fcm())])
        let run = try await Self.run(h, path)
        #expect(run.report.lines == 3 && run.report.refused == 2 && run.report.queued == 1, "\(run.report)")
        let refusals = try Self.refused(path)
        #expect(refusals.map { $0["line"] } == [.number("1"), .number("2")])
        #expect(refusals.allSatisfy { $0["code"]?.stringValue == "payload_too_large" && ($0["input"]?.stringValue?.utf8.count ?? .max) <= 256 })
        await h.stop()
        await mock.stop()
    }

    /// Imported while the upstream is down: the lines wait in the outbox (a run meanwhile queues
    /// nothing twice) and are delivered once it recovers.
    @Test func anImportIntoADownUpstreamDeliversAfterItRecovers() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        for _ in 0..<6 { mock.enqueue(.init(status: 503)) }
        let h = try await OutboxTests.harness(OutboxTests.voyado(mock), key: "vk")
        let tokens = (0..<2).map { _ in OutboxTests.fcm() }
        let path = try Self.file(tokens.enumerated().map { Self.line("c\($0.offset)", $0.element) })
        let first = try await Self.run(h, path)
        #expect(first.report.queued == 2 && first.report.refused == 0, "\(first.report)")
        let again = try await Self.run(h, path)
        #expect(again.report.queued + again.report.unchanged == 2, "\(again.report)")
        #expect(await OutboxTests.eventually(20) {
            Set(mock.received(path: "/installations").suffix(2).compactMap { $0.object?["push_token"]?.stringValue }) == Set(tokens)
                && mock.received(path: "/installations").count >= 8
        }, "\(mock.received(path: "/installations").count) calls")
        let delivered = mock.received(path: "/installations").count
        #expect(try await Self.run(h, path).report.unchanged == 2)
        try await Task.sleep(for: .milliseconds(300))
        #expect(mock.received(path: "/installations").count == delivered)
        await h.stop()
        await mock.stop()
    }

    /// `--rate` bounds how fast lines start: 20 lines at 40 a second take about half a second.
    @Test func theRateBoundsTheImport() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await OutboxTests.harness(OutboxTests.voyado(mock), key: "vk")
        let path = try Self.file((0..<20).map { Self.line("r\($0)", OutboxTests.fcm()) })
        let started = Date()
        let run = try await Self.run(h, path, rate: 40)
        #expect(run.report.queued == 20)
        #expect(Date().timeIntervalSince(started) >= 0.4)
        await h.stop()
        await mock.stop()
    }

    /// A paced import keeps its rate on average, not below it: 300 lines at 150 a second start
    /// over two seconds, all queued, the run not much longer.
    @Test func aPacedImportKeepsItsRate() async throws {
        let mock = try MockVoyado(apiKey: "vk")
        let h = try await OutboxTests.harness(OutboxTests.voyado(mock), key: "vk")
        let path = try Self.file((0..<300).map { Self.line("p\($0)", OutboxTests.fcm()) })
        let started = Date()
        let run = try await Self.run(h, path, rate: 150)
        let elapsed = Date().timeIntervalSince(started)
        #expect(run.report.queued == 300)
        #expect(elapsed >= 1.99)
        #expect(elapsed < 3.5)
        await h.stop()
        await mock.stop()
    }

    /// An upstream that takes each user's own credential (Fluxer) cannot be called without the
    /// user: the import skips it, says so, and `policy explain` names it; as the primary, the import
    /// refuses to start. A `delivery: sync` upstream is reached through its outbox as well.
    @Test func upstreamsThatNeedTheUsersOwnCredentialAreSkipped() async throws {
        let mock = try MockVoyado(apiKey: "vk"), fluxer = try MockFluxer()
        let h = try await SidecarHarness(upstreams: OutboxTests.voyado(mock, delivery: "sync") + "\n" + FluxerTests.upstream(fluxer, role: "shadow"),
                                         secrets: [.env("VOYADO_KEY"): "vk"])
        let token = OutboxTests.fcm()
        let run = try await Self.run(h, try Self.file([Self.line("dora", token)]))
        #expect(run.report.queued == 1, "\(run.report)")
        #expect(run.output.contains { $0.contains("upstream fluxer takes each user's own credential: skipped") }, "\(run.output)")
        #expect(PolicyExplainer.explain(h.policy).contains("queued at 'voyado' through the Redis outbox and kept in the inventory; "
                                                           + "skipped: 'fluxer' (takes each user's own credential)"))
        #expect(await OutboxTests.eventually { mock.received(path: "/installations").count == 1 })
        #expect(fluxer.received.isEmpty)
        await h.stop()

        let primary = try await SidecarHarness(upstreams: FluxerTests.upstream(fluxer))
        await #expect(throws: ConfigurationError.self) { _ = try await Self.run(primary, try Self.file([Self.line("dora", token)])) }
        #expect(PolicyExplainer.explain(primary.policy).contains("Import (pushwarden import): not possible: the primary 'fluxer'"))
        await primary.stop()
        await mock.stop()
        await fluxer.stop()
    }

    /// A file that is not one JSON object per line is refused before anything is registered, with
    /// what it looks like instead, and exit code 2.
    @Test func aFileThatIsNotNDJSONGetsAClearError() throws {
        let directory = NSTemporaryDirectory()
        let cases: [(String, [UInt8], String)] = [
            ("binary", [0x1F, 0x8B, 0x08, 0x00, 0xFF, 0x00, 0x41], "not UTF-8 text"),
            ("array", Array(#"[{"contact_id":"a","platform":"android","push_token":"fcm-1"}]"#.utf8), "JSON array"),
            ("csv", Array("contact_id,platform,push_token\na,android,fcm-1\n".utf8), "not a JSON object (CSV"),
            ("pretty", Array("{\n  \"contact_id\": \"a\"\n}\n".utf8), "pretty-printed"),
        ]
        for (name, bytes, message) in cases {
            let path = directory + "import-\(name)-" + UUID().uuidString
            #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
            let run = try CommandLineTests.run(["import", "--policy", "policies/example.yaml", "--redis", "redis://127.0.0.1:1", "--app", "demo", path])
            #expect(run.status == 2, "\(name): \(run.stderr)")
            #expect(run.stderr.contains("is not NDJSON") && run.stderr.contains(message), "\(name): \(run.stderr)")
        }
        let missing = try CommandLineTests.run(["import", "--policy", "policies/example.yaml", "--app", "demo", "x.ndjson"],
                                               environment: ["PUSHWARDEN_REDIS_URL": ""])
        #expect(missing.status == 2)
    }
}
