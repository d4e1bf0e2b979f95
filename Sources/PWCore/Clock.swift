#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wall-clock time as a seam, so that token expiry and cache TTLs can be tested without sleeping.
public protocol WallClock: Sendable {
    /// Seconds since the Unix epoch.
    func now() -> Double
}

public struct SystemClock: WallClock {
    public init() {}
    public func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

extension SystemClock {
    /// Milliseconds since the Unix epoch: what outlives a process (stream ids, `queue.max_age`).
    public static func epochMillis() -> Int { Int(SystemClock().now() * 1000) }
}
