#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Structured logging as one JSON object per line.
///
/// - Important: callers pass already-redacted values. Push tokens, session tokens and keys never
///   reach a logger in full: use `Redact` (in the PushWarden module) first.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case debug = 0, info, warning, error

        public var name: String {
            switch self {
            case .debug: return "debug"
            case .info: return "info"
            case .warning: return "warning"
            case .error: return "error"
            }
        }

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
            self = level
        }

        public static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    public let label: String
    public let minimumLevel: Level
    private let sink: LogSink
    /// Shared by every logger derived with `with(label:)`: the bound on lines outside traffic causes.
    public let limiter: LogLimiter

    public init(label: String, level: Level = .info, sink: LogSink = .standardError, limiter: LogLimiter = LogLimiter()) {
        self.label = label
        self.minimumLevel = level
        self.sink = sink
        self.limiter = limiter
    }

    public func isEnabled(_ level: Level) -> Bool { level >= minimumLevel }

    public func with(label: String) -> Logger { Logger(label: label, level: minimumLevel, sink: sink, limiter: limiter) }

    /// A line that a client (or a failing provider) can cause once per request: written at most
    /// once per `limiter` window for each `key` (say the app and the reason) with this logger's
    /// label and message; the next line written says how many were left out (`suppressed`).
    public func bounded(_ level: Level, _ message: String, key: String, _ fields: @autoclosure () -> [(String, String)] = []) {
        guard level >= minimumLevel else { return }
        guard let suppressed = limiter.admit(label + "\u{0}" + message + "\u{0}" + key) else { return }
        if suppressed == 0 {
            log(level, message, fields())
        } else {
            log(level, message, fields() + [("suppressed", String(suppressed))])
        }
    }

    /// Fields are built only when the level is enabled: hashing a token for a debug line must
    /// cost nothing when debug is off.
    public func log(_ level: Level, _ message: String, _ fields: @autoclosure () -> [(String, String)] = []) {
        guard level >= minimumLevel else { return }
        var members: [JSONMember] = [
            JSONMember("ts", .string(Self.timestamp())),
            JSONMember("level", .string(level.name)),
            JSONMember("logger", .string(label)),
            JSONMember("msg", .string(Self.visible(message))),
        ]
        for (key, value) in fields() { members.append(JSONMember(key, .string(Self.visible(value)))) }
        var line = JSONValue.object(JSONObject(members)).encoded()
        line.append(0x0A)
        sink.write(line)
    }

    public func debug(_ message: String, _ fields: @autoclosure () -> [(String, String)] = []) { log(.debug, message, fields()) }
    public func info(_ message: String, _ fields: @autoclosure () -> [(String, String)] = []) { log(.info, message, fields()) }
    public func warning(_ message: String, _ fields: @autoclosure () -> [(String, String)] = []) { log(.warning, message, fields()) }
    public func error(_ message: String, _ fields: @autoclosure () -> [(String, String)] = []) { log(.error, message, fields()) }

    /// `text` with each non-ASCII character `TextRules` forbids (C1 and bidirectional controls,
    /// zero-width and other format characters, line separators) as `<U+202E>`: JSON would carry
    /// them raw, and a terminal or log viewer would act on them. ASCII controls are JSON escapes.
    static func visible(_ text: String) -> String {
        guard !text.utf8.allSatisfy({ $0 < 0x80 }), text.unicodeScalars.contains(where: { $0.value >= 0x80 && TextRules.isForbidden($0) }) else {
            return text
        }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if scalar.value >= 0x80 && TextRules.isForbidden(scalar) {
                out.append(contentsOf: ("<" + TextRules.codePoint(scalar) + ">").unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// RFC 3339 UTC with milliseconds.
    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return RFC3339.utc(epochMillis: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec / 1_000_000))
    }
}

/// Where log lines go. Tests use `.memory` to assert that nothing sensitive was logged.
public final class LogSink: Sendable {
    private enum Target { case standardError, memory }
    private let target: Target
    private let captured = Mutex<[UInt8]>([])

    private init(target: Target) { self.target = target }

    public static let standardError = LogSink(target: .standardError)
    public static func memory() -> LogSink { LogSink(target: .memory) }

    func write(_ line: [UInt8]) {
        switch target {
        case .standardError:
            // One write(2) per line: lines from concurrent threads never interleave mid-line.
            line.withUnsafeBufferPointer { buffer in
                var offset = 0
                while offset < buffer.count {
                    let n = Glibc.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                    if n <= 0 { break }
                    offset += n
                }
            }
        case .memory:
            captured.withLock { $0.append(contentsOf: line) }
        }
    }

    /// Everything written so far (memory sinks only).
    public var text: String { captured.withLock { String(decoding: $0, as: UTF8.self) } }
}
