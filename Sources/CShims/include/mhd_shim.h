#ifndef PW_MHD_SHIM_H
#define PW_MHD_SHIM_H
#include <microhttpd.h>
// Owned by the HTTPServer wrapper.
#endif
