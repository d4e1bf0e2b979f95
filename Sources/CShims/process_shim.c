#include "process_shim.h"
#include <malloc.h>

int pw_limit_malloc_arenas(int arenas) {
    return mallopt(M_ARENA_MAX, arenas);
}
