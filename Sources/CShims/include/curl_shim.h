#ifndef PW_CURL_SHIM_H
#define PW_CURL_SHIM_H
#include <curl/curl.h>
#ifdef __linux__
// The HTTP client's event loop drives curl's socket interface with epoll, which Glibc's Swift
// module does not export.
#include <sys/epoll.h>
#endif
// Owned by the HTTPClient wrapper.
//
// Typed, non-variadic forwarders for libcurl's variadic entry points, which Swift cannot call
// (the same idea as swift-corelibs-foundation's CFURLSessionInterface.c). Each forwarder passes
// its argument through unchanged; ownership of pointers is exactly as libcurl documents for the
// option (https://curl.se/libcurl/c/curl_easy_setopt.html).

/// The shape of CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION callbacks.
typedef size_t (*pw_curl_data_cb)(char *ptr, size_t size, size_t nmemb, void *userdata);

CURLcode pw_curl_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode pw_curl_easy_setopt_ptr(CURL *handle, CURLoption option, void *value);
CURLcode pw_curl_easy_setopt_str(CURL *handle, CURLoption option, const char *value);
CURLcode pw_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);
CURLcode pw_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);
CURLcode pw_curl_easy_setopt_write_cb(CURL *handle, pw_curl_data_cb callback);
CURLcode pw_curl_easy_setopt_header_cb(CURL *handle, pw_curl_data_cb callback);

/// The shape of CURLMOPT_SOCKETFUNCTION (https://curl.se/libcurl/c/CURLMOPT_SOCKETFUNCTION.html).
typedef int (*pw_curl_socket_cb)(CURL *easy, curl_socket_t socket, int what, void *userp, void *socketp);
/// The shape of CURLMOPT_TIMERFUNCTION (https://curl.se/libcurl/c/CURLMOPT_TIMERFUNCTION.html).
typedef int (*pw_curl_timer_cb)(CURLM *multi, long timeout_ms, void *userp);

CURLMcode pw_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);
CURLMcode pw_curl_multi_setopt_ptr(CURLM *multi, CURLMoption option, void *value);
/// NULL removes the callback.
CURLMcode pw_curl_multi_setopt_socketfunction(CURLM *multi, pw_curl_socket_cb callback);
CURLMcode pw_curl_multi_setopt_timerfunction(CURLM *multi, pw_curl_timer_cb callback);

CURLcode pw_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *out);
CURLcode pw_curl_easy_getinfo_ptr(CURL *handle, CURLINFO info, void **out);

/// CURLMsg.data is a union Swift imports awkwardly; these read its fields.
CURLcode pw_curl_msg_result(const CURLMsg *msg);
int pw_curl_msg_is_done(const CURLMsg *msg);

/// Values that are preprocessor macros (not imported as typed constants by Swift).
static inline long pw_curlpipe_multiplex(void) { return CURLPIPE_MULTIPLEX; }
static inline long pw_curl_http_version_2tls(void) { return CURL_HTTP_VERSION_2TLS; }
static inline long pw_curl_global_default(void) { return CURL_GLOBAL_DEFAULT; }
static inline curl_socket_t pw_curl_socket_timeout(void) { return CURL_SOCKET_TIMEOUT; }
#endif
