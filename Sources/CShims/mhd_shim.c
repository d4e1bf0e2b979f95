#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "mhd_shim.h"

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
                                int *errno_out)
{
    struct sockaddr_storage storage;
    memset(&storage, 0, sizeof(storage));
    struct sockaddr_in *v4 = (struct sockaddr_in *) &storage;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) &storage;

    *error_out = PW_MHD_OK;
    *errno_out = 0;
    if (1 == inet_pton(AF_INET, host, &v4->sin_addr)) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
    } else if (1 == inet_pton(AF_INET6, host, &v6->sin6_addr)) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        flags |= MHD_USE_IPv6;
    } else {
        *error_out = PW_MHD_BAD_HOST;
        return NULL;
    }

    errno = 0;
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, port, NULL, NULL, access_cb, access_cls,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &storage,
        MHD_OPTION_NOTIFY_COMPLETED, completed_cb, completed_cls,
        MHD_OPTION_URI_LOG_CALLBACK, uri_log_cb, uri_log_cls,
        MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        /* Strict parsing: an HTTP/1.1 request without Host, or with malformed header lines,
           gets 400 instead of reaching the application. */
        MHD_OPTION_STRICT_FOR_CLIENT, (int) 1,
        MHD_OPTION_END);
    if (NULL == daemon) {
        *error_out = PW_MHD_START_FAILED;
        *errno_out = errno;
    }
    return daemon;
}

uint16_t pw_mhd_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return (NULL == info) ? 0 : info->port;
}

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
