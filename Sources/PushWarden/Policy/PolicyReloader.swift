#if canImport(Glibc)
import Glibc
#endif
import PWCore
import PWCrypto
import PWPolicy
import Registration
import Synchronization

/// Reloads the policy file of a running sidecar on request (`SIGHUP`) and, with `serve --watch`,
/// when the file changes.
///
/// Each reload reads the file again, checks its signature (with `--policy-key`), validates it and
/// hands it to `Sidecar.reload`, which refuses a signed one whose serial does not rise and builds
/// every app before anything switches. Reloads never
/// overlap: a request during one is remembered and served by one more reload after it.
///
/// The watcher polls rather than using inotify: it compares, every `interval`, the resolved path
/// (`realpath`) and the device, inode, size and modification time of the file (and of `FILE.sig`
/// with a key). That also sees a Kubernetes ConfigMap update, which swaps the `..data` symlink to
/// a new directory instead of writing the file, and an editor's rename-over-the-file.
///
/// Thread-safe.
public final class PolicyReloader: Sendable {
    public let path: String
    private let key: Ed25519PublicKey?
    private let sidecar: Sidecar
    private let logger: Logger

    private struct State {
        var running = false
        var pending = false
        var watcher: Task<Void, Never>?
    }

    private let state = Mutex(State())

    public init(path: String, key: Ed25519PublicKey?, sidecar: Sidecar, logger: Logger) {
        self.path = path
        self.key = key
        self.sidecar = sidecar
        self.logger = logger
    }

    /// Asks for a reload; returns at once (callable from a signal handler's queue).
    public func request(reason: String) {
        let start = state.withLock { state -> Bool in
            if state.running {
                state.pending = true
                return false
            }
            state.running = true
            return true
        }
        guard start else { return }
        Task.detached { [self] in await drain(reason: reason) }
    }

    private func drain(reason: String) async {
        var reason = reason
        while true {
            _ = await reloadOnce(reason: reason)
            let again = state.withLock { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.running = false
                return false
            }
            guard again else { return }
            reason = "requested during a reload"
        }
    }

    private func reloadOnce(reason: String) async -> Bool {
        logger.info("policy reload", [("policy", path), ("reason", reason)])
        switch PolicyFile.load(path: path, key: key) {
        case .failure(let diagnostics):
            sidecar.reloadFailed(diagnostics.diagnostics.map(\.description), policy: path)
            return false
        case .success(let source):
            if case .success = await sidecar.reload(source.policy, sha256: source.sha256, signed: source.signed) { return true }
            return false
        }
    }

    /// Starts polling the file every `interval` seconds; a change requests a reload.
    public func watch(interval: Double = 1) {
        let watched = key == nil ? [path] : [path, PolicyFile.signaturePath(path)]
        let task = Task.detached { [weak self] in
            var last = watched.map(Fingerprint.init(path:))
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval))
                guard !Task.isCancelled, let self else { return }
                let now = watched.map(Fingerprint.init(path:))
                if now != last {
                    last = now
                    self.request(reason: "the policy file changed")
                }
            }
        }
        let old = state.withLock { state -> Task<Void, Never>? in
            defer { state.watcher = task }
            return state.watcher
        }
        old?.cancel()
    }

    public func stopWatching() {
        state.withLock { state -> Task<Void, Never>? in
            defer { state.watcher = nil }
            return state.watcher
        }?.cancel()
    }

    /// What identifies one version of a file behind any symlinks; nil fields when it is absent.
    struct Fingerprint: Equatable {
        var resolved: String?
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var size: Int64 = 0
        var modifiedSeconds: Int = 0
        var modifiedNanoseconds: Int = 0

        init(path: String) {
            if let real = realpath(path, nil) {
                resolved = String(cString: real)
                free(real)
            }
            var info = stat()
            guard stat(path, &info) == 0 else { return }
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int64(info.st_size)
            modifiedSeconds = Int(info.st_mtim.tv_sec)
            modifiedNanoseconds = Int(info.st_mtim.tv_nsec)
        }
    }
}
