import CShims

/// Gives the allocator's free memory back to the system.
///
/// glibc keeps what a burst freed (a registration storm, a drained outbox: thousands of requests
/// and transfers in flight at once) in its per-thread arenas, so the process's RSS stays at the
/// burst's high-water mark for good. `malloc_trim` returns every arena's free pages; it walks the
/// arenas, a millisecond or so, so it is meant for a timer, not the request path.
public enum HeapTrim {
    /// Whether any memory was returned.
    @discardableResult
    public static func release() -> Bool {
        pw_malloc_trim() == 1
    }
}
