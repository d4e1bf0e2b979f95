#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "mhd_head_scan.h"

/* RFC 9110 §5.6.2 tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        return true;
    }
    switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
        return true;
    default:
        return false;
    }
}

struct head_scan {
    /* Where the next line must start: right after the previous line's CRLF. */
    const char *cursor;
    /* One past the empty line that ends the head. */
    const char *end;
    enum pw_head_problem problem;
};

/* MHD_KeyValueIteratorN over the header fields, in arrival order. Positions are compared before
 * any byte outside a field's own NUL-terminated name and value is read: each field must start
 * where the previous line's CRLF ended and end before the head does, so every byte looked at
 * lies between two places MHD itself points at, inside its one read buffer. A folded line's
 * name is moved out of that buffer by MHD, so it fails the comparison. */
static enum MHD_Result scan_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                  const char *value, size_t value_size)
{
    (void) kind;
    struct head_scan *scan = cls;
    if (NULL == key || NULL == value || key != scan->cursor || '\0' != key[-1]) {
        /* Not where the previous line's CRLF ended: a bare LF, a NUL and more after the
         * previous value, or a folded line. */
        scan->problem = PW_HEAD_BAD_LINE;
        return MHD_NO;
    }
    if (0 == key_size) {
        scan->problem = PW_HEAD_BAD_NAME;
        return MHD_NO;
    }
    for (size_t i = 0; i < key_size; i++) {
        if (!is_tchar((unsigned char) key[i])) {
            scan->problem = PW_HEAD_BAD_NAME;
            return MHD_NO;
        }
    }
    /* The colon (now a NUL), optional whitespace, then the value. */
    const char *after_colon = key + key_size + 1;
    if (value < after_colon || value_size > (size_t) (scan->end - value) || value + value_size + 2 > scan->end) {
        scan->problem = PW_HEAD_BAD_LINE;
        return MHD_NO;
    }
    for (const char *p = after_colon; p < value; p++) {
        if (' ' != *p && '\t' != *p) {
            scan->problem = PW_HEAD_BAD_LINE;
            return MHD_NO;
        }
    }
    for (size_t i = 0; i < value_size; i++) {
        unsigned char c = (unsigned char) value[i];
        if ((c < 0x20 && '\t' != c) || 0x7F == c) {
            scan->problem = PW_HEAD_BAD_VALUE;
            return MHD_NO;
        }
    }
    /* value[value_size] is the NUL that ended the value: the CR of CRLF (or a NUL the client
     * sent); the LF must be the next byte, which the next field or the end checks. */
    scan->cursor = value + value_size + 2;
    return MHD_YES;
}

enum pw_head_problem pw_mhd_scan_head(struct MHD_Connection *connection, const char *method, const char *version,
                                      size_t target_length)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (NULL == info || NULL == method || NULL == version) {
        return PW_HEAD_BAD_LINE;
    }
    const char *end = method + info->header_size;
    /* "HTTP/x.y" (MHD accepts exactly 8 bytes) then CRLF, inside the head, after the method. */
    if (version <= method || version + 10 > end) {
        return PW_HEAD_BAD_LINE;
    }
    if ('\0' == method[0]) {
        return PW_HEAD_BAD_METHOD;
    }
    for (const char *p = method; '\0' != *p; p++) {
        if (!is_tchar((unsigned char) *p)) {
            return PW_HEAD_BAD_METHOD;
        }
    }
    /* method NUL target NUL version: MHD put NULs where the two spaces were and decodes the
     * target in place, so only its length can be compared with what the URI-log callback saw.
     * Extra spaces (which MHD skips) or a NUL in the target make the lengths differ. */
    size_t method_length = strlen(method);
    if (method + method_length + 1 + target_length + 1 != version) {
        return PW_HEAD_BAD_REQUEST_LINE;
    }
    struct head_scan scan = { .cursor = version + 10, .end = end, .problem = PW_HEAD_OK };
    (void) MHD_get_connection_values_n(connection, MHD_HEADER_KIND, scan_field, &scan);
    if (PW_HEAD_OK != scan.problem) {
        return scan.problem;
    }
    /* The last line's LF, then the empty line's CRLF, and nothing after them. */
    if (scan.cursor + 2 != end || '\0' != scan.cursor[-1] || '\0' != end[-2] || '\0' != end[-1]) {
        return PW_HEAD_BAD_LINE;
    }
    return PW_HEAD_OK;
}
