#include "mhd_shim.h"
