@testable import PushWarden
import Synchronization
import Testing

/// When a dedupe hit refreshes an installation's last-seen time: at most once per interval, with
/// a monotonic clock that two loops read before taking the table's lock, so one may hand in a
/// time earlier than the one the other just wrote (the race that trapped `touchDue` in CI).
@Suite struct TouchMemoryTests {
    /// A monotonic clock the test sets by hand.
    final class HandClock: Sendable {
        private let nanos = Mutex<UInt64>(0)
        func set(millis: UInt64) { nanos.withLock { $0 = millis * 1_000_000 } }
        func read() -> UInt64 { nanos.withLock { $0 } }
    }

    static func memory(_ clock: HandClock, capacity: Int = TouchMemory.defaultCapacity) -> TouchMemory {
        TouchMemory(capacity: capacity, now: { clock.read() })
    }

    @Test func aHitRefreshesOncePerInterval() {
        let clock = HandClock()
        let memory = Self.memory(clock)
        clock.set(millis: 10_000)
        #expect(memory.due("fp-a", intervalMillis: 1_000))
        #expect(!memory.due("fp-a", intervalMillis: 1_000))
        clock.set(millis: 10_999)
        #expect(!memory.due("fp-a", intervalMillis: 1_000))
        clock.set(millis: 11_000)
        #expect(memory.due("fp-a", intervalMillis: 1_000))
    }

    @Test func aTimeEarlierThanTheLastWrittenIsNotDueAndDoesNotTrap() {
        let clock = HandClock()
        let memory = Self.memory(clock)
        clock.set(millis: 50_000)
        #expect(memory.due("fp", intervalMillis: 1_000))
        // A loop that read the clock just before the write above comes in second.
        clock.set(millis: 49_999)
        #expect(!memory.due("fp", intervalMillis: 1_000))
        clock.set(millis: 0)
        #expect(!memory.due("fp", intervalMillis: 1_000))
        // The write that won still counts: due again one interval after it, not after the late read.
        clock.set(millis: 51_000)
        #expect(memory.due("fp", intervalMillis: 1_000))
    }

    @Test func aForwardedRegistrationCountsAsWrittenEvenWhenItsTimeIsEarlier() {
        let clock = HandClock()
        let memory = Self.memory(clock)
        clock.set(millis: 20_000)
        #expect(memory.due("fp", intervalMillis: 1_000))
        clock.set(millis: 19_500)
        memory.written("fp")
        clock.set(millis: 20_400)
        #expect(!memory.due("fp", intervalMillis: 1_000))
        clock.set(millis: 20_500)
        #expect(memory.due("fp", intervalMillis: 1_000))
    }

    /// Full, it forgets every installation at once: each writes once more, none is held back.
    @Test func aFullMemoryForgetsAllAndEachWritesOnceMore() {
        let clock = HandClock()
        let memory = Self.memory(clock, capacity: 2)
        clock.set(millis: 1_000)
        #expect(memory.due("fp-a", intervalMillis: 60_000))
        #expect(memory.due("fp-b", intervalMillis: 60_000))
        #expect(!memory.due("fp-a", intervalMillis: 60_000))
        // A third installation finds it full: the memory starts over with it.
        #expect(memory.due("fp-c", intervalMillis: 60_000))
        #expect(!memory.due("fp-c", intervalMillis: 60_000))
        #expect(memory.due("fp-a", intervalMillis: 60_000))
    }
}
