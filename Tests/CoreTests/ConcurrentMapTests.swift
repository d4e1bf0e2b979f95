import PWCore
import Synchronization
import Testing

/// `mapConcurrently` returns every output in its input's place, whatever order the work finishes
/// in, with at most `width` in flight. This suite runs in the release configuration too: the
/// shape it replaced lost its indexes under -O.
@Suite struct ConcurrentMapTests {
    @Test(arguments: [0, 1, 2, 31, 32, 33, 257, 1_000])
    func everyOutputInItsInputsPlace(_ count: Int) async {
        let inputs = Array(0..<count)
        let outputs = await mapConcurrently(inputs, width: 32) { value -> Result<String, Failure> in
            // Finish out of order: later inputs often overtake earlier ones.
            if value % 3 == 0 { await Task.yield() }
            return await capture { () async throws(Failure) in
                if value % 7 == 6 { throw Failure(value: value) }
                return "v\(value)"
            }
        }
        #expect(outputs.count == count)
        for (value, output) in zip(inputs, outputs) {
            switch output {
            case .success(let text): #expect(value % 7 != 6 && text == "v\(value)")
            case .failure(let failure): #expect(value % 7 == 6 && failure.value == value)
            }
        }
    }

    @Test func neverMoreThanItsWidthInFlight() async {
        let inFlight = Mutex((now: 0, most: 0))
        let outputs = await mapConcurrently(Array(0..<200), width: 5) { value -> Int in
            inFlight.withLock { $0.now += 1; $0.most = max($0.most, $0.now) }
            try? await Task.sleep(for: .milliseconds(1))
            inFlight.withLock { $0.now -= 1 }
            return value * 2
        }
        #expect(outputs == (0..<200).map { $0 * 2 })
        #expect(inFlight.withLock { $0.most } <= 5)
        #expect(inFlight.withLock { $0.most } > 1)
    }

    struct Failure: Error, Equatable { let value: Int }
}
