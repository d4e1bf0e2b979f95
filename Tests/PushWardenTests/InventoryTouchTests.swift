@testable import PushWarden
import Synchronization
import Testing

/// When a dedupe hit refreshes an installation's last-seen time: at most once per interval, with
/// a monotonic clock that two loops read before taking the memory's lock, so one may hand in a
/// time earlier than the one the other just wrote (the race that trapped `touchDue` in CI).
@Suite struct InventoryTouchTests {
    /// A monotonic clock the test sets by hand.
    final class HandClock: Sendable {
        private let nanos = Mutex<UInt64>(0)
        func set(millis: UInt64) { nanos.withLock { $0 = millis * 1_000_000 } }
        func read() -> UInt64 { nanos.withLock { $0 } }
    }

    static func inventory(_ clock: HandClock) -> Inventory {
        Inventory(store: MemoryInventoryStore(), monotonicNanos: { clock.read() })
    }

    @Test func aHitRefreshesOncePerInterval() {
        let clock = HandClock()
        let inventory = Self.inventory(clock)
        clock.set(millis: 10_000)
        #expect(inventory.touchDue("fp-a", intervalMillis: 1_000))
        #expect(!inventory.touchDue("fp-a", intervalMillis: 1_000))
        // Another installation has its own time.
        #expect(inventory.touchDue("fp-b", intervalMillis: 1_000))
        clock.set(millis: 10_999)
        #expect(!inventory.touchDue("fp-a", intervalMillis: 1_000))
        clock.set(millis: 11_000)
        #expect(inventory.touchDue("fp-a", intervalMillis: 1_000))
    }

    @Test func aTimeEarlierThanTheLastWrittenIsNotDueAndDoesNotTrap() {
        let clock = HandClock()
        let inventory = Self.inventory(clock)
        clock.set(millis: 50_000)
        #expect(inventory.touchDue("fp", intervalMillis: 1_000))
        // A loop that read the clock just before the write above comes in second.
        clock.set(millis: 49_999)
        #expect(!inventory.touchDue("fp", intervalMillis: 1_000))
        clock.set(millis: 0)
        #expect(!inventory.touchDue("fp", intervalMillis: 1_000))
        // The write that won still counts: due again one interval after it, not after the late read.
        clock.set(millis: 51_000)
        #expect(inventory.touchDue("fp", intervalMillis: 1_000))
    }

    @Test func aForwardedRegistrationCountsAsFreshEvenWhenItsTimeIsEarlier() {
        let clock = HandClock()
        let inventory = Self.inventory(clock)
        clock.set(millis: 20_000)
        #expect(inventory.touchDue("fp", intervalMillis: 1_000))
        clock.set(millis: 19_500)
        inventory.touched("fp")
        clock.set(millis: 20_400)
        #expect(!inventory.touchDue("fp", intervalMillis: 1_000))
        clock.set(millis: 20_500)
        #expect(inventory.touchDue("fp", intervalMillis: 1_000))
    }
}
