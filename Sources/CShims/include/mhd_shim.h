#ifndef PW_MHD_SHIM_H
#define PW_MHD_SHIM_H
#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>
// Owned by the HTTPServer wrapper. Typed forwarders for libmicrohttpd's variadic functions.

/// Why pw_listen_socket failed.
enum pw_mhd_start_error {
    PW_MHD_OK = 0,
    /// `host` is neither an IPv4 nor an IPv6 literal.
    PW_MHD_BAD_HOST = 1,
    /// socket, bind or listen failed (port in use, limits, ...); `*errno_out` holds errno.
    PW_MHD_START_FAILED = 2,
};

/// Called with the raw request-target (path and query, undecoded) once the request line is parsed;
/// its return value becomes the request's `*req_cls` in the access handler.
typedef void *(*pw_mhd_uri_log_callback)(void *cls, const char *uri, struct MHD_Connection *connection);

/// Writes the client's IP address (no port) as a NUL-terminated string into `buffer`.
/// Returns 0 on success, -1 when the address is unknown or does not fit.
int pw_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t buffer_size);

/// A listening TCP socket on `host` (an IPv4 or IPv6 literal) and `port` (0 = any free port),
/// non-blocking and close-on-exec, with SO_REUSEADDR and SO_REUSEPORT so that one socket per
/// event loop can share the port and the kernel spreads connections over them. IPv6 sockets are
/// IPv6-only. Returns the descriptor (the caller owns it) or -1 with `*error_out` and
/// `*errno_out`; `*is_ipv6` tells the family.
///
/// With `guard` set, the socket is only bound, with SO_REUSEADDR but without SO_REUSEPORT and
/// without listening: the bind fails when anyone listens on the port (SO_REUSEPORT alone would
/// let a second server silently share it), and while it is held, this process's own
/// SO_REUSEPORT listeners may still bind the port (a bound, non-listening SO_REUSEADDR socket
/// does not conflict with them). Close it once they are bound.
int pw_listen_socket(const char *host, uint16_t port, int backlog, int guard, int *is_ipv6, int *error_out, int *errno_out);

/// The local port of a bound socket, or 0.
uint16_t pw_socket_port(int fd);

/// What `pw_mhd_start_external` starts a daemon with. Every callback gets `cls`.
struct pw_mhd_settings {
    /// MHD_USE_* flags; must include MHD_USE_EPOLL (and MHD_USE_IPv6 for an IPv6 socket).
    unsigned int flags;
    int listen_fd;
    void *cls;
    MHD_AccessHandlerCallback access_cb;
    MHD_RequestCompletedCallback completed_cb;
    pw_mhd_uri_log_callback uri_log_cb;
    /// Asked for every accepted connection, with the client's address; MHD_NO closes it.
    MHD_AcceptPolicyCallback accept_cb;
    /// Told when a connection starts and when it is closed (MHD_OPTION_NOTIFY_CONNECTION).
    MHD_NotifyConnectionCallback connection_cb;
    unsigned int connection_limit;
    unsigned int connection_timeout_seconds;
    size_t connection_memory_limit;
};

/// Starts a daemon without threads of its own on an existing listening socket: the caller runs
/// it with MHD_run from one event loop thread when `pw_mhd_epoll_fd` is ready or the timeout
/// passes. Returns the daemon, which the caller owns (MHD_stop_daemon exactly once), or NULL with
/// `*errno_out`.
struct MHD_Daemon *pw_mhd_start_external(const struct pw_mhd_settings *settings, int *errno_out);

/// The client address as a 128-bit key: an IPv6 address as it is, an IPv4 address in its
/// IPv4-mapped IPv6 form (::ffff:a.b.c.d). Returns 0, or -1 for another family.
int pw_sockaddr_key(const struct sockaddr *addr, socklen_t length, uint64_t *high, uint64_t *low);

/// What the notify-connection callback stored in `*socket_context` (MHD_CONNECTION_INFO_SOCKET_CONTEXT), or NULL.
void *pw_mhd_socket_context(struct MHD_Connection *connection);

/// Shuts the connection's socket down both ways (shutdown(2), not close: the descriptor stays
/// MHD's). MHD sees the end on its next run and closes the connection as if the client had left.
/// Returns 0, or -1 when the descriptor is unknown or shutdown failed.
int pw_mhd_shutdown_connection(struct MHD_Connection *connection);

/// The daemon's epoll descriptor (MHD_DAEMON_INFO_EPOLL_FD), or -1.
int pw_mhd_epoll_fd(struct MHD_Daemon *daemon);

/// Milliseconds until MHD_run is due even without activity (MHD_get_timeout), or -1 for never.
int64_t pw_mhd_timeout_millis(struct MHD_Daemon *daemon);
#endif
