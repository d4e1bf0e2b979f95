import Foundation
import PWCore
@testable import PushWarden
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// Writes that failed after an upstream took a change wait and are retried until the store
/// answers; the newest write for a key wins; the memory they take is bounded.
@Suite struct PendingWritesTests {
    /// A store write that fails its first `failures` attempts, then records what it wrote.
    final class FlakyWrite: Sendable {
        let failuresLeft: Mutex<Int>
        let written = Mutex<[String]>([])
        init(failures: Int) { failuresLeft = Mutex(failures) }

        func write(_ value: String) -> PendingWrites.Write {
            { [self] () async throws(StoreError) in
                let fail = failuresLeft.withLock { left -> Bool in
                    guard left > 0 else { return false }
                    left -= 1
                    return true
                }
                if fail { throw StoreError(.unavailable, "down") }
                written.withLock { $0.append(value) }
            }
        }
    }

    static let fast = PendingWrites.Limits(capacity: 3, maxAgeMillis: 60_000, firstBackoffMillis: 1, maxBackoffMillis: 5)
    static let down = StoreError(.unavailable, "down")

    static func settle(_ pending: PendingWrites) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while pending.count > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
    }

    @Test func aFailedWriteIsRetriedUntilTheStoreAnswers() async throws {
        let metrics = Metrics(), logs = LogSink.memory()
        let pending = PendingWrites(metrics: metrics, logger: Logger(label: "t", sink: logs), limits: Self.fast)
        let store = FlakyWrite(failures: 5)
        pending.add(.dedupe, key: "k", error: Self.down, store.write("f1"))
        try await Self.settle(pending)
        #expect(pending.count == 0)
        #expect(store.written.withLock { $0 } == ["f1"])
        let rendered = metrics.render()
        #expect(rendered.contains(#"pushwarden_store_writes_retried_total{kind="dedupe",result="deferred"} 1"#))
        #expect(rendered.contains(#"pushwarden_store_writes_retried_total{kind="dedupe",result="stored"} 1"#))
        #expect(logs.text.contains("retrying until the store answers"))
    }

    @Test func theNewestWriteForAKeyWins() async throws {
        let pending = PendingWrites(metrics: Metrics(), logger: Logger(label: "t", sink: .memory()), limits: Self.fast)
        let store = FlakyWrite(failures: 3)
        pending.add(.dedupe, key: "k", error: Self.down, store.write("old"))
        pending.add(.dedupe, key: "k", error: Self.down, store.write("new"))
        #expect(pending.count == 1)
        try await Self.settle(pending)
        #expect(store.written.withLock { $0 } == ["new"])
        // A write that went through on its own cancels the one waiting for its key.
        let other = FlakyWrite(failures: 1_000)
        pending.add(.identity, key: "j", error: Self.down, other.write("stale"))
        pending.cancel("j")
        #expect(pending.count == 0)
    }

    @Test func pastItsCapacityANewWriteIsDroppedCountedAndLogged() async throws {
        let metrics = Metrics(), logs = LogSink.memory()
        let pending = PendingWrites(metrics: metrics, logger: Logger(label: "t", sink: logs),
                                    limits: PendingWrites.Limits(capacity: 2, maxAgeMillis: 60_000, firstBackoffMillis: 1_000, maxBackoffMillis: 1_000))
        let store = FlakyWrite(failures: 1_000)
        for key in ["a", "b", "c"] { pending.add(.inventory, key: key, error: Self.down, store.write(key)) }
        #expect(pending.count == 2)
        #expect(metrics.render().contains(#"pushwarden_store_writes_retried_total{kind="inventory",result="dropped"} 1"#))
        #expect(logs.text.contains("store write dropped"))
        pending.cancel("a")
        pending.cancel("b")
    }

    @Test func aWriteOlderThanItsMaxAgeIsDropped() async throws {
        let metrics = Metrics()
        let pending = PendingWrites(metrics: metrics, logger: Logger(label: "t", sink: .memory()),
                                    limits: PendingWrites.Limits(capacity: 10, maxAgeMillis: 50, firstBackoffMillis: 1, maxBackoffMillis: 5))
        let store = FlakyWrite(failures: 1_000_000)
        pending.add(.identity, key: "k", error: Self.down, store.write("v"))
        try await Self.settle(pending)
        #expect(pending.count == 0)
        #expect(store.written.withLock { $0 }.isEmpty)
        #expect(metrics.render().contains(#"pushwarden_store_writes_retried_total{kind="identity",result="dropped"} 1"#))
    }
}
