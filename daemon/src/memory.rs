//! Giving freed heap memory back to the operating system after large changes.
//!
//! glibc keeps memory a thread freed in that thread's arena and returns only the top of each
//! arena by itself. A 100,000-entry user-data add parses a JSON body of tens of MB and grows
//! the index columns; a large delete shrinks them again. Without a trim the daemon stays
//! resident at the peak of the largest request it ever served.

/// Changes of at least this many records trim the heap afterwards: smaller ones leave too
/// little behind to be worth walking every arena (which briefly locks each one).
pub(crate) const LARGE_CHANGE: u64 = 10_000;

/// Returns freed heap pages to the operating system (glibc's `malloc_trim`; a no-op with
/// other C libraries, which do not hold on to freed memory this way).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(unsafe_code, reason = "malloc_trim is a C function")]
pub(crate) fn release_free_heap() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has no preconditions
    // and is thread-safe.
    let released = unsafe { libc::malloc_trim(0) } != 0;
    tracing::debug!(released, "returned free heap memory to the system");
}

/// Returns freed heap pages to the operating system (nothing to do with this C library).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_free_heap() {}
