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

/// RFC 3339 `date-time` in UTC with milliseconds (`2026-07-02T10:20:42.456Z`): the one form in
/// which PushWarden writes an instant (log lines, the server-to-server API's `first_seen`).
public enum RFC3339 {
    /// The instants RFC 3339 can write: `date-fullyear` is four digits, years 0000 to 9999.
    public static let representableMillis: ClosedRange<Int64> = -62_167_219_200_000...253_402_300_799_999

    /// The instant written; one outside `representableMillis` (a time read back from a store
    /// that another writer reached) is clamped to the nearest end, never a year of more than four
    /// digits or a negative one.
    public static func utc(epochMillis: Int64) -> String {
        let clamped = min(max(epochMillis, representableMillis.lowerBound), representableMillis.upperBound)
        let (seconds, millis) = clamped.quotientAndRemainder(dividingBy: 1000)
        // Floor division, so that an instant before 1970 keeps a millisecond field in 0...999.
        let wholeSeconds = millis < 0 ? seconds - 1 : seconds
        let fraction = millis < 0 ? millis + 1000 : millis
        var time = time_t(wholeSeconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2))T"
            + "\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2)).\(pad(Int(fraction), 3))Z"
    }
}
