internal import CCurl
internal import CShims
#if canImport(Glibc)
import Glibc
#endif
import PWCore

/// One curl multi handle and the transfers it runs: the part of the client that is the same
/// whether a thread of its own drives it (``ClientThread``) or an event loop of the caller's does
/// (``LoopMulti``).
///
/// The driver adds transfers, hands ready sockets and due timeouts to
/// `curl_multi_socket_action`, and completes transfers as curl reports them done. Easy handles are
/// kept for reuse with their options (`configure` sets only what differs).
///
/// Confined to the thread that drives it; `deinit` (on that thread) leaves the multi handle,
/// whose last reference closes the cached connections.
final class MultiDriver {
    private(set) var multi: MultiHandle
    private let configuration: HTTPClientConfiguration
    private var active: [UInt: Transfer] = [:]
    private var spare: [EasyHandle] = []
    private let spareLimit: Int
    /// Idle easy handles kept at most. Each keeps the buffers of its last transfer (libcurl's
    /// download buffer, and its upload buffer once it has sent a body), so after a burst of
    /// hundreds of concurrent calls, keeping every one held that memory for good; under steady
    /// load the handles in use are in flight, not spare, so a few dozen spares serve it.
    private static let spareLimit = 64
    /// Spares (and, on a loop, the cached connections) go once no transfer has run for this long:
    /// a burst's handles and connections are scattered over the heap and pin its pages, so they
    /// are given back; steady load keeps them. Servers commonly close keep-alive connections
    /// idle this long anyway (Apache's and Node's default).
    static let idleNanos: UInt64 = 5_000_000_000
    /// When a transfer last ran here (monotonic nanoseconds, as of a `settle`).
    private var lastBusy: UInt64 = 0
    /// A transfer was added since the last `settle` (it may have finished before it).
    private var startedSinceSettle = false
    /// A transfer ran on this multi handle, so it may hold connections.
    private var usedSinceRenewal = false
    private let timeoutSocket = pw_curl_socket_timeout()
    /// Set when a transfer was added since curl last had a timeout call: curl then owes it one.
    private var needsKick = false

    /// - Throws: `.other` when curl is not initialised or rejects the connection limits.
    init(configuration: HTTPClientConfiguration) throws(HTTPClientError) {
        guard CurlGlobal.initialized else { throw HTTPClientError(kind: .other, detail: "curl_global_init failed") }
        self.multi = try Self.makeMulti(configuration)
        self.configuration = configuration
        self.spareLimit = max(1, min(Self.spareLimit, configuration.maxTotalConnections))
    }

    private static func makeMulti(_ configuration: HTTPClientConfiguration) throws(HTTPClientError) -> MultiHandle {
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
        return multi
    }

    deinit {
        failAll(.shutdown)
        spare.removeAll()
    }

    /// Adds `transfer` to the multi handle, or finishes it at once when it was cancelled or cannot
    /// start.
    func begin(_ transfer: Transfer) {
        if transfer.cancelRequested.load(ordering: .acquiring) {
            transfer.finish(.failure(.cancelled))
            return
        }
        guard let easy = spare.popLast() ?? EasyHandle() else {
            transfer.finish(.failure(HTTPClientError(kind: .other, detail: "curl_easy_init failed")))
            return
        }
        if let error = configure(easy, for: transfer) {
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
        needsKick = true
        startedSinceSettle = true
        usedSinceRenewal = true
    }

    /// Ends `transfer` with `.cancelled` if it is still running here.
    func cancel(_ transfer: Transfer) {
        guard let easy = transfer.easy, active[UInt(bitPattern: easy.raw)] === transfer else { return }
        complete(transfer, .failure(.cancelled))
    }

    /// Ends every running transfer with `error`.
    func failAll(_ error: HTTPClientError) {
        for transfer in Array(active.values) { complete(transfer, .failure(error)) }
    }

    /// Hands one ready socket to curl (`CURL_CSELECT_*` flags).
    func socketReady(_ socket: Int32, _ flags: Int32) {
        var running: Int32 = 0
        _ = curl_multi_socket_action(multi.raw, socket, flags, &running)
    }

    /// Gives curl the timeout call it owes it (new transfers, or its deadline passed), then
    /// completes the transfers curl reports done, and lets idle spares go.
    func settle(now: UInt64) {
        if multi.poller.takeDueTimeout() || needsKick {
            needsKick = false
            socketReady(timeoutSocket, 0)
        }
        drainMessages()
        if startedSinceSettle || !active.isEmpty {
            startedSinceSettle = false
            lastBusy = now
        } else if !spare.isEmpty, isIdle(now: now) {
            spare.removeAll()
        }
    }

    private func isIdle(now: UInt64) -> Bool {
        active.isEmpty && !startedSinceSettle && now >= lastBusy && now - lastBusy >= Self.idleNanos
    }

    /// When idle spares or connections are due to go, for a thread that would otherwise sleep
    /// through it.
    var idleDeadline: UInt64? {
        spare.isEmpty && !usedSinceRenewal ? nil : lastBusy &+ Self.idleNanos
    }

    /// Whether `renew` would close connections now: none ran for `idleNanos`.
    func connectionsIdle(now: UInt64) -> Bool {
        usedSinceRenewal && isIdle(now: now)
    }

    /// Replaces the multi handle with a new one, closing the old one's cached connections (curl
    /// has no call that closes idle connections alone). The caller stops watching the old
    /// handle's descriptor first and watches the new one's after. Keeps the old handle when a
    /// new one cannot be made.
    func renew() {
        guard active.isEmpty else { return }
        spare.removeAll()
        // Not tried again until the handle is used again, even if this attempt fails.
        usedSinceRenewal = false
        if let fresh = try? Self.makeMulti(configuration) { multi = fresh }
    }

    private func drainMessages() {
        var queued: Int32 = 0
        while let message = curl_multi_info_read(multi.raw, &queued) {
            guard pw_curl_msg_is_done(message) != 0, let raw = message.pointee.easy_handle,
                let transfer = active[UInt(bitPattern: raw)]
            else { continue }
            complete(transfer, outcome(of: transfer, raw: raw, code: pw_curl_msg_result(message)))
        }
    }

    private func complete(_ transfer: Transfer, _ outcome: Transfer.Outcome) {
        if let easy = transfer.easy {
            active.removeValue(forKey: UInt(bitPattern: easy.raw))
            curl_multi_remove_handle(multi.raw, easy.raw)
            recycle(easy)
        }
        transfer.easy = nil
        transfer.finish(outcome)
    }

    /// Options stay on the handle; `configure` overwrites what the next transfer needs differently.
    /// The transfer pointers are cleared so no callback can reach a finished transfer.
    private func recycle(_ easy: EasyHandle) {
        _ = pw_curl_easy_setopt_ptr(easy.raw, CURLOPT_WRITEDATA, nil)
        _ = pw_curl_easy_setopt_ptr(easy.raw, CURLOPT_HEADERDATA, nil)
        if spare.count < spareLimit { spare.append(easy) }
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
    private func configureBase(_ h: UnsafeMutableRawPointer, check: (CURLcode) -> Void) {
        let poller = multi.poller
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
    private func configure(_ easy: EasyHandle, for transfer: Transfer) -> HTTPClientError? {
        let h = easy.raw
        let request = transfer.request
        var rc = CURLE_OK
        func check(_ r: CURLcode) { if rc == CURLE_OK { rc = r } }
        func long(_ option: CURLoption, _ value: Int) { check(pw_curl_easy_setopt_long(h, option, value)) }
        func string(_ option: CURLoption, _ value: String) { check(pw_curl_easy_setopt_str(h, option, value)) }
        func clear(_ option: CURLoption) { check(pw_curl_easy_setopt_ptr(h, option, nil)) }

        if !easy.baseConfigured {
            configureBase(h, check: check)
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
