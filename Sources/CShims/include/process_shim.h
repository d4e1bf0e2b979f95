#ifndef PW_PROCESS_SHIM_H
#define PW_PROCESS_SHIM_H
/// Caps glibc's malloc arenas (mallopt(M_ARENA_MAX)); returns 1 on success. Owned by the
/// command layer, called once at start-up before any thread exists.
int pw_limit_malloc_arenas(int arenas);
#endif
