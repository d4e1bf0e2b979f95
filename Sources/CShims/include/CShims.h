#ifndef PUSHWARDEN_CSHIMS_H
#define PUSHWARDEN_CSHIMS_H
// Typed, non-variadic forwarders for C functions Swift cannot import.
#include "mhd_shim.h"
#include "mhd_head_scan.h"
#include "curl_shim.h"
#include "process_shim.h"
#endif
