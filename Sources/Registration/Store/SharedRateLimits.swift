import Loops

/// Per-contact request limits kept where every replica sees them (GCRA in the Redis store), so
/// a limit holds across processes. Without one, the edge counts in its own process.
package protocol SharedRateLimits: Sendable {
    /// Calls `completion` on `loop`'s thread with 0 when a request under `key` is admitted at
    /// `requests` per `periodMillis` (a burst of `requests`, then one per period/requests), else
    /// with the milliseconds until one would be. Call on `loop`.
    func admit(_ key: String, requests: Int, periodMillis: UInt64, on loop: EventLoop,
               completion: @escaping (Result<Int64, StoreError>) -> Void)
}
