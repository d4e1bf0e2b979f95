#define _GNU_SOURCE
#include "process_shim.h"
#include <malloc.h>

int pw_limit_malloc_arenas(int arenas) {
    return mallopt(M_ARENA_MAX, arenas);
}

int pw_fix_malloc_thresholds(int bytes) {
    return mallopt(M_TRIM_THRESHOLD, bytes) & mallopt(M_MMAP_THRESHOLD, bytes);
}

int pw_malloc_trim(void) {
    return malloc_trim(0);
}

#include <pthread.h>

void pw_set_thread_name(const char *name) {
    (void)pthread_setname_np(pthread_self(), name);
}

#include <sys/eventfd.h>

int pw_eventfd(void) {
    return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

static _Thread_local void *pw_current_loop_pointer;

void pw_set_current_loop(void *loop) {
    pw_current_loop_pointer = loop;
}

void *pw_current_loop(void) {
    return pw_current_loop_pointer;
}
