import PWCore
import PWCrypto
import Synchronization

/// Ids unique among every process sharing the store (a random per-process prefix) and within
/// this one (a counter), without a random draw per id: request ids, lock owners, consumer names.
package enum ProcessUnique {
    private static let prefix = Base64URL.encode(SecureRandom.bytes(9))
    private static let counter = Atomic<UInt64>(0)

    static func next() -> String {
        prefix + "-" + String(counter.wrappingAdd(1, ordering: .relaxed).newValue, radix: 36)
    }
}
