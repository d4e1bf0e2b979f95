internal import CCurl
internal import CShims
#if canImport(Glibc)
import Glibc
#endif
import PWCore
import Synchronization

/// The single thread that drives every transfer through one curl multi handle.
///
/// Other threads only ever take `shared`'s lock to hand over new transfers, cancellations or the
/// shutdown request, and wake the loop through the poller's pipe while holding that lock. Everything
/// else (the active-transfer table, the easy-handle free list, curl's callbacks) lives on the loop
/// thread and needs no lock.
///
/// The multi handle is driven through curl's socket interface: curl registers each transfer socket
/// with the `SocketPoller`'s epoll set and names one deadline; the loop calls
/// `curl_multi_socket_action` only for sockets that are ready and when the deadline passes.
final class EventLoop: Sendable {
    private enum Phase { case running, stopping, stopped }

    private struct Shared {
        var phase: Phase = .running
        var pending: [Transfer] = []
        var cancelled: [Transfer] = []
        /// Present while the loop thread runs; cleared (under the lock) before the multi handle is freed.
        var multi: MultiHandle?
        var thread: pthread_t?
    }

    private let shared: Mutex<Shared>
    private let configuration: HTTPClientConfiguration

    init(configuration: HTTPClientConfiguration) throws(HTTPClientError) {
        guard CurlGlobal.initialized else { throw HTTPClientError(kind: .other, detail: "curl_global_init failed") }
        guard let multi = MultiHandle() else { throw HTTPClientError(kind: .other, detail: "curl_multi_init failed") }
        var rc = CURLM_OK
        func set(_ option: CURLMoption, _ value: Int) {
            let r = pw_curl_multi_setopt_long(multi.raw, option, value)
            if rc == CURLM_OK { rc = r }
        }
        set(CURLMOPT_MAX_HOST_CONNECTIONS, max(1, configuration.maxConnectionsPerHost))
        set(CURLMOPT_MAX_TOTAL_CONNECTIONS, max(1, configuration.maxTotalConnections))
        set(CURLMOPT_MAXCONNECTS, max(1, configuration.maxTotalConnections))
        set(CURLMOPT_PIPELINING, pw_curlpipe_multiplex())
        guard rc == CURLM_OK else {
            throw HTTPClientError(kind: .other, detail: String(cString: curl_multi_strerror(rc)))
        }
        self.configuration = configuration
        self.shared = Mutex(Shared(multi: multi))
    }

    /// Starts the loop thread, which keeps `self` alive until it returns.
    func start() throws(HTTPClientError) {
        let context = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { context in
            let loop = Unmanaged<EventLoop>.fromOpaque(context!).takeRetainedValue()
            loop.run()
            return nil
        }, context)
        guard rc == 0 else {
            Unmanaged<EventLoop>.fromOpaque(context).release()
            shared.withLock { $0.phase = .stopped; $0.multi = nil }
            throw HTTPClientError(kind: .other, detail: "pthread_create failed")
        }
        shared.withLock { $0.thread = thread }
    }

    /// Hands `transfer` to the loop; false once shutdown has begun.
    func enqueue(_ transfer: Transfer) -> Bool {
        shared.withLock { state in
            guard state.phase == .running else { return false }
            let wasIdle = state.pending.isEmpty && state.cancelled.isEmpty
            state.pending.append(transfer)
            // A non-empty queue means a wakeup is already on its way.
            if wasIdle { state.multi?.wakeup() }
            return true
        }
    }

    func cancel(_ transfer: Transfer) {
        transfer.cancelRequested.store(true, ordering: .releasing)
        shared.withLock { state in
            guard state.phase == .running else { return }
            let wasIdle = state.pending.isEmpty && state.cancelled.isEmpty
            state.cancelled.append(transfer)
            if wasIdle { state.multi?.wakeup() }
        }
    }

    /// Fails every unfinished transfer with `.shutdown` and joins the loop thread. Idempotent; a
    /// concurrent second caller returns without waiting for the join.
    func shutdown() {
        let thread: pthread_t? = shared.withLock { state in
            guard state.phase == .running else { return nil }
            state.phase = .stopping
            state.multi?.wakeup()
            defer { state.thread = nil }
            return state.thread
        }
        guard let thread else { return }
        if pthread_equal(thread, pthread_self()) != 0 {
            pthread_detach(thread)
        } else {
            pthread_join(thread, nil)
        }
    }

    // MARK: - Loop thread only

    private func run() {
        // Named so `top -H` and profilers show which thread is the upstream client.
        pw_set_thread_name("pw-curl")
        guard let multi = shared.withLock({ $0.multi }) else { return }
        var active: [UInt: Transfer] = [:]
        var spare: [EasyHandle] = []
        let spareLimit = max(1, configuration.maxTotalConnections)

        /// Options stay on the handle; `configure` overwrites what the next transfer needs differently.
        /// The transfer pointers are cleared so no callback can reach a finished transfer.
        func recycle(_ easy: EasyHandle) {
            _ = pw_curl_easy_setopt_ptr(easy.raw, CURLOPT_WRITEDATA, nil)
            _ = pw_curl_easy_setopt_ptr(easy.raw, CURLOPT_HEADERDATA, nil)
            if spare.count < spareLimit { spare.append(easy) }
        }

        func complete(_ transfer: Transfer, _ outcome: Transfer.Outcome) {
            if let easy = transfer.easy {
                active.removeValue(forKey: UInt(bitPattern: easy.raw))
                curl_multi_remove_handle(multi.raw, easy.raw)
                recycle(easy)
            }
            transfer.easy = nil
            transfer.finish(outcome)
        }

        let poller = multi.poller
        let timeoutSocket = pw_curl_socket_timeout()
        func act(on socket: curl_socket_t, _ flags: Int32) {
            var running: Int32 = 0
            _ = curl_multi_socket_action(multi.raw, socket, flags, &running)
        }

        func drainMessages() {
            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi.raw, &queued) {
                guard pw_curl_msg_is_done(message) != 0, let raw = message.pointee.easy_handle,
                    let transfer = active[UInt(bitPattern: raw)]
                else { continue }
                complete(transfer, outcome(of: transfer, raw: raw, code: pw_curl_msg_result(message)))
            }
        }

        func begin(_ transfer: Transfer) {
            if transfer.cancelRequested.load(ordering: .acquiring) {
                transfer.finish(.failure(.cancelled))
                return
            }
            guard let easy = spare.popLast() ?? EasyHandle() else {
                transfer.finish(.failure(HTTPClientError(kind: .other, detail: "curl_easy_init failed")))
                return
            }
            if let error = configure(easy, for: transfer, poller: multi.poller) {
                recycle(easy)
                transfer.finish(.failure(error))
                return
            }
            transfer.easy = easy
            let rc = curl_multi_add_handle(multi.raw, easy.raw)
            guard rc == CURLM_OK else {
                transfer.easy = nil
                recycle(easy)
                transfer.finish(.failure(HTTPClientError(kind: .other, detail: String(cString: curl_multi_strerror(rc)))))
                return
            }
            active[UInt(bitPattern: easy.raw)] = transfer
        }

        while true {
            let (pending, cancelled, stopping) = shared.withLock { state in
                let taken = (state.pending, state.cancelled, state.phase != .running)
                state.pending = []
                state.cancelled = []
                return taken
            }
            if stopping {
                for transfer in pending { transfer.finish(.failure(.shutdown)) }
                for transfer in Array(active.values) { complete(transfer, .failure(.shutdown)) }
                break
            }
            for transfer in pending { begin(transfer) }
            for transfer in cancelled {
                guard let easy = transfer.easy, active[UInt(bitPattern: easy.raw)] === transfer else { continue }
                complete(transfer, .failure(.cancelled))
            }

            // New handles get a timeout call right away (curl's timer callback asks for one on add too).
            if poller.takeDueTimeout() || !pending.isEmpty { act(on: timeoutSocket, 0) }
            drainMessages()
            // Sleeps until a socket is ready, curl's deadline, or a wakeup from another thread.
            poller.wait(capMillis: 1000) { socket, flags in act(on: socket, flags) }
            if poller.takeDueTimeout() { act(on: timeoutSocket, 0) }
            drainMessages()
        }

        spare.removeAll()
        shared.withLock { state in
            state.multi = nil
            state.phase = .stopped
        }
        // `multi` is the last reference: curl_multi_cleanup closes the cached connections here.
    }

    private func outcome(of transfer: Transfer, raw: UnsafeMutableRawPointer, code: CURLcode) -> Transfer.Outcome {
        guard code == CURLE_OK else {
            return .failure(HTTPClientError(code: code, exceededLimit: transfer.exceededLimit))
        }
        var status = 0
        _ = pw_curl_easy_getinfo_long(raw, CURLINFO_RESPONSE_CODE, &status)
        let response = HTTPClientResponse(status: status, headers: HTTPHeaders(transfer.responseFields), body: transfer.body)
        transfer.body = []
        return .success(response)
    }

    /// Options that never differ between transfers, set once per easy handle.
    private func configureBase(_ h: UnsafeMutableRawPointer, poller: SocketPoller, check: (CURLcode) -> Void) {
        func long(_ option: CURLoption, _ value: Int) { check(pw_curl_easy_setopt_long(h, option, value)) }
        func string(_ option: CURLoption, _ value: String) { check(pw_curl_easy_setopt_str(h, option, value)) }
        string(CURLOPT_PROTOCOLS_STR, "http,https")
        string(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        long(CURLOPT_FOLLOWLOCATION, 0)
        long(CURLOPT_NOSIGNAL, 1)
        long(CURLOPT_SSL_VERIFYPEER, 1)
        long(CURLOPT_SSL_VERIFYHOST, 2)
        if let ca = configuration.caBundlePath { string(CURLOPT_CAINFO, ca) }
        long(CURLOPT_HTTP_VERSION, pw_curl_http_version_2tls())
        long(CURLOPT_TCP_KEEPALIVE, 1)
        long(CURLOPT_TCP_NODELAY, 1)
        string(CURLOPT_USERAGENT, configuration.userAgent)
        check(pw_curl_easy_setopt_off_t(h, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(max(0, configuration.maxResponseBytes))))
        check(pw_curl_easy_setopt_write_cb(h, transferWriteCallback))
        check(pw_curl_easy_setopt_header_cb(h, transferHeaderCallback))
        // Connection sockets open and close through the poller, so its record of what epoll holds
        // for a descriptor number starts afresh with each socket.
        let context = Unmanaged.passUnretained(poller).toOpaque()
        check(pw_curl_easy_setopt_ptr(h, CURLOPT_OPENSOCKETFUNCTION, unsafeBitCast(curlOpenSocketCallback, to: UnsafeMutableRawPointer.self)))
        check(pw_curl_easy_setopt_ptr(h, CURLOPT_OPENSOCKETDATA, context))
        check(pw_curl_easy_setopt_ptr(h, CURLOPT_CLOSESOCKETFUNCTION, unsafeBitCast(curlCloseSocketCallback, to: UnsafeMutableRawPointer.self)))
        check(pw_curl_easy_setopt_ptr(h, CURLOPT_CLOSESOCKETDATA, context))
    }

    /// Applies every per-request option, skipping those whose value the reused handle already
    /// holds. Returns an error instead of starting a half-configured transfer (the handle's options
    /// are then forgotten, so it cannot carry a half-applied request into the next one).
    private func configure(_ easy: EasyHandle, for transfer: Transfer, poller: SocketPoller) -> HTTPClientError? {
        let h = easy.raw
        let request = transfer.request
        var rc = CURLE_OK
        func check(_ r: CURLcode) { if rc == CURLE_OK { rc = r } }
        func long(_ option: CURLoption, _ value: Int) { check(pw_curl_easy_setopt_long(h, option, value)) }
        func string(_ option: CURLoption, _ value: String) { check(pw_curl_easy_setopt_str(h, option, value)) }
        func clear(_ option: CURLoption) { check(pw_curl_easy_setopt_ptr(h, option, nil)) }

        if !easy.baseConfigured {
            configureBase(h, poller: poller, check: check)
            easy.baseConfigured = true
        }
        var applied = easy.applied
        defer { easy.applied = applied }

        if applied.url != request.url {
            string(CURLOPT_URL, request.url)
            applied.url = request.url
        }
        // Over TLS, ALPN tells within the handshake whether a connection multiplexes, so waiting
        // for it beats opening a connection per concurrent call. Over plain http the answer would
        // only come with the first response, and every other call to the host would queue behind it.
        let pipeWait = HTTPClient.hasPrefixIgnoringCase(request.url.utf8, "https://")
        if applied.pipeWait != pipeWait {
            long(CURLOPT_PIPEWAIT, pipeWait ? 1 : 0)
            applied.pipeWait = pipeWait
        }
        let timeout = max(1, request.timeoutMillis)
        if applied.timeoutMillis != timeout {
            long(CURLOPT_TIMEOUT_MS, timeout)
            applied.timeoutMillis = timeout
        }
        let connectTimeout = max(1, request.connectTimeoutMillis)
        if applied.connectTimeoutMillis != connectTimeout {
            long(CURLOPT_CONNECTTIMEOUT_MS, connectTimeout)
            applied.connectTimeoutMillis = connectTimeout
        }
        check(pw_curl_easy_setopt_ptr(h, CURLOPT_WRITEDATA, transfer.opaque))
        check(pw_curl_easy_setopt_ptr(h, CURLOPT_HEADERDATA, transfer.opaque))

        let method = request.method
        let sendsBody = !request.body.isEmpty || method == "POST" || method == "PUT" || method == "PATCH"
        if applied.method != method || applied.sendsBody != sendsBody {
            // Back to curl's defaults for the method (a plain GET without body) before setting this one's.
            clear(CURLOPT_CUSTOMREQUEST)
            long(CURLOPT_NOBODY, 0)
            if applied.sendsBody {
                check(pw_curl_easy_setopt_off_t(h, CURLOPT_POSTFIELDSIZE_LARGE, -1))
                clear(CURLOPT_COPYPOSTFIELDS)
                clear(CURLOPT_POSTFIELDS)
            }
            long(CURLOPT_HTTPGET, 1)
            if method == "HEAD" {
                long(CURLOPT_NOBODY, 1)
            } else if sendsBody {
                long(CURLOPT_POST, 1)
                if method != "POST" { string(CURLOPT_CUSTOMREQUEST, method) }
            } else if method != "GET" {
                string(CURLOPT_CUSTOMREQUEST, method)
            }
            applied.method = method
        }
        if sendsBody {
            check(pw_curl_easy_setopt_off_t(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
            // COPYPOSTFIELDS makes curl own a copy, so nothing of ours has to outlive this call.
            check(request.body.withUnsafeBytes { bytes in
                let empty: StaticString = ""
                let pointer = bytes.baseAddress ?? UnsafeRawPointer(empty.utf8Start)
                return pw_curl_easy_setopt_ptr(h, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: pointer))
            })
        }

        if applied.headers != request.headers || applied.sendsBody != sendsBody || easy.headerList == nil {
            let list = HeaderList()
            var listOK = true
            var hasContentType = false
            for field in request.headers {
                if HTTPHeaders.equalsIgnoringCase(field.name, "Content-Type") { hasContentType = true }
                // "Name:" would tell curl to remove the header; "Name;" sends it with an empty value.
                listOK = listOK && list.append(field.value.isEmpty ? "\(field.name);" : "\(field.name): \(field.value)")
            }
            // No `Expect: 100-continue` round trip, and no made-up form content type for a bare body.
            listOK = listOK && list.append("Expect:")
            if sendsBody && !hasContentType { listOK = listOK && list.append("Content-Type:") }
            guard listOK else {
                easy.forgetOptions()
                applied = easy.applied
                return HTTPClientError(kind: .other, detail: "out of memory")
            }
            // The old list may go only once curl points at the new one.
            check(pw_curl_easy_setopt_slist(h, CURLOPT_HTTPHEADER, list.raw))
            easy.headerList = list
            applied.headers = request.headers
        }
        applied.sendsBody = sendsBody

        guard rc == CURLE_OK else {
            easy.forgetOptions()
            applied = easy.applied
            return HTTPClientError(code: rc, exceededLimit: false)
        }
        return nil
    }
}
