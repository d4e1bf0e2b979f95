import CMicroHTTPD
import CShims
import Loops
import PWCore
import Synchronization

/// One request's state, from its request line to MHD's completion notice.
///
/// Ownership: created in the URI-log callback and handed to MHD as `*req_cls` with one retain,
/// which the request-completed callback releases (exactly once; MHD calls it once per request
/// whose URI was logged). The handler's `HTTPResponder` holds its own strong reference, so a
/// late answer never touches a freed object.
///
/// Thread-safety: MHD calls back for one connection from its loop's thread only, but the
/// handler may answer from anywhere, so all state sits behind one `Mutex`, never held while the
/// handler runs. Lock order: a context's lock may be held while taking `ServerCore`'s registry
/// lock, never the other way round.
final class RequestContext: Sendable {
    enum Phase {
        /// Head not yet seen by the handler.
        case head
        case readingBody(limit: Int)
        /// The body grew past the limit mid-upload (chunked), where MHD 0.9.75 refuses to
        /// queue a response: drop up to `discardAllowance` more bytes, then answer 413; a
        /// longer body gets the connection closed without an answer.
        case discardingBody(remaining: Int)
        /// The handler has the request; `suspended` once the access call that started it has
        /// returned without an answer.
        case handling(suspended: Bool)
        /// The response to queue on the next call (after a resume, or once a body-less
        /// request is complete).
        case ready(HTTPResponse)
        /// A response is queued; nothing else may be queued.
        case done
    }

    struct State: Sendable {
        var connection: MHDConnection
        var rawTarget: String
        var head = HTTPRequestHead(method: "", path: "")
        var body: [UInt8] = []
        /// What the handler resolved from the head, handed back with the request.
        var context: (any Sendable)?
        var phase = Phase.head
        /// Set by whoever calls MHD_resume_connection (the finished handler or a forced stop);
        /// the other party must not touch the connection afterwards.
        var resumeClaimed = false
    }

    let daemon: DaemonContext
    /// The connection this request came on (nil only if MHD had no socket context for it).
    let tracked: TrackedConnection?
    var core: ServerCore { daemon.core }
    var loop: EventLoop { daemon.loop }
    private let state: Mutex<State>

    init(daemon: DaemonContext, connection: OpaquePointer, tracked: TrackedConnection?, rawTarget: String) {
        self.daemon = daemon
        self.tracked = tracked
        self.state = Mutex(State(connection: MHDConnection(connection), rawTarget: rawTarget))
    }

    private enum Step {
        case answer(MHD_Result)
        case start(HTTPRequest)
    }

    /// One access-handler call. `uploadSize` is MHD's `*upload_data_size`: set to 0 to consume.
    func access(method: UnsafePointer<CChar>, version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
                uploadSize: UnsafeMutablePointer<Int>) -> MHD_Result {
        switch step(method: method, version: version, uploadData: uploadData, uploadSize: uploadSize) {
        case .answer(let result):
            return result
        case .start(let request):
            // Outside the lock: the handler may answer right here, on this thread.
            core.handler.start(request, on: loop, responder: HTTPResponder(self))
            return state.withLock { s in
                if case .ready(let response) = s.phase {
                    // Answered synchronously: no suspension at all.
                    s.phase = .done
                    return queue(response, on: s.connection.pointer, forceClose: core.isDraining)
                }
                guard core.registerSuspended(self) else {
                    // The server is stopping; the handler's late answer will be dropped.
                    s.phase = .done
                    return queue(Self.unavailable, on: s.connection.pointer, forceClose: true)
                }
                MHD_suspend_connection(s.connection.pointer)
                s.phase = .handling(suspended: true)
                return .YES
            }
        }
    }

    private func step(method: UnsafePointer<CChar>, version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
                      uploadSize: UnsafeMutablePointer<Int>) -> Step {
        state.withLock { s -> Step in
            switch s.phase {
            case .head:
                // The head is complete: its deadline no longer applies.
                if let tracked { daemon.heads.remove(tracked) }
                s.head = Self.makeHead(connection: s.connection.pointer, method: method, rawTarget: s.rawTarget)
                if let refusal = RequestFraming.refusal(connection: s.connection.pointer, method: method, version: version,
                                                        head: s.head, rawTargetLength: s.rawTarget.utf8.count) {
                    // Queued before any body byte is read: MHD closes the connection after it,
                    // and nothing after this head is read as a request.
                    s.phase = .done
                    return .answer(queue(core.handler.refuse(s.head, refusal), on: s.connection.pointer, forceClose: true))
                }
                switch core.handler.decide(s.head) {
                case .respond(let response):
                    guard Self.announcesBody(s.head.headers) else {
                        // MHD treats a response queued before the request is complete as
                        // "early" and closes the connection; a body-less request completes on
                        // the next call, so answering there keeps the connection alive.
                        s.phase = .ready(response)
                        return .answer(.YES)
                    }
                    s.phase = .done
                    return .answer(queue(response, on: s.connection.pointer, forceClose: true))
                case .readBody(let limit, let context):
                    s.context = context
                    if let declared = s.head.headers["Content-Length"], let length = Int(declared) {
                        guard length <= limit else {
                            s.phase = .done
                            return .answer(queue(core.handler.payloadTooLarge(s.head, context: context), on: s.connection.pointer,
                                                 forceClose: true))
                        }
                        s.body.reserveCapacity(length)
                    }
                    s.phase = .readingBody(limit: max(0, limit))
                    return .answer(.YES)
                }

            case .readingBody(let limit):
                let size = uploadSize.pointee
                guard size == 0 else {
                    uploadSize.pointee = 0
                    if s.body.count + size > limit {
                        s.body = []
                        // MHD 0.9.75 refuses a response while the body is still arriving;
                        // then drop the rest and answer once it is complete.
                        if queue(core.handler.payloadTooLarge(s.head, context: s.context), on: s.connection.pointer, forceClose: true) == .YES {
                            s.phase = .done
                        } else {
                            s.phase = .discardingBody(remaining: Self.discardAllowance)
                        }
                        return .answer(.YES)
                    }
                    if let uploadData {
                        s.body.append(contentsOf: UnsafeRawBufferPointer(start: uploadData, count: size))
                    }
                    return .answer(.YES)
                }
                s.phase = .handling(suspended: false)
                let request = HTTPRequest(head: s.head, body: s.body, context: s.context)
                s.body = []
                s.context = nil
                return .start(request)

            case .discardingBody(let remaining):
                let size = uploadSize.pointee
                guard size == 0 else {
                    guard size <= remaining else { return .answer(.NO) }
                    uploadSize.pointee = 0
                    s.phase = .discardingBody(remaining: remaining - size)
                    return .answer(.YES)
                }
                s.phase = .done
                return .answer(queue(core.handler.payloadTooLarge(s.head, context: s.context), on: s.connection.pointer, forceClose: true))

            case .ready(let response):
                s.phase = .done
                return .answer(queue(response, on: s.connection.pointer, forceClose: core.isDraining))

            case .handling, .done:
                // Not expected from MHD; swallow stray body bytes rather than loop.
                uploadSize.pointee = 0
                return .answer(.YES)
            }
        }
    }

    /// Hands `response` to the connection: kept for the access call still running on the loop,
    /// or, once suspended, with the connection woken. The first answer wins (the handler's or a
    /// forced stop's); later ones are dropped. Called from any thread.
    func respond(_ response: HTTPResponse) {
        let connection = state.withLock { s -> MHDConnection? in
            guard case .handling(let suspended) = s.phase else { return nil }
            s.phase = .ready(response)
            guard suspended, !s.resumeClaimed else { return nil }
            s.resumeClaimed = true
            return s.connection
        }
        guard let connection else { return }
        core.unregisterSuspended(self)
        // The resume itself happens on the loop, which then runs the daemon: libmicrohttpd
        // processes a resumed connection only in its next MHD_run. Jobs run in order, so a
        // resume posted before the daemon's stop is done before it.
        if loop.isCurrent {
            MHD_resume_connection(connection.pointer)
            daemon.needsRun = true
        } else {
            let daemon = self.daemon
            loop.execute {
                MHD_resume_connection(connection.pointer)
                daemon.needsRun = true
            }
        }
    }

    /// How much of an over-limit chunked body is read and dropped so that the client still
    /// gets its 413; beyond it the connection is closed.
    static let discardAllowance = 1 << 20

    /// Whether the head announces a body (chunked, or a `Content-Length` other than 0).
    static func announcesBody(_ headers: HTTPHeaders) -> Bool {
        if headers["Transfer-Encoding"] != nil { return true }
        guard let length = headers["Content-Length"] else { return false }
        return Int(length) != 0
    }

    static let unavailable = HTTPResponse(status: 503, headers: ["Content-Type": "text/plain"], body: Array("shutting down\n".utf8))

    private func queue(_ response: HTTPResponse, on connection: OpaquePointer, forceClose: Bool) -> MHD_Result {
        let mhdResponse = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let mhdResponse else { return .NO }
        defer { MHD_destroy_response(mhdResponse) }
        var hasClose = false
        for field in response.headers {
            if HTTPHeaders.equalsIgnoringCase(field.name, "Connection") { hasClose = true }
            // MHD rejects fields it owns (Content-Length) and values with line breaks; drop them.
            _ = withNulTerminated(field.name) { name in
                withNulTerminated(field.value) { value in MHD_add_response_header(mhdResponse, name, value) }
            }
        }
        if forceClose && !hasClose {
            _ = MHD_add_response_header(mhdResponse, "Connection", "close")
        } else if !hasClose, let keepAlive = core.keepAlive {
            _ = withNulTerminated(keepAlive) { value in MHD_add_response_header(mhdResponse, "Keep-Alive", value) }
        }
        let status = (100...999).contains(response.status) ? UInt32(response.status) : 500
        return MHD_queue_response(connection, status, mhdResponse)
    }

    /// The request-target as sent, split at its first `?` into the path and the raw query
    /// (neither percent-decoded; the query is empty when there is none).
    static func splitTarget(_ rawTarget: String) -> (path: String, query: String) {
        guard let mark = rawTarget.utf8.firstIndex(of: UInt8(ascii: "?")) else { return (rawTarget, "") }
        return (String(rawTarget[..<mark]), String(rawTarget[rawTarget.utf8.index(after: mark)...]))
    }

    private static func makeHead(connection: OpaquePointer, method: UnsafePointer<CChar>, rawTarget: String) -> HTTPRequestHead {
        let (path, query) = splitTarget(rawTarget)
        var head = HTTPRequestHead(method: String(cString: method), path: path, query: query)
        // A client's head carries a handful of fields: room for them at once instead of growing 1, 2, 4, 8.
        head.headers.reserveCapacity(12)
        withUnsafeMutablePointer(to: &head.headers) { headers in
            _ = MHD_get_connection_values_n(connection, .HEADER_KIND, collectHeader, UnsafeMutableRawPointer(headers))
        }
        head.remoteAddress = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { buffer in
            guard let base = buffer.baseAddress, pw_mhd_client_address(connection, base, buffer.count) == 0 else { return "" }
            return String(cString: base)
        }
        return head
    }
}

/// An MHD connection handle crossing threads. Unchecked because MHD defines the rules: only
/// MHD_resume_connection may be called from a thread other than the connection's own, and
/// `RequestContext` guarantees that call happens once, before the connection can be freed.
struct MHDConnection: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// MHD_KeyValueIteratorN: appends one header field to the `HTTPHeaders` that `cls` points to
/// (a pointer valid only during MHD_get_connection_values_n).
private func collectHeader(
    cls: UnsafeMutableRawPointer?, kind: MHD_ValueKind,
    key: UnsafePointer<CChar>?, keySize: Int, value: UnsafePointer<CChar>?, valueSize: Int
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let headers = cls.assumingMemoryBound(to: HTTPHeaders.self)
    let name = String(decoding: UnsafeRawBufferPointer(start: key, count: keySize), as: UTF8.self)
    let text = value.map { String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self) } ?? ""
    headers.pointee.add(name, text)
    return .YES
}

/// Calls `body` with `text` as a NUL-terminated C string, copied to the stack when short (a header
/// name or value) instead of the heap copy that passing a `String` as a C pointer makes for a
/// literal or a small string.
func withNulTerminated<R>(_ text: String, _ body: (UnsafePointer<CChar>) -> R) -> R {
    var text = text
    return text.withUTF8 { utf8 in
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: utf8.count + 1) { buffer in
            let base = buffer.baseAddress!
            utf8.withMemoryRebound(to: CChar.self) { source in
                if let from = source.baseAddress { base.update(from: from, count: source.count) }
            }
            base[utf8.count] = 0
            return body(base)
        }
    }
}
