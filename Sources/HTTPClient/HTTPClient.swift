import Loops
import PWCore

/// An HTTP/1.1 and HTTP/2 client for upstream push providers, on libcurl's multi interface.
///
/// No thread is used per request. A call made for an event loop (`Loops`; `execute(_:on:)` with
/// the loop the task runs on) goes out on that loop's own curl multi handle, driven by the loop's
/// epoll set, and its completion resumes the task on the same thread: the whole call happens
/// without a thread hop. Calls made with no loop share one multi handle on the client's own
/// thread. Connections are kept alive and pooled per host (`HTTPClientConfiguration`; each loop
/// and the client's thread pool separately), and HTTPS upstreams that offer HTTP/2 get their
/// calls multiplexed on shared connections. Redirects are never followed (a provider key must not travel to another host),
/// only `http` and `https` are spoken, and TLS verification is always on.
///
/// Thread-safety: every method may be called from any thread or task.
///
/// The client does no logging: URLs and headers can carry keys.
public final class HTTPClient: Sendable {
    private let thread: ClientThread
    private let loopState: LoopClientState
    private let maxResponseBytes: Int

    /// Starts the client's thread.
    /// - Throws: `.other` when libcurl cannot be initialised or the thread cannot start.
    public init(configuration: HTTPClientConfiguration = .init()) throws(HTTPClientError) {
        thread = try ClientThread(configuration: configuration)
        loopState = LoopClientState(configuration: configuration)
        maxResponseBytes = max(0, configuration.maxResponseBytes)
        try thread.start()
    }

    deinit { shutdown() }

    /// Performs one call. Any HTTP status, 5xx included, is a response.
    ///
    /// If the awaiting task is cancelled, the transfer is removed (its connection is closed by
    /// curl) and the call throws `.other` with detail "cancelled". Cancellation is cooperative but
    /// prompt: the thread driving the transfer is woken to act on it.
    /// - Parameters:
    ///   - loop: the event loop whose own multi handle carries the call (begun on the loop's
    ///     thread: right away when the task runs there, which is what makes the call hop-free), or
    ///     nil for the client's own thread. The caller decides: a task that runs on a loop's
    ///     thread and passes nil goes to the client's thread.
    /// - Throws: `HTTPClientError`; `.other` before any I/O for a non-http(s) URL, a method that is
    ///   not a token, or a header with control characters; `.shutdown` after `shutdown()` (or
    ///   when `loop` is stopping).
    public func execute(_ request: HTTPClientRequest, on loop: EventLoop? = nil) async throws(HTTPClientError) -> HTTPClientResponse {
        if let problem = Self.problem(with: request) {
            throw HTTPClientError(kind: .other, detail: problem)
        }
        let transfer = Transfer(request: request, maxResponseBytes: maxResponseBytes)
        if let loop { return try await execute(transfer, on: loop) }
        let thread = self.thread
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Transfer.Outcome, Never>) in
                transfer.continuation = continuation
                if !thread.enqueue(transfer) { transfer.finish(.failure(.shutdown)) }
            }
        } onCancel: {
            thread.cancel(transfer)
        }
        return try outcome.get()
    }

    /// This client's multi handle on `loop`, made on first use; nil when it cannot be made (the
    /// call then goes to the client's thread). Call on `loop`.
    private func loopMulti(on loop: EventLoop) -> LoopMulti? {
        let state = loopState
        let multi = loop.attachment(for: ObjectIdentifier(state)) { LoopMulti(loop: loop, state: state) }
        return multi.isUsable ? multi : nil
    }

    /// The call on `loop`'s own multi handle, begun on the loop's thread. Whether the handle is
    /// usable never changes for a loop, so the cancellation (also on the loop) finds the transfer
    /// where its start put it.
    private func execute(_ transfer: Transfer, on loop: EventLoop) async throws(HTTPClientError) -> HTTPClientResponse {
        guard !loopState.isClosed else { throw .shutdown }
        let thread = self.thread
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Transfer.Outcome, Never>) in
                transfer.continuation = continuation
                // On the loop (the hot path) without a job: the hop's closure is made only for a hop.
                if loop.isCurrent {
                    begin(transfer, on: loop)
                } else if !loop.execute({ [self] in begin(transfer, on: loop) }) {
                    transfer.finish(.failure(.shutdown))
                }
            }
        } onCancel: {
            transfer.cancelRequested.store(true, ordering: .releasing)
            loop.execute { [self] in
                if let multi = loopMulti(on: loop) { multi.cancel(transfer) } else { thread.cancel(transfer) }
            }
        }
        return try outcome.get()
    }

    /// Starts `transfer` on `loop`'s multi handle, or on the client's thread when the loop has
    /// none. Call on `loop`.
    private func begin(_ transfer: Transfer, on loop: EventLoop) {
        if let multi = loopMulti(on: loop) {
            multi.begin(transfer)
        } else if !thread.enqueue(transfer) {
            transfer.finish(.failure(.shutdown))
        }
    }

    /// Fails pending and in-flight calls on the client's thread with `.shutdown`, closes its
    /// connections and joins it; later calls fail with `.shutdown`. Calls already running on an
    /// event loop finish normally, and that loop's connections close when it stops. Idempotent;
    /// also run by `deinit`.
    public func shutdown() {
        loopState.close()
        thread.shutdown()
    }

    /// A reason to refuse `request` before libcurl sees it, never quoting the URL or header values.
    static func problem(with request: HTTPClientRequest) -> String? {
        let url = request.url.utf8
        guard hasPrefixIgnoringCase(url, "http://") || hasPrefixIgnoringCase(url, "https://") else {
            return "unsupported URL scheme"
        }
        guard !url.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return "URL contains whitespace or control characters" }
        guard !request.method.isEmpty, request.method.utf8.allSatisfy(ByteClass.isToken) else { return "invalid method" }
        for field in request.headers {
            guard !field.name.isEmpty, field.name.utf8.allSatisfy(ByteClass.isToken) else { return "invalid header name" }
            guard !field.value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }) else {
                return "invalid header value"
            }
        }
        return nil
    }

    static func hasPrefixIgnoringCase(_ s: String.UTF8View, _ prefix: StaticString) -> Bool {
        let count = prefix.utf8CodeUnitCount
        var index = s.startIndex
        for i in 0..<count {
            guard index != s.endIndex else { return false }
            let a = s[index]
            guard (a >= 0x41 && a <= 0x5A ? a | 0x20 : a) == prefix.utf8Start[i] else { return false }
            s.formIndex(after: &index)
        }
        return true
    }
}

