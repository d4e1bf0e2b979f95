import Loops
import PWCore
import RedisClient
import Registration

/// The per-contact rate-limit counters every replica on this Redis shares: plain `SET NX PX` and
/// `INCRBY` (a fraction of a script's cost), one counter per contact, route and window under the
/// contact's hash tag, so a cluster routes each to the contact's node.
extension RedisStore: SharedRateLimits {
    package func add(_ counts: [RateWindowCount], on loop: EventLoop, completion: @escaping (Result<[Int64], StoreError>) -> Void) {
        guard !counts.isEmpty else {
            completion(.success([]))
            return
        }
        let batch = RateCountBatch(count: counts.count, completion: completion)
        for (index, count) in counts.enumerated() {
            // Made with its expiry first, so that no counter outlives its windows; the INCRBY that
            // follows on the same connection keeps that expiry. Encoded from the strings' storage.
            if let ttl = count.ttlMillis {
                client.send(["SET", count.key, "0", "PX", String(max(ttl, 1)), "NX"], on: loop) { _ in }
            }
            client.send(["INCRBY", count.key, String(count.count)], on: loop) { result in
                switch result {
                case .success(.integer(let total)): batch.deliver(index, .success(total))
                case .success(.error(let message)): batch.deliver(index, .failure(StoreError(replied: message)))
                case .success: batch.deliver(index, .failure(StoreError(.unexpectedReply, "unexpected INCRBY reply")))
                case .failure(let error): batch.deliver(index, .failure(StoreError(error)))
                }
            }
        }
    }

}

/// The totals of one `add`, joined on its loop: the first failure fails the whole batch.
private final class RateCountBatch {
    private var totals: [Int64]
    private var remaining: Int
    private var failure: StoreError?
    private let completion: (Result<[Int64], StoreError>) -> Void

    init(count: Int, completion: @escaping (Result<[Int64], StoreError>) -> Void) {
        totals = Array(repeating: 0, count: count)
        remaining = count
        self.completion = completion
    }

    func deliver(_ index: Int, _ result: Result<Int64, StoreError>) {
        switch result {
        case .success(let total): totals[index] = total
        case .failure(let error): failure = failure ?? error
        }
        remaining -= 1
        guard remaining == 0 else { return }
        completion(failure.map { .failure($0) } ?? .success(totals))
    }
}
