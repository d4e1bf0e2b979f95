#if canImport(Glibc)
import Glibc
#endif
import Loops
import Synchronization

/// The numeric addresses loop connections connect to, found without blocking a loop.
///
/// `getaddrinfo` can block for the resolver's whole timeout when DNS is slow or gone, and a blocked
/// loop stalls every request on it. So an IP literal is used as it is, and a host name (a
/// container or Kubernetes service name, say) is resolved on a short-lived thread of its own:
/// - once when the client is made;
/// - again after any failed connect or timeout, because the address may have moved.
///
/// Until the first answer arrives, loop connections fail their commands as unavailable, and the
/// request path degrades as for an absent Redis.
///
/// A name may have several addresses (`localhost` is `::1` and `127.0.0.1` on many machines, in
/// the order `/etc/hosts` and `gai.conf` give): every one is kept, in `getaddrinfo`'s order, and a
/// connection tries them one by one as hiredis and libcurl do.
///
/// Thread-safety: the state sits behind a `Mutex`; the resolving thread holds a reference to the
/// resolver until it is done.
final class HostResolver: Sendable {
    private struct State {
        var addresses: [String] = []
        var resolving = false
        /// Why the last resolution failed, for error messages; nil after a success.
        var failure: String?
    }

    typealias LookUp = @Sendable (String) -> Result<[String], Failure>

    let host: String
    private let isLiteral: Bool
    private let state: Mutex<State>
    private let lookUp: LookUp

    /// - Parameter lookUp: the blocking lookup (`getaddrinfo`); tests pass a slow one.
    init(host: String, lookUp: @escaping LookUp = HostResolver.resolve) {
        self.host = host
        self.lookUp = lookUp
        isLiteral = Self.isIPLiteral(host)
        state = Mutex(State(addresses: isLiteral ? [host] : []))
        refresh()
    }

    /// What to connect to, in order: the last answer found. Empty until a resolution succeeded.
    var addresses: [String] { state.withLock { $0.addresses } }

    /// Why there is no address yet, for an error message.
    var whyUnresolved: String {
        state.withLock { s in s.failure.map { "cannot resolve \(host): \($0)" } ?? "resolving \(host)" }
    }

    /// Starts a resolution in the background. It does nothing for an IP literal, or while another
    /// resolution is still running.
    func refresh() {
        guard !isLiteral else { return }
        let start = state.withLock { s -> Bool in
            guard !s.resolving else { return false }
            s.resolving = true
            return true
        }
        guard start else { return }
        // Detached: `getaddrinfo` may block for the resolver's whole timeout, and nobody waits.
        if case .failure(let error) = OSThread.start(detached: true, { self.resolveNow() }) {
            state.withLock { $0.resolving = false; $0.failure = "cannot start a resolver thread (\(error))" }
        }
    }

    /// Blocking: runs on the resolver's own thread.
    private func resolveNow() {
        let outcome = lookUp(host)
        state.withLock { s in
            s.resolving = false
            switch outcome {
            case .success(let addresses) where !addresses.isEmpty:
                s.addresses = addresses
                s.failure = nil
            case .success:
                s.failure = "no stream address"
            case .failure(let reason):
                // Keep the previous addresses: they may still work, and they are all there is.
                s.failure = reason.message
            }
        }
    }

    struct Failure: Error { let message: String }

    /// `resolve` for tests: a name lookup that takes `seconds` before giving `addresses`.
    static func slow(_ seconds: UInt32, giving addresses: String...) -> LookUp {
        { _ in
            sleep(seconds)
            return .success(addresses)
        }
    }

    /// Every stream address `getaddrinfo` gives for `host`, in numeric form and its order, each once.
    static func resolve(_ host: String) -> Result<[String], Failure> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &list)
        guard status == 0, let first = list else {
            return .failure(Failure(message: String(cString: gai_strerror(status))))
        }
        defer { freeaddrinfo(list) }
        var addresses: [String] = []
        var lastProblem: Int32 = 0
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            entry = current.pointee.ai_next
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            let named = getnameinfo(current.pointee.ai_addr, current.pointee.ai_addrlen, &buffer, socklen_t(buffer.count),
                                    nil, 0, NI_NUMERICHOST)
            guard named == 0 else { lastProblem = named; continue }
            let length = buffer.firstIndex(of: 0) ?? buffer.count
            let address = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if !addresses.contains(address) { addresses.append(address) }
        }
        guard !addresses.isEmpty else { return .failure(Failure(message: String(cString: gai_strerror(lastProblem)))) }
        return .success(addresses)
    }

    static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}
