#ifndef PW_CURL_SHIM_H
#define PW_CURL_SHIM_H
#include <curl/curl.h>
// Owned by the HTTPClient wrapper.
#endif
