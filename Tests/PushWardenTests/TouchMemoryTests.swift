@testable import PushWarden
@testable import RedisStores
@testable import Registration
import Synchronization
import Testing

/// When a dedupe hit refreshes an installation's last-seen time: at most once per interval, with
/// a monotonic clock that two loops read before taking the memory's lock, so one may hand in a
/// time earlier than the one the other just wrote (the race that trapped `touchDue` in CI).
///
/// Each test is a timeline: the clock is set, then hits ask whether a write is due, in order.
@Suite struct TouchMemoryTests {
    enum Step {
        /// The monotonic clock reads this many milliseconds from now on.
        case at(UInt64)
        /// A dedupe hit of the installation: whether its last-seen write is due.
        case due(String, Bool)
        /// A forward just wrote the installation's record.
        case written(String)
    }

    /// Plays `steps` against a memory of `capacity` entries whose hits use `intervalMillis`; a
    /// wrong answer is reported with its step's index.
    static func play(_ steps: [Step], intervalMillis: Int, capacity: Int = TouchMemory.defaultCapacity,
                     sourceLocation: SourceLocation = #_sourceLocation) {
        let clock = Mutex<UInt64>(0)
        let memory = TouchMemory(capacity: capacity, now: { clock.withLock { $0 } })
        for (index, step) in steps.enumerated() {
            switch step {
            case .at(let millis):
                clock.withLock { $0 = millis * 1_000_000 }
            case .due(let key, let expected):
                let due = memory.due(key, intervalMillis: intervalMillis)
                #expect(due == expected, "step \(index): \(key) due", sourceLocation: sourceLocation)
            case .written(let key):
                memory.written(key)
            }
        }
    }

    @Test func aHitRefreshesOncePerInterval() {
        Self.play([.at(10_000), .due("fp", true), .due("fp", false),
                   .at(10_999), .due("fp", false),
                   .at(11_000), .due("fp", true)], intervalMillis: 1_000)
    }

    /// A loop that read the clock just before another's write comes in second: not due, no trap,
    /// and the write that won still counts (due one interval after it, not after the late read).
    @Test func aTimeEarlierThanTheLastWrittenIsNotDueAndDoesNotTrap() {
        Self.play([.at(50_000), .due("fp", true),
                   .at(49_999), .due("fp", false),
                   .at(0), .due("fp", false),
                   .at(51_000), .due("fp", true)], intervalMillis: 1_000)
    }

    @Test func aForwardedRegistrationCountsAsWrittenEvenWhenItsTimeIsEarlier() {
        Self.play([.at(20_000), .due("fp", true),
                   .at(19_500), .written("fp"),
                   .at(20_400), .due("fp", false),
                   .at(20_500), .due("fp", true)], intervalMillis: 1_000)
    }

    /// Full, it forgets every installation at once: each writes once more, none is held back.
    @Test func aFullMemoryForgetsAllAndEachWritesOnceMore() {
        Self.play([.at(1_000), .due("fp-a", true), .due("fp-b", true), .due("fp-a", false),
                   // A third installation finds it full: the memory starts over with it.
                   .due("fp-c", true), .due("fp-c", false), .due("fp-a", true)],
                  intervalMillis: 60_000, capacity: 2)
    }
}
