import CMicroHTTPD
import CShims
import Glibc
import PWCore

/// The checks a request head passes before the handler sees it, beyond what libmicrohttpd
/// 0.9.75 checks itself: anything a proxy in front could frame or read differently is refused,
/// and the connection closed, so that a body framed another way never becomes a second request
/// (RFC 9112 §6.1, §6.3; request smuggling).
///
/// - the head's syntax (`pw_mhd_scan_head`): CRLF line endings only, no obs-fold, token field
///   names (no whitespace before the colon), no NUL or other control characters in values, a
///   request line of single spaces whose target MHD did not cut at a NUL;
/// - the target: no space or control character;
/// - Host: exactly one in HTTP/1.1, at most one in HTTP/1.0;
/// - framing: not both Content-Length and Transfer-Encoding; Content-Length lines that agree;
///   Transfer-Encoding exactly `chunked` (anything else is 501, `chunked` with trailing white
///   space 400), and none in HTTP/1.0.
///
/// MHD itself refuses a Content-Length that is not all digits (a comma list included) with its
/// own 400 before the handler is called; see `HTTPServer` for the answers that remain MHD's.
/// Runs on the connection's loop in the first access call; allocates nothing when the head is
/// fine.
enum RequestFraming {
    static func refusal(connection: OpaquePointer, method: UnsafePointer<CChar>, version: UnsafePointer<CChar>?,
                        head: HTTPRequestHead, rawTargetLength: Int) -> HTTPRefusal? {
        guard let version else { return HTTPRefusal(.malformedHead, "malformed request line") }
        switch pw_mhd_scan_head(connection, method, version, rawTargetLength) {
        case PW_HEAD_OK:
            break
        case PW_HEAD_BAD_NAME:
            return HTTPRefusal(.malformedHead, "malformed header field name (no whitespace before the colon)")
        case PW_HEAD_BAD_VALUE:
            return HTTPRefusal(.malformedHead, "header field values must not contain control characters")
        case PW_HEAD_BAD_METHOD, PW_HEAD_BAD_REQUEST_LINE:
            return HTTPRefusal(.malformedHead, "malformed request line")
        default:
            return HTTPRefusal(.malformedHead, "malformed request head: lines must end in CRLF and must not be folded")
        }
        for byte in head.path.utf8 where byte <= 0x20 || byte == 0x7F {
            return HTTPRefusal(.malformedHead, "the request target must not contain spaces or control characters")
        }
        for byte in head.query.utf8 where byte <= 0x20 || byte == 0x7F {
            return HTTPRefusal(.malformedHead, "the request target must not contain spaces or control characters")
        }
        return framing(head.headers, isHTTP10: strcmp(version, "HTTP/1.0") == 0)
    }

    private static func framing(_ headers: HTTPHeaders, isHTTP10: Bool) -> HTTPRefusal? {
        var hosts = 0
        var length: String?
        var lengthsDiffer = false
        var encodings = 0
        var encoding: String?
        for field in headers {
            switch field.name.utf8.count {
            case 4 where HTTPHeaders.equalsIgnoringCase(field.name, "Host"):
                hosts += 1
            case 14 where HTTPHeaders.equalsIgnoringCase(field.name, "Content-Length"):
                if let length, length != field.value { lengthsDiffer = true }
                length = field.value
            case 17 where HTTPHeaders.equalsIgnoringCase(field.name, "Transfer-Encoding"):
                encodings += 1
                encoding = field.value
            default:
                break
            }
        }
        if hosts > 1 || (hosts == 0 && !isHTTP10) {
            return HTTPRefusal(.badHost, "an HTTP/1.1 request needs exactly one Host header")
        }
        if encodings > 0 {
            if length != nil {
                return HTTPRefusal(.conflictingFraming, "a request must not carry both Content-Length and Transfer-Encoding")
            }
            if isHTTP10 {
                return HTTPRefusal(.conflictingFraming, "Transfer-Encoding is not allowed in an HTTP/1.0 request")
            }
            switch encodings == 1 ? encoding.map(chunkedSpelling) : nil {
            case .exact?:
                break
            case .trailingWhiteSpace?:
                // MHD compares the value whole, so it would read this body until the connection closed.
                return HTTPRefusal(.conflictingFraming, "Transfer-Encoding: chunked must not be followed by white space")
            case .other?, nil:
                return HTTPRefusal(.unsupportedTransferEncoding, status: 501, "only Transfer-Encoding: chunked is supported")
            }
        }
        if lengthsDiffer {
            return HTTPRefusal(.conflictingFraming, "conflicting Content-Length values")
        }
        return nil
    }

    enum ChunkedSpelling: Equatable {
        /// `chunked` in any case: what MHD frames as chunked.
        case exact
        /// `chunked` followed by spaces or tabs (MHD keeps trailing white space in values).
        case trailingWhiteSpace
        case other
    }

    /// How a `Transfer-Encoding` value spells `chunked`. RFC 9110 §5.5 excludes trailing white
    /// space from a field value, but MHD 0.9.75 does not strip it and then neither frames the
    /// body as chunked nor refuses it: such a request would wait for an answer that never comes.
    static func chunkedSpelling(_ value: String) -> ChunkedSpelling {
        var trimmed = Substring(value)
        while let last = trimmed.utf8.last, last == 0x20 || last == 0x09 { trimmed = trimmed.dropLast() }
        guard HTTPHeaders.equalsIgnoringCase(String(trimmed), "chunked") else { return .other }
        return trimmed.utf8.count == value.utf8.count ? .exact : .trailingWhiteSpace
    }
}
