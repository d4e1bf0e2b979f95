// scripts/sanitize.sh runs this before the ThreadSanitizer suites: two threads add to one
// counter 200,000 times each. "locked": every addition under one Synchronization.Mutex, so no
// update is lost, and any report is the lock's contended hand-over that TSan cannot see (see
// tsan-mutex.c). "unlocked": no lock at all, so TSan must report, with tsan-mutex.c preloaded too.
import Glibc
import Synchronization

final class Counter: @unchecked Sendable { var value = 0 }
let counter = Counter()
let lock = Mutex(())
let rounds = 200_000
let locked = CommandLine.arguments.dropFirst().first != "unlocked"

func add() {
    for _ in 0..<rounds {
        if locked { lock.withLock { _ in counter.value += 1 } } else { counter.value += 1 }
    }
}

var threads: [pthread_t] = []
for _ in 0..<2 {
    var thread = pthread_t()
    guard pthread_create(&thread, nil, { _ in add(); return nil }, nil) == 0 else { fatalError("pthread_create") }
    threads.append(thread)
}
for thread in threads { pthread_join(thread, nil) }
print("\(locked ? "locked" : "unlocked"): \(counter.value) of \(2 * rounds)")
