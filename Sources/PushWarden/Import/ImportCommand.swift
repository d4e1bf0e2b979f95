#if canImport(Glibc)
import Glibc
#endif
import ClientAPI
import HTTPClient
import PWCore
import PWPolicy
import Providers
import RedisClient
import RedisStores
import Registration

/// `pushwarden import --policy FILE --redis URL --app A [--rate N/s] [--refused PATH] FILE`: the
/// installations an app backend already holds from a direct integration, one JSON object per line,
/// validated as the client API validates a registration (the same error codes), queued at the app's
/// upstreams through the outbox at a bounded rate and kept in the inventory as a registration
/// keeps them. The running sidecars' outbox workers make the upstream calls.
///
/// Run again, lines already done cost no upstream call: a registration the upstream holds with the
/// same content is `unchanged`, one still waiting in the outbox is not queued twice. The file is
/// read as a stream, a bounded number of lines in flight.
public enum ImportCommand {
    public struct Options: Sendable {
        public var file: String
        public var app: String
        /// Lines started per second at most.
        public var ratePerSecond: Double
        /// Where refused lines go (default `FILE.refused.ndjson`).
        public var refusedPath: String?
        /// A bar redrawn in place (a terminal), else a line every `progressEverySeconds`.
        public var terminal: Bool
        public var progressEverySeconds: Double

        public init(file: String, app: String, ratePerSecond: Double = 100, refusedPath: String? = nil, terminal: Bool = false,
                    progressEverySeconds: Double = 5) {
            self.file = file
            self.app = app
            self.ratePerSecond = ratePerSecond
            self.refusedPath = refusedPath
            self.terminal = terminal
            self.progressEverySeconds = progressEverySeconds
        }
    }

    /// What a run did, line by line: exit 1 when anything was refused or failed.
    public struct Report: Sendable, Equatable {
        public var lines = 0
        /// Queued at one upstream at least.
        public var queued = 0
        /// Every upstream holds it already, or it already waits in the outbox everywhere it goes.
        public var unchanged = 0
        /// Refused as a client registration would be, or by the primary's own rules.
        public var refused = 0
        /// The outbox (Redis) did not take it: run the import again.
        public var failed = 0
        public var refusedPath = ""
        public var elapsedSeconds = 0.0
    }

    /// Lines registering at once: enough to hide Redis round trips, few enough to bound memory.
    static let window = 64
    /// How much of an overlong line a refusal echoes.
    static let echoBytes = 256
    /// A paced import wakes once per tick and starts every line due by then: fewer, larger
    /// batches cost the import, Redis and the sidecars' workers less per line.
    static let tickNanos: UInt64 = 100_000_000

    /// When the `line`th line (from 1) is due: `(line - 1) / rate` seconds after `start`.
    static func pacedStart(line: Int, rate: Double, start: UInt64) -> UInt64 {
        let offset = Double(max(line - 1, 0)) / rate * 1e9
        return offset < 1e18 ? start + UInt64(offset) : UInt64.max
    }

    /// The first tick boundary (a whole number of ticks after `start`) at or after `due`.
    static func tickAfter(_ due: UInt64, start: UInt64) -> UInt64 {
        guard due > start else { return start }
        let ticks = (due - start) / tickNanos + ((due - start) % tickNanos == 0 ? 0 : 1)
        let (span, spanOverflow) = ticks.multipliedReportingOverflow(by: tickNanos)
        let (boundary, overflow) = start.addingReportingOverflow(span)
        return spanOverflow || overflow ? due : boundary
    }

    /// - Parameters:
    ///   - write: the summary lines (stdout).
    ///   - progress: progress output (stderr); never a token.
    /// - Throws: a `ConfigurationError` when the run cannot start: no such app, a store key or
    ///   upstream that cannot be built, an unreadable file, or a file that is not NDJSON.
    public static func run(_ options: Options, policy: Policy, redisURL: String, secrets: some SecretResolving = SecretResolver(),
                           logger: Logger, write: (String) -> Void, progress: (String) -> Void) async throws(ConfigurationError) -> Report {
        guard let appPolicy = policy.apps.first(where: { TextRules.bytesEqual($0.id, options.app) }) else {
            throw ConfigurationError("the policy has no app \(options.app)")
        }
        if let primary = appPolicy.upstreams.first(where: { $0.role == .primary }), primary.provider.traits.needsCallerCredential {
            throw ConfigurationError("app \(options.app): its primary upstream \(primary.name) takes each user's own credential, "
                                     + "which an import does not have: its installations cannot be imported")
        }
        for upstream in appPolicy.upstreams where upstream.provider.traits.needsCallerCredential {
            write("upstream \(upstream.name) takes each user's own credential: skipped (it learns installations when their apps register)")
        }
        var reader = try LineReader(path: options.file, maxLine: appPolicy.client.maxBody)
        defer { reader.close() }
        try reader.checkNDJSON()

        let refusedPath = options.refusedPath ?? options.file + ".refused.ndjson"
        // Refused lines hold tokens: readable by the operator alone.
        let refusedFD = open(refusedPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard refusedFD >= 0, let refusedFile = fdopen(refusedFD, "w") else {
            if refusedFD >= 0 { Glibc.close(refusedFD) }
            throw ConfigurationError("cannot write the refused lines to \(refusedPath): \(String(cString: strerror(errno)))")
        }
        defer { fclose(refusedFile) }

        let runtime = try await CommandRuntime(policy: policy, app: appPolicy, redisURL: redisURL, secrets: secrets, logger: logger)
        defer { runtime.close() }
        let (app, registrar, outbox, pending) = (runtime.app, runtime.registrar, runtime.outbox, runtime.pending)
        let run = "import-" + RequestID.from(HTTPHeaders())

        var report = Report()
        report.refusedPath = refusedPath
        let start = MonotonicClock.nowNanos()
        var lastProgress = start
        let rate = max(options.ratePerSecond, 0.001)
        func refuse(_ line: Int, _ code: String, _ message: String, field: String?, input: [UInt8]) {
            var members = [JSONMember("line", .number(String(line))), JSONMember("code", .string(code))]
            if let field { members.append(JSONMember("field", .string(field))) }
            members.append(JSONMember("message", .string(message)))
            members.append(JSONMember("input", .string(String(decoding: input, as: UTF8.self))))
            var out = JSONValue.object(JSONObject(members)).encoded()
            out.append(UInt8(ascii: "\n"))
            _ = out.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, refusedFile) }
        }
        func account(_ done: LineDone) {
            switch done.result {
            case .queued: report.queued += 1
            case .unchanged: report.unchanged += 1
            case .failed: report.failed += 1
            case .refused: report.refused += 1
            }
            // A failed line is listed beside the refused ones: the file is what a rerun needs.
            if let refusal = done.refusal { refuse(done.line, refusal.code, refusal.message, field: refusal.field, input: done.input) }
            let now = MonotonicClock.nowNanos()
            let due = options.terminal ? 200_000_000 : UInt64(min(max(options.progressEverySeconds, 0), 86_400) * 1e9)
            if now - lastProgress >= due {
                lastProgress = now
                progress(progressText(report, fraction: reader.fraction, since: start, bar: options.terminal))
            }
        }

        await withTaskGroup(of: LineDone.self) { group in
            var inFlight = 0
            while true {
                let next: LineReader.Line?
                do throws(ConfigurationError) {
                    next = try reader.next()
                } catch {
                    write("reading \(options.file) stopped: \(error.description)")
                    break
                }
                guard let next else { break }
                if next.isBlank { continue }
                report.lines += 1
                let number = next.number
                if next.tooLong {
                    report.refused += 1
                    refuse(number, ErrorCode.payloadTooLarge.rawValue, "line exceeds \(appPolicy.client.maxBody) bytes (client.max_body)",
                           field: nil, input: Array(next.bytes.prefix(echoBytes)))
                    continue
                }
                let read: (contactID: String, installation: Installation)
                do throws(ContractError) {
                    read = try ImportLine.read(next.bytes, policy: appPolicy.client)
                } catch {
                    report.refused += 1
                    refuse(number, error.code.rawValue, error.message, field: error.field, input: next.bytes)
                    continue
                }
                // Paced: line n starts no sooner than n / rate seconds after the first, and lines
                // not yet due wait for the next tick together (one wake-up, shared Redis writes).
                let due = pacedStart(line: report.lines, rate: rate, start: start)
                let now = MonotonicClock.nowNanos()
                if due > now { try? await Task.sleep(nanoseconds: tickAfter(due, start: start) - now) }
                if inFlight >= window, let done = await group.next() {
                    inFlight -= 1
                    account(done)
                }
                let origin = Registrar.Origin(app: app, context: CallContext(contactID: read.contactID), requestID: run + "-\(number)", loop: nil)
                let installation = read.installation
                let input = next.bytes
                group.addTask { await register(installation, line: number, input: input, registrar: registrar, origin: origin) }
                inFlight += 1
            }
            while let done = await group.next() { account(done) }
        }
        if options.terminal { progress(progressText(report, fraction: 1, since: start, bar: true) + "\n") }
        fflush(refusedFile)
        if await !outbox.webhooksSettled(withinMillis: 10_000) {
            logger.error("webhook events still waiting at exit: they are lost")
        }
        if await !pending.flushed(withinMillis: 10_000) {
            logger.error("inventory writes still waiting at exit: run the import again", [("writes", String(pending.count))])
        }
        report.elapsedSeconds = Double(MonotonicClock.nowNanos() - start) / 1e9
        write(summary(report, file: options.file))
        return report
    }

    /// One line's end, as the import loop counts it.
    struct LineDone: Sendable {
        enum Result: Sendable { case queued, unchanged, refused, failed }
        let line: Int
        let result: Result
        let refusal: (code: String, message: String, field: String?)?
        /// The line as given, kept only when it is refused or failed.
        let input: [UInt8]
    }

    private static func register(_ installation: Installation, line: Int, input: [UInt8], registrar: Registrar,
                                 origin: Registrar.Origin) async -> LineDone {
        let outcomes: [(String, UpstreamOutcome)]
        do throws(ContractError) {
            outcomes = try await registrar.importRegistration(installation, from: origin)
        } catch {
            return LineDone(line: line, result: .refused, refusal: (error.code.rawValue, error.message, error.field), input: input)
        }
        if outcomes.contains(where: { if case .failed(.unavailable) = $0.1 { return true } else { return false } }) {
            return LineDone(line: line, result: .failed,
                            refusal: ("unavailable", "the outbox (Redis) did not take it: run the import again", nil), input: input)
        }
        if outcomes.contains(where: { if case .queued = $0.1 { return true } else { return false } }) {
            return LineDone(line: line, result: .queued, refusal: nil, input: [])
        }
        if outcomes.contains(where: { $0.1.holdsRegistration }) {
            return LineDone(line: line, result: .unchanged, refusal: nil, input: [])
        }
        let refusal = outcomes.lazy.compactMap { _, outcome -> ContractError? in
            if case .failed(.refusedBeforeCall(let error)) = outcome { return error } else { return nil }
        }.first
        return LineDone(line: line, result: .refused,
                        refusal: (refusal?.code.rawValue ?? ErrorCode.invalidRequest.rawValue,
                                  refusal?.message ?? "no upstream of the app takes this installation", refusal?.field),
                        input: input)
    }

    static func progressText(_ report: Report, fraction: Double, since start: UInt64, bar: Bool) -> String {
        let seconds = max(Double(MonotonicClock.nowNanos() - start) / 1e9, 0.001)
        let perSecond = Int(Double(report.lines) / seconds)
        let counts = "\(report.lines) lines, \(perSecond)/s: \(report.queued) queued, \(report.unchanged) unchanged, "
            + "\(report.refused) refused, \(report.failed) failed"
        let percent = Int((min(max(fraction, 0), 1) * 100).rounded(.down))
        guard bar else { return "import: \(percent)% read, " + counts }
        let width = 30
        let filled = percent * width / 100
        return "\r[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "] \(percent)%  " + counts
    }

    static func summary(_ report: Report, file: String) -> String {
        var text = "imported \(file): \(report.lines) lines in \(Int(report.elapsedSeconds.rounded()))s: \(report.queued) queued, "
            + "\(report.unchanged) unchanged, \(report.refused) refused, \(report.failed) failed"
        if report.refused + report.failed > 0 { text += "; refused and failed lines with their line numbers: \(report.refusedPath)" }
        if report.queued > 0 {
            text += "\n\(report.queued) registrations wait in the outbox: the running sidecars' workers deliver them "
                + "(with none running they wait in Redis, up to each upstream's queue.max_age)"
        }
        return text
    }
}
