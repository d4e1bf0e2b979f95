internal import CCurl
internal import CShims
import PWCore

/// `curl_global_init` must run once before any other curl call; a `static let` gives us
/// thread-safe, exactly-once initialisation. We never call `curl_global_cleanup`: the library
/// stays initialised for the life of the process.
enum CurlGlobal {
    static let initialized: Bool = curl_global_init(pw_curl_global_default()) == CURLE_OK
}

/// Sole owner of one `CURL *` (https://curl.se/libcurl/c/curl_easy_init.html), and of the header
/// list it points at.
///
/// Reused across transfers without `curl_easy_reset`: options set once at creation stay, and
/// `applied` remembers the per-transfer values last set, so the next transfer sets only what
/// differs (curl keeps every option until it is changed).
///
/// Not thread-safe: only the thread driving its multi handle touches it. The handle must be removed from its
/// multi handle before the last reference goes away.
final class EasyHandle {
    /// The per-transfer option values currently set on the handle.
    struct Applied {
        var url: String?
        var pipeWait = false
        var timeoutMillis = -1
        var connectTimeoutMillis = -1
        var method: String?
        /// The request headers and body flag `headerList` was built from.
        var headers: HTTPHeaders?
        var sendsBody = false
    }

    let raw: UnsafeMutableRawPointer
    var applied = Applied()
    /// Set as CURLOPT_HTTPHEADER while the handle lives; curl reads it during every transfer.
    var headerList: HeaderList?
    /// Whether the options that never change between transfers have been set.
    var baseConfigured = false

    init?() {
        guard let raw = curl_easy_init() else { return nil }
        self.raw = raw
    }

    /// After a failed setopt the handle's options are unknown: start again from curl's defaults.
    func forgetOptions() {
        curl_easy_reset(raw)
        applied = Applied()
        headerList = nil
        baseConfigured = false
    }

    // curl_easy_cleanup no longer reads the header list, so the list may go after it.
    deinit { curl_easy_cleanup(raw) }
}

/// Sole owner of one `CURLM *` and, through it, the connection cache, DNS cache and the HTTP/2
/// sessions every transfer shares. Also owns the `SocketPoller` curl's socket and timer callbacks
/// act on, so the poller outlives `curl_multi_cleanup` (whose callbacks still reach it).
///
/// Only `wakeup()` may be called from a thread other than the one driving it (it only writes to the
/// poller's wake pipe); callers do so while holding the ``ClientThread``'s state lock, which is also where the
/// loop drops its last reference.
final class MultiHandle: @unchecked Sendable {
    let raw: UnsafeMutableRawPointer
    let poller: SocketPoller

    init?() {
        guard let poller = SocketPoller() else { return nil }
        guard let raw = curl_multi_init() else { return nil }
        self.raw = raw
        self.poller = poller
        let context = Unmanaged.passUnretained(poller).toOpaque()
        let results = [
            pw_curl_multi_setopt_socketfunction(raw, curlSocketCallback),
            pw_curl_multi_setopt_ptr(raw, CURLMOPT_SOCKETDATA, context),
            pw_curl_multi_setopt_timerfunction(raw, curlTimerCallback),
            pw_curl_multi_setopt_ptr(raw, CURLMOPT_TIMERDATA, context),
        ]
        guard results.allSatisfy({ $0 == CURLM_OK }) else { return nil }
    }

    func wakeup() { poller.wake() }

    deinit { curl_multi_cleanup(raw) }
}

/// Sole owner of one `curl_slist` of request header lines (https://curl.se/libcurl/c/curl_slist_append.html).
/// It must outlive every transfer that points at it; the owning `EasyHandle` keeps it while the
/// handle is set to it.
final class HeaderList {
    private(set) var raw: UnsafeMutablePointer<curl_slist>?

    init() {}

    /// curl copies `line`. Returns false when out of memory.
    func append(_ line: String) -> Bool {
        guard let next = curl_slist_append(raw, line) else { return false }
        raw = next
        return true
    }

    deinit { curl_slist_free_all(raw) }
}

extension HTTPClientError {
    /// Only `curl_easy_strerror`'s static text is kept: curl's error buffer can echo the URL.
    init(code: CURLcode, exceededLimit: Bool) {
        let text = String(cString: curl_easy_strerror(code))
        let kind: Kind
        switch code {
        case CURLE_OPERATION_TIMEDOUT:
            kind = .timeout
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            kind = .connect
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_ENGINE_NOTFOUND,
            CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_ENGINE_INITFAILED,
            CURLE_SSL_CACERT_BADFILE, CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR,
            CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS, CURLE_SSL_CLIENTCERT, CURLE_USE_SSL_FAILED:
            kind = .tls
        case CURLE_FILESIZE_EXCEEDED:
            kind = .tooLarge
        case CURLE_WRITE_ERROR where exceededLimit:
            kind = .tooLarge
        case CURLE_GOT_NOTHING, CURLE_WEIRD_SERVER_REPLY, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM,
            CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_BAD_CONTENT_ENCODING, CURLE_HTTP3, CURLE_TOO_MANY_REDIRECTS:
            kind = .protocolError
        default:
            kind = .other
        }
        self.init(kind: kind, detail: exceededLimit ? "response exceeds maxResponseBytes" : text)
    }
}
