import Foundation
@testable import PushWarden
import PushWardenTestSupport
import RedisClient
@testable import RedisStores
@testable import Registration
import Testing

/// Many commands sent concurrently come back as many replies, each in its command's place. The
/// release build once returned one reply in 257 here (a child task's index was never written) and
/// trapped the expiry sweeper; this suite runs in the release configuration too.
@Suite struct ConcurrentSendTests {
    @Test(arguments: [1, 31, 32, 33, 257, 1_000])
    func everyReplyInItsCommandsPlace(_ count: Int) async throws {
        let client = RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url))
        let store = RedisStore(client: client)
        let prefix = "test:concurrent:\(UUID().uuidString):"
        for index in 0..<count { #expect(try await client.send(["SET", prefix + String(index), "value-\(index)"]) == .status("OK")) }
        let replies = try await store.sendConcurrently((0..<count).map { ["GET", prefix + String($0)] })
        #expect(replies.count == count)
        #expect(replies.map(\.string) == (0..<count).map { "value-\($0)" })
    }

    @Test func oneRefusedCommandFailsTheBatch() async throws {
        let store = RedisStore(client: RedisClient(configuration: try RedisConfiguration(url: RedisServer.shared.url)))
        var commands = (0..<100).map { ["GET", "test:concurrent:missing:\($0)"] }
        commands[57] = ["NOSUCHCOMMAND"]
        await #expect(throws: StoreError.self) { _ = try await store.sendConcurrently(commands) }
    }
}
