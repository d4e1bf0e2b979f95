#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// CLOCK_MONOTONIC, for deadlines and windows that must not jump with the wall clock.
public enum MonotonicClock {
    @inline(__always)
    public static func nowNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    public static func nowMillis() -> UInt64 { nowNanos() / 1_000_000 }
}
