#ifndef PW_PROCESS_SHIM_H
#define PW_PROCESS_SHIM_H
/// Caps glibc's malloc arenas (mallopt(M_ARENA_MAX)); returns 1 on success. Owned by the
/// command layer, called once at start-up before any thread exists.
int pw_limit_malloc_arenas(int arenas);
/// Fixes glibc's trim and mmap thresholds at `bytes` (mallopt(M_TRIM_THRESHOLD, M_MMAP_THRESHOLD)),
/// which also stops glibc raising them as large blocks are freed; returns 1 on success. Owned by
/// the command layer, called once at start-up before any thread exists.
int pw_fix_malloc_thresholds(int bytes);
/// Returns every malloc arena's free pages to the system (malloc_trim(0)); 1 when any was.
int pw_malloc_trim(void);
/// Names the calling thread (at most 15 bytes are kept), so `top -H` and profilers can tell the
/// sidecar's threads apart.
void pw_set_thread_name(const char *name);
/// A non-blocking, close-on-exec eventfd (an event loop's wake-up descriptor), or -1 with errno.
int pw_eventfd(void);
/// The event loop whose thread this is (an unretained pointer the loop sets for its own thread),
/// or NULL on any other thread. Owned by the Loops module.
void pw_set_current_loop(void *loop);
void *pw_current_loop(void);
#endif
