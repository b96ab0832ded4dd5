//! The C allocator's settings for Quarry's processes.
//!
//! A node and a client move data in buffers of a chunk (1 MiB by default)
//! and a read buffer of several. glibc serves allocations that large with a
//! fresh `mmap` and returns them to the kernel on free, and it trims freed
//! memory at the top of a heap past 128 KiB, so every chunk read or sent
//! faulted its pages in again and the kernel zeroed them: on a 1 GiB get,
//! page faults and zeroing were 28% of the nodes' CPU (`perf record`,
//! docs/benchmarks.md). Serving them from the heap and keeping up to
//! [`TRIM_THRESHOLD_BYTES`] of freed memory for reuse removes that.

/// Allocations at or above this come from `mmap` (and go back on free):
/// above the largest chunk (4 MiB) with its headers.
const MMAP_THRESHOLD_BYTES: libc::c_int = 8 << 20;
/// Freed memory a heap keeps before giving the top of it back to the
/// kernel: a few chunks' worth per arena.
const TRIM_THRESHOLD_BYTES: libc::c_int = 64 << 20;

/// Applies the settings; false if the allocator refused one (a C library
/// other than glibc may not know them; the process then runs as before).
pub fn tune_allocator() -> bool {
    // SAFETY: `mallopt` only sets allocator parameters; it is called before
    // any thread is started, with parameters and values glibc documents
    // (mallopt(3)); it touches no memory of ours.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_takes_the_settings_and_still_serves_large_buffers() {
        assert!(tune_allocator(), "glibc refused the mallopt settings");
        // Buffers of a chunk and past the mmap threshold still work whole.
        for len in [1 << 20, 4 << 20, 16 << 20] {
            let mut v = vec![0u8; len];
            v[len - 1] = 7;
            assert_eq!(v.iter().map(|&b| u64::from(b)).sum::<u64>(), 7);
        }
    }
}
