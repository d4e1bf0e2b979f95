import Loops

/// Where every replica's rate-limit counts meet (the Redis store): one counter per contact, route
/// and window, which each replica adds what it admitted to and reads the others' from. Without
/// one, each process counts alone.
package protocol SharedRateLimits: Sendable {
    /// Adds each count to its window's counter (made with its `ttlMillis` when it has one) and calls
    /// `completion` on `loop`'s thread with every counter's total after the addition, in order:
    /// all in one write on the loop's own connection. Call on `loop`.
    func add(_ counts: [RateWindowCount], on loop: EventLoop, completion: @escaping (Result<[Int64], StoreError>) -> Void)
}

/// Requests one replica admitted under one counter since it last told the store.
package struct RateWindowCount: Sendable {
    /// The counter's key: the contact's rate-limit key for the route, then the window's index.
    package let key: String
    package let count: Int64
    /// How long the counter outlives its first addition: two windows, so that it is still there
    /// while it is the previous window. Nil once this process has made it: it need not ask again.
    package let ttlMillis: Int64?

    package init(key: String, count: Int64, ttlMillis: Int64?) {
        self.key = key
        self.count = count
        self.ttlMillis = ttlMillis
    }
}
