// Tells ThreadSanitizer about Synchronization.Mutex's contended hand-over on Linux. Built by
// scripts/sanitize.sh into .build/thread and preloaded (LD_PRELOAD) into the ThreadSanitizer run
// only; never part of the product.
//
// Why: Mutex.withLock inlines the lock's fast path (an acquiring/releasing compare-exchange that
// TSan sees), but under contention it calls _MutexHandle._lockSlow/_unlockSlow in
// libswiftSynchronization.so, which is not instrumented and hands the lock over through a
// FUTEX_LOCK_PI/FUTEX_UNLOCK_PI syscall. TSan sees no release/acquire pair for that hand-over
// and reports every access made under the lock as a race whenever two threads contended for it
// (scripts/sanitize/mutex-handoff.swift reproduces it in 15 lines; sanitize.sh runs it first).
// This file interposes those three symbols, calls the real ones, and adds the missing
// __tsan_release before the hand-over and __tsan_acquire after it, on the lock word's address
// (the same address the inlined fast path synchronises on). It hides no report: an access made
// without the lock is still a race (mutex-handoff.swift's "unlocked" mode proves it).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// Swift passes `self` (the _MutexHandle's address: its lock word) in the swiftself register,
// which clang's swiftcall spells swift_context.
#define SWIFT_CC __attribute__((swiftcall))
#define SWIFT_SELF __attribute__((swift_context))
#define LOCK_SLOW "$s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF"
#define TRY_LOCK_SLOW "$s15Synchronization12_MutexHandleV12_tryLockSlowSbyF"
#define UNLOCK_SLOW "$s15Synchronization12_MutexHandleV11_unlockSlowyyF"

typedef SWIFT_CC void (*lock_slow_fn)(uint32_t, void *SWIFT_SELF);
typedef SWIFT_CC bool (*try_lock_slow_fn)(void *SWIFT_SELF);
typedef SWIFT_CC void (*unlock_slow_fn)(void *SWIFT_SELF);
typedef void (*tsan_fn)(void *);

static lock_slow_fn real_lock_slow;
static try_lock_slow_fn real_try_lock_slow;
static unlock_slow_fn real_unlock_slow;
// Absent in processes built without TSan (swift-test itself, redis-server): then a no-op.
static tsan_fn tsan_acquire, tsan_release;

__attribute__((constructor)) static void resolve(void) {
    real_lock_slow = (lock_slow_fn)dlsym(RTLD_NEXT, LOCK_SLOW);
    real_try_lock_slow = (try_lock_slow_fn)dlsym(RTLD_NEXT, TRY_LOCK_SLOW);
    real_unlock_slow = (unlock_slow_fn)dlsym(RTLD_NEXT, UNLOCK_SLOW);
    tsan_acquire = (tsan_fn)dlsym(RTLD_DEFAULT, "__tsan_acquire");
    tsan_release = (tsan_fn)dlsym(RTLD_DEFAULT, "__tsan_release");
}

// Only reached in processes that load libswiftSynchronization (the interposed names are its own).
static void *missing(const char *name) {
    fprintf(stderr, "tsan-mutex: %s not found after the preload\n", name);
    abort();
}

SWIFT_CC void lock_slow(uint32_t owner, void *SWIFT_SELF handle) __asm__(LOCK_SLOW);
SWIFT_CC void lock_slow(uint32_t owner, void *SWIFT_SELF handle) {
    if (!real_lock_slow) missing(LOCK_SLOW);
    real_lock_slow(owner, handle);
    if (tsan_acquire) tsan_acquire(handle);
}

SWIFT_CC bool try_lock_slow(void *SWIFT_SELF handle) __asm__(TRY_LOCK_SLOW);
SWIFT_CC bool try_lock_slow(void *SWIFT_SELF handle) {
    if (!real_try_lock_slow) missing(TRY_LOCK_SLOW);
    bool locked = real_try_lock_slow(handle);
    if (locked && tsan_acquire) tsan_acquire(handle);
    return locked;
}

SWIFT_CC void unlock_slow(void *SWIFT_SELF handle) __asm__(UNLOCK_SLOW);
SWIFT_CC void unlock_slow(void *SWIFT_SELF handle) {
    if (!real_unlock_slow) missing(UNLOCK_SLOW);
    if (tsan_release) tsan_release(handle);
    real_unlock_slow(handle);
}
