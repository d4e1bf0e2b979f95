#ifndef PW_MHD_HEAD_SCAN_H
#define PW_MHD_HEAD_SCAN_H
#include <microhttpd.h>
// Owned by the HTTPServer wrapper: checks of the request head that libmicrohttpd 0.9.75 does not make.

/// What `pw_mhd_scan_head` found wrong with a request head.
enum pw_head_problem {
    PW_HEAD_OK = 0,
    /// A line does not end in CRLF (a bare LF), a field line is folded (obs-fold), or the head is
    /// otherwise not laid out as CRLF-terminated `name: value` lines.
    PW_HEAD_BAD_LINE = 1,
    /// A field name is empty or not a token (whitespace before the colon, say).
    PW_HEAD_BAD_NAME = 2,
    /// A field value holds a NUL, a bare CR or another control character (HTAB aside).
    PW_HEAD_BAD_VALUE = 3,
    /// The method is not a token.
    PW_HEAD_BAD_METHOD = 4,
    /// The request line is not `method SP target SP version` with single spaces, or the target
    /// holds a NUL (MHD would read it cut short).
    PW_HEAD_BAD_REQUEST_LINE = 5,
};

/// Checks the head of the request on `connection` as it sits in libmicrohttpd's read buffer,
/// from the first access-handler call (headers processed, body not yet read). `method` and
/// `version` are that call's arguments, `target_length` the length of the raw target the
/// URI-log callback saw (before MHD decoded it in place). In 0.9.75 `method` and `version` they point into the buffer, where the request
/// line and the header lines lie one after another, each line's CRLF (or bare LF) and each
/// field's colon overwritten with NULs, with MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE bytes from
/// `method` to the end of the empty line. The scan reads only inside that range and allocates
/// nothing. Any layout it does not recognise is a problem, so a libmicrohttpd that parses
/// differently refuses requests rather than letting one through unchecked.
enum pw_head_problem pw_mhd_scan_head(struct MHD_Connection *connection, const char *method, const char *version,
                                      size_t target_length);
#endif
