import Foundation
import HTTPClient
import PWCore
@testable import Providers
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import SessionAuth
import Synchronization
import Testing

/// The outbox across processes: `pushwarden serve` SIGKILLed while deliveries wait, and a second
/// replica taking over what a killed one had claimed. Real processes, a real redis-server, a real
/// mock provider, all on loopback; bounded counts, every process ended by its pid.
@Suite(.serialized) struct OutboxProcessTests {
    static let secret = "outbox-session-secret-0123456789abcdef"

    static func policy(_ mock: MockVoyado) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pw-outbox-\(UUID().uuidString).yaml").path
        let text = """
            version: 1
            apps:
              shop:
                session:
                  type: jwt
                  algorithms: [HS256]
                  hmac_secret: {env: OUTBOX_SESSION_SECRET}
                client:
                  platforms: [ios, android]
                upstreams:
                  - name: voyado
                    provider: voyado
                    delivery: queued
                    base_path: \(mock.basePath)
                    api_key: {env: OUTBOX_VOYADO_KEY}
                    timeout: 1s
                    retry: {attempts: 1, backoff: 50ms, max_backoff: 200ms}
                    queue: {max_age: 1h, claim_after: 2s}
                    circuit: {failures: 3, within: 10s, open_for: 300ms}
            """
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func token(_ contact: String) -> String {
        let now = Int(Date().timeIntervalSince1970)
        return JWTMinter.mintHS256(claims: JSONObject([
            JSONMember("sub", .string(contact)), JSONMember("iat", .number(String(now))), JSONMember("exp", .number(String(now + 600))),
        ]), secret: Array(secret.utf8))
    }

    /// A `serve` on the shared test Redis (a database of its own, flushed first).
    static func start(_ policy: String, database: Int) throws -> (Process, String) {
        let (process, _, _, listen, _) = try CommandLineTests.serve(
            ["--redis", RedisServer.shared.url + "/\(database)"],
            environment: ["OUTBOX_SESSION_SECRET": secret, "OUTBOX_VOYADO_KEY": "vk"], policy: policy)
        return (process, listen)
    }

    /// Registers `count` new tokens (50 at a time); each must answer 202 `queued`.
    static func register(_ count: Int, at listen: String) async throws -> [String] {
        let client = try HTTPClient()
        defer { client.shutdown() }
        let tokens = (0..<count).map { _ in "fcm-" + UUID().uuidString }
        let session = token("alice")
        for start in stride(from: 0, to: count, by: 50) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for token in tokens[start..<min(count, start + 50)] {
                    group.addTask {
                        let response = try await client.execute(HTTPClientRequest(
                            method: "POST", url: "http://\(listen)/v1/apps/shop/installations",
                            headers: ["Authorization": "Bearer \(session)", "Content-Type": "application/json"],
                            body: Array(#"{"platform":"android","push_token":"\#(token)"}"#.utf8), timeoutMillis: 10_000))
                        let body = String(decoding: response.body, as: UTF8.self)
                        #expect(response.status == 202 && body.contains(#""voyado":"queued""#), "\(body)")
                    }
                }
                try await group.waitForAll()
            }
        }
        return tokens
    }

    static func flush(database: Int) async throws {
        let client = try await emptied(database: database)
        client.close()
    }

    /// A client of `database`, emptied first; the caller closes it.
    static func emptied(database: Int) async throws -> RedisClient {
        let client = RedisClientFactory.make(database: database)
        do {
            _ = try await client.send(["FLUSHDB"])
        } catch {
            client.close()
            throw error
        }
        return client
    }

    /// Whether the mock was asked to remove every one of `tokens` (waits up to 15 s).
    static func removalsArrived(_ tokens: [String], at mock: MockVoyado) async -> Bool {
        await eventually {
            let bodies = mock.received(path: "/installations/unregister").map { String(decoding: $0.body, as: UTF8.self) }
            return tokens.allSatisfy { token in bodies.contains { $0.contains(token) } }
        }
    }

    /// Delivered tokens among `tokens` (a registration call the mock accepted), and the calls
    /// beyond one per token (duplicates).
    static func delivered(_ tokens: [String], mock: MockVoyado) -> (Int, Int) {
        let wanted = Set(tokens)
        var seen: [String: Int] = [:]
        for call in mock.received(path: "/installations") {
            guard let token = (try? JSONValue.parse(call.body))?.objectValue?["push_token"]?.stringValue, wanted.contains(token) else { continue }
            seen[token, default: 0] += 1
        }
        return (seen.count, seen.values.reduce(0) { $0 + max(0, $1 - 1) })
    }

    /// 500 deliveries wait while the provider fails; PushWarden is SIGKILLed; the provider
    /// recovers; a new process delivers every one (after the dead one's claim expires).
    @Test(.timeLimit(.minutes(2))) func sigkillWithDeliveriesWaitingLosesNothing() async throws {
        try await Self.flush(database: 3)
        let mock = try MockVoyado(apiKey: "vk")
        for _ in 0..<100_000 { mock.enqueue(.init(status: 503)) }
        let policy = try Self.policy(mock)
        let (first, listen) = try Self.start(policy, database: 3)
        defer { CommandLineTests.stop(first, signal: SIGKILL) }
        let tokens = try await Self.register(500, at: listen)
        try await Task.sleep(for: .milliseconds(800))  // the worker has read (claimed) and failed some
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        mock.reset()  // the provider is back, and what it saw before is forgotten
        let (second, _) = try Self.start(policy, database: 3)
        defer { CommandLineTests.stop(second, signal: SIGTERM) }
        let deadline = Date().addingTimeInterval(60)
        while Self.delivered(tokens, mock: mock).0 < tokens.count, Date() < deadline { try await Task.sleep(for: .milliseconds(200)) }
        let (count, duplicates) = Self.delivered(tokens, mock: mock)
        print("outbox SIGKILL: \(count) of \(tokens.count) delivered after the restart, \(duplicates) duplicate calls")
        #expect(count == tokens.count)
        await mock.stop()
    }

    /// Two replicas on one Redis; the one holding claimed entries is SIGKILLed; the other
    /// delivers them after `claim_after`.
    @Test(.timeLimit(.minutes(2))) func aSurvivingReplicaTakesOverAfterClaimAfter() async throws {
        try await Self.flush(database: 4)
        let mock = try MockVoyado(apiKey: "vk")
        for _ in 0..<100_000 { mock.enqueue(.init(status: 503)) }
        let policy = try Self.policy(mock)
        let (doomed, listen) = try Self.start(policy, database: 4)
        defer { CommandLineTests.stop(doomed, signal: SIGKILL) }
        let tokens = try await Self.register(200, at: listen)
        try await Task.sleep(for: .milliseconds(800))
        let (survivor, _) = try Self.start(policy, database: 4)
        defer { CommandLineTests.stop(survivor, signal: SIGTERM) }
        try await Task.sleep(for: .milliseconds(300))
        kill(doomed.processIdentifier, SIGKILL)
        doomed.waitUntilExit()
        let killedAt = Date()
        mock.reset()
        let deadline = Date().addingTimeInterval(60)
        while Self.delivered(tokens, mock: mock).0 < tokens.count, Date() < deadline { try await Task.sleep(for: .milliseconds(200)) }
        let (count, duplicates) = Self.delivered(tokens, mock: mock)
        print("outbox takeover: \(count) of \(tokens.count) delivered \(String(format: "%.1f", Date().timeIntervalSince(killedAt))) s after the kill, \(duplicates) duplicate calls")
        #expect(count == tokens.count)
        await mock.stop()
    }
}

/// Outside numbers in the outbox, and `pushwarden outbox` with and without the policy: the binary
/// as an operator runs it, against a real redis-server (a database per test, flushed first).
extension OutboxProcessTests {
    static let shop = OutboxStreams.Upstream(app: "shop", upstream: "voyado", shards: Outbox.queuedShards)

    /// What a `serve` wrote to stderr, read as it comes (so the sidecar never blocks on the pipe).
    final class Log: Sendable {
        private let text: Mutex<String>
        init(_ pipe: Pipe, first: String) {
            text = Mutex(first)
            pipe.fileHandleForReading.readabilityHandler = { [self] handle in
                let chunk = String(decoding: handle.availableData, as: UTF8.self)
                text.withLock { $0 += chunk }
            }
        }
        var contents: String { text.withLock { $0 } }
    }

    static func serveLogging(_ policy: String, database: Int) throws -> (Process, String, Log) {
        let (process, err, first, listen, _) = try CommandLineTests.serve(
            ["--redis", RedisServer.shared.url + "/\(database)"],
            environment: ["OUTBOX_SESSION_SECRET": secret, "OUTBOX_VOYADO_KEY": "vk"], policy: policy)
        return (process, listen, Log(err, first: first))
    }

    /// `pushwarden outbox ...` on `database`, with no policy unless the arguments name one.
    static func outbox(_ arguments: [String], database: Int) throws -> CommandLineTests.Run {
        try CommandLineTests.run(["outbox"] + arguments + ["--redis", RedisServer.shared.url + "/\(database)"],
                                 environment: ["PUSHWARDEN_POLICY": "", "PUSHWARDEN_POLICY_KEY": ""])
    }

    /// A dead letter written by hand: `entry` as the body, and the given extra fields.
    @discardableResult
    static func deadLetter(_ client: RedisClient, _ target: OutboxStreams.Upstream, body: String, _ fields: [String] = []) async throws -> String {
        let reply = try await client.send(["XADD", target.dead, "*", "e", body, "reason", "rejected"] + fields)
        return try #require(reply.string)
    }

    static func length(_ client: RedisClient, _ key: String) async throws -> Int {
        guard case .integer(let n) = try await client.send(["XLEN", key]) else { return -1 }
        return Int(n)
    }

    /// Polls `condition` every 100 ms for up to `seconds`.
    static func eventually(_ seconds: Double = 15, _ condition: () async throws -> Bool) async rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }

    /// An entry whose `accepted_ms` is Int64.min overflowed the worker's age arithmetic and
    /// trapped; left pending, every replica that claimed it died in turn. Now it is malformed:
    /// dead-lettered with a log line that names the field (not the token), and the sidecar goes on.
    @Test(.timeLimit(.minutes(1))) func anOutsideAcceptTimeIsDeadLetteredNotACrash() async throws {
        let client = try await Self.emptied(database: 5)
        defer { client.close() }
        let mock = try MockVoyado(apiKey: "vk")
        let token = "fcm-" + UUID().uuidString
        let text = OutboxFixture.entry(app: "shop", token: token).encoded()
        let forged = try #require(text.range(of: #""accepted_ms":[0-9]+"#, options: .regularExpression))
        let body = text.replacingCharacters(in: forged, with: #""accepted_ms":-9223372036854775808"#)
        _ = try await client.send(["XADD", Self.shop.stream(Self.shop.shard(of: token)), "*", "e", body])
        let (process, listen, log) = try Self.serveLogging(try Self.policy(mock), database: 5)
        defer { CommandLineTests.stop(process, signal: SIGTERM) }
        let dead = await Self.eventually { ((try? await Self.length(client, Self.shop.dead)) ?? 0) == 1 }
        #expect(dead, "not dead-lettered; serve running: \(process.isRunning)\n\(log.contents)")
        #expect(process.isRunning)
        let fields = try await OutboxStreams(client: client).deadLetters(of: Self.shop, count: 10).map(\.1)
        #expect(fields.map { $0["reason"] } == ["malformed"], "\(fields)")
        #expect(log.contents.contains("outbox entry malformed") && log.contents.contains("accepted_ms"), "\(log.contents)")
        #expect(!log.contents.contains(token))
        // The sidecar goes on: a registration queued after it is delivered.
        let tokens = try await Self.register(1, at: listen)
        #expect(await Self.eventually { Self.delivered(tokens, mock: mock).0 == 1 })
        await mock.stop()
    }

    /// An entry whose body names another app than the stream it sits in (written by hand) is
    /// dead-lettered as malformed, never delivered through this stream's upstream.
    @Test(.timeLimit(.minutes(1))) func anEntryNamingAnotherOutboxIsDeadLetteredNotDelivered() async throws {
        let client = try await Self.emptied(database: 10)
        defer { client.close() }
        let mock = try MockVoyado(apiKey: "vk")
        let token = "fcm-" + UUID().uuidString
        _ = try await client.send(["XADD", Self.shop.stream(Self.shop.shard(of: token)), "*", "e",
                                   OutboxFixture.entry(app: "another-app", token: token).encoded()])
        let (process, listen, log) = try Self.serveLogging(try Self.policy(mock), database: 10)
        defer { CommandLineTests.stop(process, signal: SIGTERM) }
        let dead = await Self.eventually { ((try? await Self.length(client, Self.shop.dead)) ?? 0) == 1 }
        #expect(dead, "not dead-lettered\n\(log.contents)")
        let fields = try await OutboxStreams(client: client).deadLetters(of: Self.shop, count: 10).map(\.1)
        #expect(fields.map { $0["reason"] } == ["malformed"], "\(fields)")
        #expect(log.contents.contains(#""field":"app""#), "\(log.contents)")
        // The sidecar goes on, and the forged entry never reached the upstream.
        let tokens = try await Self.register(1, at: listen)
        #expect(await Self.eventually { Self.delivered(tokens, mock: mock).0 == 1 })
        #expect(!mock.received.contains { String(decoding: $0.body, as: UTF8.self).contains(token) })
        await mock.stop()
    }

    /// `replay` took the shard count from the dead letter: `0` divided by zero, `-1` and
    /// `4294967296` trapped converting it, `1000` put the entry in a shard no worker reads and
    /// said "replayed". Now the policy's layout places every one where a worker reads it.
    @Test(.timeLimit(.minutes(1))) func replayPlacesEntriesByThePolicyNotByTheDeadLetter() async throws {
        let client = try await Self.emptied(database: 6)
        defer { client.close() }
        let mock = try MockVoyado(apiKey: "vk")
        let policy = try Self.policy(mock)
        let (process, _) = try Self.start(policy, database: 6)
        defer { CommandLineTests.stop(process, signal: SIGTERM) }
        var tokens: [String] = []
        for shards in ["0", "-1", "4294967296", "1000", nil] {
            let token = "fcm-" + UUID().uuidString
            tokens.append(token)
            try await Self.deadLetter(client, Self.shop, body: OutboxFixture.entry(app: "shop", token: token).encoded(),
                                      shards.map { ["shards", $0] } ?? [])
        }
        let run = try Self.outbox(["replay", "--policy", policy, "--app", "shop", "--upstream", "voyado"], database: 6)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.hasSuffix("5 replayed\n"), "\(run.stdout)")
        #expect(try await Self.length(client, Self.shop.dead) == 0)
        #expect(await Self.removalsArrived(tokens, at: mock), "\(mock.received.map(\.path))")
        await mock.stop()
    }

    /// An app or upstream the policy has no outbox for, and an entry whose body names another
    /// outbox than its stream: not replayed, named by id with why, left in the dead letters.
    @Test func replayRefusesWhatNoWorkerWouldRead() async throws {
        let client = try await Self.emptied(database: 7)
        defer { client.close() }
        let mock = try MockVoyado(apiKey: "vk")
        let policy = try Self.policy(mock)
        let ghostApp = OutboxStreams.Upstream(app: "ghost", upstream: "voyado", shards: 1)
        let ghostUpstream = OutboxStreams.Upstream(app: "shop", upstream: "ghost", shards: 1)
        var refused: [String: String] = [:]
        var ghost = OutboxFixture.entry(app: "ghost", token: "fcm-" + UUID().uuidString)
        refused[try await Self.deadLetter(client, ghostApp, body: ghost.encoded())] = ghostApp.dead
        ghost.app = "shop"
        ghost.upstream = "ghost"
        refused[try await Self.deadLetter(client, ghostUpstream, body: ghost.encoded())] = ghostUpstream.dead
        let elsewhere = OutboxFixture.entry(app: "other", token: "fcm-" + UUID().uuidString)
        refused[try await Self.deadLetter(client, Self.shop, body: elsewhere.encoded(), ["shards", "8"])] = Self.shop.dead
        let run = try Self.outbox(["replay", "--policy", policy], database: 7)
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.hasSuffix("0 replayed, 3 not replayed\n"), "\(run.stdout)")
        for (id, stream) in refused {
            #expect(run.stdout.contains("\(id) not replayed: "), "\(id)\n\(run.stdout)")
            #expect(try await Self.length(client, stream) == 1, "\(stream)")
        }
        #expect(run.stdout.contains("the policy has no outbox for ghost/voyado"))
        #expect(run.stdout.contains("the policy has no outbox for shop/ghost"))
        #expect(run.stdout.contains("names other/voyado, not shop/voyado"))
        #expect(try await Self.length(client, Self.shop.stream(Self.shop.shard(of: elsewhere.pushToken))) <= 0)
        await mock.stop()
    }

    /// Without a policy: `list`, `replay` and `drop` work on entries that are not sealed; `replay`
    /// places them by the layout the running sidecar recorded.
    @Test(.timeLimit(.minutes(1))) func withoutAPolicyReplayPlacesByTheRunningSidecar() async throws {
        let client = try await Self.emptied(database: 8)
        defer { client.close() }
        let mock = try MockVoyado(apiKey: "vk")
        let (process, _) = try Self.start(try Self.policy(mock), database: 8)
        defer { CommandLineTests.stop(process, signal: SIGTERM) }
        let tokens = (0..<3).map { _ in "fcm-" + UUID().uuidString }
        for token in tokens { try await Self.deadLetter(client, Self.shop, body: OutboxFixture.entry(app: "shop", token: token).encoded()) }
        let listed = try Self.outbox(["list", "--app", "shop", "--upstream", "voyado"], database: 8)
        #expect(listed.status == 0, "\(listed.stdout)\(listed.stderr)")
        #expect(listed.stdout.hasSuffix("3 dead-lettered\n"), "\(listed.stdout)")
        let replayed = try Self.outbox(["replay", "--app", "shop", "--upstream", "voyado"], database: 8)
        #expect(replayed.status == 0, "\(replayed.stdout)\(replayed.stderr)")
        #expect(replayed.stdout.hasSuffix("3 replayed\n"), "\(replayed.stdout)")
        #expect(await Self.removalsArrived(tokens, at: mock), "\(mock.received.map(\.path))")
        try await Self.deadLetter(client, Self.shop, body: OutboxFixture.entry(app: "shop", token: tokens[0]).encoded())
        let dropped = try Self.outbox(["drop", "--app", "shop", "--upstream", "voyado"], database: 8)
        #expect(dropped.status == 0 && dropped.stdout.hasSuffix("1 dropped\n"), "\(dropped.stdout)\(dropped.stderr)")
        #expect(try await Self.length(client, Self.shop.dead) == 0)
        await mock.stop()
    }

    /// Without a policy and with no sidecar running, nothing says where workers read: replay
    /// leaves the entry; sealed entries are named by id as not opened (list, replay) and can be
    /// dropped. Each run that could not handle an entry exits 1.
    @Test func withoutAPolicySealedOrUnplacedEntriesAreNamedById() async throws {
        let client = try await Self.emptied(database: 9)
        defer { client.close() }
        let sealer = try EncryptionAtRestTests.sealer(EncryptionAtRestTests.storeKey)
        let plainToken = "fcm-" + UUID().uuidString, sealedToken = "fcm-" + UUID().uuidString
        let plain = try await Self.deadLetter(client, Self.shop, body: OutboxFixture.entry(app: "shop", token: plainToken).encoded())
        let sealed = try await Self.deadLetter(client, Self.shop, body: OutboxFixture.entry(app: "shop", token: sealedToken).encoded(sealer: sealer))

        let listed = try Self.outbox(["list"], database: 9)
        #expect(listed.status == 1, "\(listed.stdout)\(listed.stderr)")
        #expect(listed.stdout.contains("\(sealed) could not be opened"), "\(listed.stdout)")
        #expect(!listed.stdout.contains("\(plain) could not be opened"))
        #expect(listed.stdout.contains(Redact.token(plainToken)))

        // No sidecar has recorded its layout: neither is replayed.
        var replayed = try Self.outbox(["replay"], database: 9)
        #expect(replayed.status == 1, "\(replayed.stdout)\(replayed.stderr)")
        #expect(replayed.stdout.contains("\(plain) not replayed: no running sidecar has recorded where it reads shop/voyado"), "\(replayed.stdout)")
        #expect(replayed.stdout.contains("\(sealed) not replayed: sealed"), "\(replayed.stdout)")
        #expect(try await Self.length(client, Self.shop.dead) == 2)

        // A running sidecar's record (as one writes it): the plain one goes back, the sealed one stays.
        _ = try await client.send(["SET", "pw:v2:{outbox:shop:voyado:dead}:layout:pw-test", "8", "EX", "30"])
        replayed = try Self.outbox(["replay"], database: 9)
        #expect(replayed.status == 1, "\(replayed.stdout)\(replayed.stderr)")
        #expect(replayed.stdout.hasSuffix("1 replayed, 1 not replayed\n"), "\(replayed.stdout)")
        #expect(replayed.stdout.contains("\(sealed) not replayed: sealed"), "\(replayed.stdout)")
        #expect(try await Self.length(client, Self.shop.stream(Self.shop.shard(of: plainToken))) == 1)
        #expect(try await Self.length(client, Self.shop.dead) == 1)

        // Records that disagree (a rollout that changes the layout): nothing is placed.
        try await Self.deadLetter(client, Self.shop, body: OutboxFixture.entry(app: "shop", token: plainToken).encoded())
        _ = try await client.send(["SET", "pw:v2:{outbox:shop:voyado:dead}:layout:pw-other", "1", "EX", "30"])
        replayed = try Self.outbox(["replay"], database: 9)
        #expect(replayed.status == 1)
        #expect(replayed.stdout.contains("disagree on the shards of shop/voyado (1, 8)"), "\(replayed.stdout)")

        let dropped = try Self.outbox(["drop"], database: 9)
        #expect(dropped.status == 0, "\(dropped.stdout)\(dropped.stderr)")
        #expect(dropped.stdout.hasSuffix("2 dropped\n"), "\(dropped.stdout)")
        #expect(try await Self.length(client, Self.shop.dead) == 0)
    }
}

/// A client of the shared test Redis on another database.
enum RedisClientFactory {
    static func make(database: Int) -> RedisClient {
        RedisClient(configuration: RedisServer.shared.configuration(database: database))
    }
}
