#if canImport(Glibc)
import Glibc
#endif
import CShims
import Dispatch
import PWCore
import PWCrypto
import PWPolicy
import PushWarden
import Synchronization

func serve(_ arguments: ArraySlice<String>) async -> Never {
    let flags = parseFlags(arguments, allowed: ["policy", "listen", "admin", "redis", "log-level", "threads",
                                                "connections-per-address", "head-timeout", "policy-key"], switches: ["watch"])
    let settings: ServeConfiguration.Serve
    do {
        settings = try ServeConfiguration.serve(flags: flags)
    } catch {
        fail(error.description)
    }
    let configuration = settings.configuration
    let policyPath = settings.policyPath
    MallocTuning.apply(loops: configuration.loopCount)
    var policyKey: Ed25519PublicKey?
    if let keyPath = settings.policyKeyPath {
        switch PolicyFile.publicKey(path: keyPath) {
        case .success(let key): policyKey = key
        case .failure(let error): fail(error.description, code: 1)
        }
    }
    // A SIGHUP before the reloader exists must not end the process (its default action).
    signal(SIGHUP, SIG_IGN)
    let source: PolicySource
    switch PolicyFile.load(path: policyPath, key: policyKey) {
    case .success(let loaded): source = loaded
    case .failure(let diagnostics):
        for diagnostic in diagnostics.diagnostics { printError(diagnostic.description) }
        exit(1)
    }
    let logger = Logger(label: "pushwarden", level: configuration.logLevel)
    signal(SIGPIPE, SIG_IGN)
    let signals = TerminationSignals()
    let sidecar: Sidecar
    do {
        sidecar = try await Sidecar.start(policy: source.policy, sha256: source.sha256, signed: source.signed, configuration: configuration,
                                          logger: logger)
    } catch {
        fail(error.description, code: 1)
    }
    let reloader = PolicyReloader(path: policyPath, key: policyKey, sidecar: sidecar, logger: logger.with(label: "policy"))
    let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: DispatchQueue(label: "pushwarden.sighup"))
    hangup.setEventHandler { reloader.request(reason: "SIGHUP") }
    hangup.resume()
    if settings.watch { reloader.watch() }
    let received = await signals.wait()
    hangup.cancel()
    reloader.stopWatching()
    logger.info("signal received", [("signal", received == SIGTERM ? "SIGTERM" : "SIGINT")])
    await sidecar.shutdown(gracePeriodSeconds: configuration.shutdownGraceSeconds)
    exit(0)
}

/// glibc's malloc, tuned for the process once, before any thread exists.
enum MallocTuning {
    /// A thread arena's free top is given back once it is this large; blocks this large are mapped
    /// on their own. Left to glibc, both thresholds rise to the largest block freed (a cache's old
    /// table, megabytes), so an arena's top stays resident after a burst, and `malloc_trim` never
    /// shrinks a thread arena's top.
    static let thresholdBytes: Int32 = 1 << 20

    static func apply(loops: Int) {
        // One arena per event loop (they do nearly all the allocating, and shared arenas make them
        // wait on each other's lock), plus room for the threads that allocate little.
        _ = pw_limit_malloc_arenas(Int32(loops + 8))
        _ = pw_fix_malloc_thresholds(thresholdBytes)
    }
}

/// SIGTERM and SIGINT, caught from construction on: a signal that arrives while the sidecar starts
/// (or right after it logged that it listens) is kept and answered once `wait` is called, instead
/// of killing the process (default action) or being lost (ignored before a handler exists).
final class TerminationSignals: @unchecked Sendable {
    // `sources` is written only in `init`; `state` is behind its own lock.
    private var sources: [any DispatchSourceSignal] = []
    private let state = Mutex<(received: Int32?, waiter: CheckedContinuation<Int32, Never>?)>((nil, nil))

    init() {
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let queue = DispatchQueue(label: "pushwarden.signals")
        for number in [SIGTERM, SIGINT] {
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [weak self] in self?.fire(number) }
            source.resume()
            sources.append(source)
        }
    }

    private func fire(_ number: Int32) {
        let waiter = state.withLock { state -> CheckedContinuation<Int32, Never>? in
            guard state.received == nil else { return nil }
            state.received = number
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: number)
    }

    /// Suspends until the first SIGTERM or SIGINT (returns at once if one already came).
    func wait() async -> Int32 {
        await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            let received = state.withLock { state -> Int32? in
                if let received = state.received { return received }
                state.waiter = continuation
                return nil
            }
            if let received { continuation.resume(returning: received) }
        }
    }
}
