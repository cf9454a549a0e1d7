//! Giving memory back to the system (glibc's allocator). A long-running server that allocates
//! large per-test buffers would otherwise keep them resident after the tests end: glibc raises
//! its mmap threshold dynamically up to 32 MiB, after which freed 4 MiB buffers stay in the
//! heap. Elsewhere (musl) these are no-ops.

/// Serve every allocation of at least `bytes` from its own mapping, returned to the kernel when
/// freed, and stop glibc from raising that threshold on its own. Call once at start-up.
pub fn unmap_large_allocations(bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes allocator parameters; any value is accepted or refused.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, v) };
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

/// Return freed heap memory at the top of every arena to the kernel (malloc_trim).
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}
