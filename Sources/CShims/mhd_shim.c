#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "mhd_shim.h"

int pw_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t buffer_size)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (NULL == info || NULL == info->client_addr) {
        return -1;
    }
    const struct sockaddr *addr = info->client_addr;
    const void *raw;
    if (AF_INET == addr->sa_family) {
        raw = &((const struct sockaddr_in *) addr)->sin_addr;
    } else if (AF_INET6 == addr->sa_family) {
        raw = &((const struct sockaddr_in6 *) addr)->sin6_addr;
    } else {
        return -1;
    }
    if (buffer_size > (size_t) INT32_MAX) {
        buffer_size = (size_t) INT32_MAX;
    }
    return (NULL == inet_ntop(addr->sa_family, raw, buffer, (socklen_t) buffer_size)) ? -1 : 0;
}

#include <fcntl.h>
#include <unistd.h>

int pw_listen_socket(const char *host, uint16_t port, int backlog, int guard, int *is_ipv6, int *error_out, int *errno_out)
{
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof(storage));
    struct sockaddr_in *v4 = (struct sockaddr_in *) &storage;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) &storage;
    socklen_t length;

    *error_out = PW_MHD_OK;
    *errno_out = 0;
    *is_ipv6 = 0;
    if (1 == inet_pton(AF_INET, host, &v4->sin_addr)) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        length = sizeof(*v4);
    } else if (1 == inet_pton(AF_INET6, host, &v6->sin6_addr)) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        length = sizeof(*v6);
        *is_ipv6 = 1;
    } else {
        *error_out = PW_MHD_BAD_HOST;
        return -1;
    }
    int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *error_out = PW_MHD_START_FAILED;
        *errno_out = errno;
        return -1;
    }
    int on = 1;
    (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (*is_ipv6) {
        /* "::" means IPv6 only, as MHD itself does; IPv4 clients use an IPv4 listener. */
        (void) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    }
    if ((!guard && 0 != setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)))
        || 0 != bind(fd, (struct sockaddr *) &storage, length)
        || (!guard && 0 != listen(fd, backlog))) {
        *error_out = PW_MHD_START_FAILED;
        *errno_out = errno;
        close(fd);
        return -1;
    }
    return fd;
}

uint16_t pw_socket_port(int fd)
{
    struct sockaddr_storage storage;
    socklen_t length = sizeof(storage);
    if (0 != getsockname(fd, (struct sockaddr *) &storage, &length)) {
        return 0;
    }
    if (AF_INET == storage.ss_family) {
        return ntohs(((struct sockaddr_in *) &storage)->sin_port);
    }
    if (AF_INET6 == storage.ss_family) {
        return ntohs(((struct sockaddr_in6 *) &storage)->sin6_port);
    }
    return 0;
}

struct MHD_Daemon *pw_mhd_start_external(const struct pw_mhd_settings *settings, int *errno_out)
{
    *errno_out = 0;
    errno = 0;
    struct MHD_Daemon *daemon = MHD_start_daemon(
        settings->flags, 0, settings->accept_cb, settings->cls, settings->access_cb, settings->cls,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket) settings->listen_fd,
        MHD_OPTION_NOTIFY_CONNECTION, settings->connection_cb, settings->cls,
        MHD_OPTION_NOTIFY_COMPLETED, settings->completed_cb, settings->cls,
        MHD_OPTION_URI_LOG_CALLBACK, settings->uri_log_cb, settings->cls,
        MHD_OPTION_CONNECTION_LIMIT, settings->connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, settings->connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, settings->connection_memory_limit,
        /* 0, not 1: at 1, MHD answers a missing Host with its own HTML page and closes a target
         * with a space without any answer; the wrapper checks both itself (RequestFraming) and
         * answers in the contract's envelope. Nothing else in 0.9.75 depends on the level. */
        MHD_OPTION_STRICT_FOR_CLIENT, (int) 0,
        MHD_OPTION_END);
    if (NULL == daemon) {
        *errno_out = errno;
    }
    return daemon;
}

int pw_mhd_epoll_fd(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return (NULL == info) ? -1 : info->epoll_fd;
}

int64_t pw_mhd_timeout_millis(struct MHD_Daemon *daemon)
{
    MHD_UNSIGNED_LONG_LONG timeout = 0;
    if (MHD_YES != MHD_get_timeout(daemon, &timeout)) {
        return -1;
    }
    return (timeout > (MHD_UNSIGNED_LONG_LONG) INT64_MAX) ? INT64_MAX : (int64_t) timeout;
}

int pw_sockaddr_key(const struct sockaddr *addr, socklen_t length, uint64_t *high, uint64_t *low)
{
    uint8_t bytes[16];
    if (NULL == addr) {
        return -1;
    }
    if (AF_INET == addr->sa_family && length >= (socklen_t) sizeof(struct sockaddr_in)) {
        memset(bytes, 0, 10);
        bytes[10] = 0xff;
        bytes[11] = 0xff;
        memcpy(bytes + 12, &((const struct sockaddr_in *) addr)->sin_addr, 4);
    } else if (AF_INET6 == addr->sa_family && length >= (socklen_t) sizeof(struct sockaddr_in6)) {
        memcpy(bytes, &((const struct sockaddr_in6 *) addr)->sin6_addr, 16);
    } else {
        return -1;
    }
    memcpy(high, bytes, 8);
    memcpy(low, bytes + 8, 8);
    return 0;
}

void *pw_mhd_socket_context(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return (NULL == info) ? NULL : info->socket_context;
}

int pw_mhd_shutdown_connection(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (NULL == info || MHD_INVALID_SOCKET == info->connect_fd) {
        return -1;
    }
    return shutdown(info->connect_fd, SHUT_RDWR);
}
