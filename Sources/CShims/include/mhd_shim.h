#ifndef PW_MHD_SHIM_H
#define PW_MHD_SHIM_H
#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>
// Owned by the HTTPServer wrapper. Typed forwarders for libmicrohttpd's variadic functions.

/// Why pw_mhd_start failed.
enum pw_mhd_start_error {
    PW_MHD_OK = 0,
    /// `host` is neither an IPv4 nor an IPv6 literal.
    PW_MHD_BAD_HOST = 1,
    /// MHD_start_daemon returned NULL (port in use, limits, ...); `*errno_out` holds errno.
    PW_MHD_START_FAILED = 2,
};

/// Called with the raw request-target (path and query, undecoded) once the request line is parsed;
/// its return value becomes the request's `*req_cls` in the access handler.
typedef void *(*pw_mhd_uri_log_callback)(void *cls, const char *uri, struct MHD_Connection *connection);

/// Starts a daemon bound to `host` (an IPv4 or IPv6 literal) and `port` (0 = any free port).
/// Adds MHD_USE_IPv6 to `flags` when `host` is an IPv6 literal. The sockaddr only has to live
/// during the call (MHD binds inside MHD_start_daemon), so it stays on this function's stack.
/// Returns the daemon, which the caller owns and must pass to MHD_stop_daemon exactly once.
struct MHD_Daemon *pw_mhd_start(unsigned int flags,
                                const char *host,
                                uint16_t port,
                                MHD_AccessHandlerCallback access_cb,
                                void *access_cls,
                                MHD_RequestCompletedCallback completed_cb,
                                void *completed_cls,
                                pw_mhd_uri_log_callback uri_log_cb,
                                void *uri_log_cls,
                                unsigned int thread_pool_size,
                                unsigned int connection_limit,
                                unsigned int per_ip_connection_limit,
                                unsigned int connection_timeout_seconds,
                                size_t connection_memory_limit,
                                int *error_out,
                                int *errno_out);

/// The port the daemon is bound to (MHD_DAEMON_INFO_BIND_PORT), or 0 when unknown.
uint16_t pw_mhd_bound_port(struct MHD_Daemon *daemon);

/// Writes the client's IP address (no port) as a NUL-terminated string into `buffer`.
/// Returns 0 on success, -1 when the address is unknown or does not fit.
int pw_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t buffer_size);

#endif
