//! The largest single allocation a thread made since it last asked: a
//! decoder that trusts a claimed length or count allocates for it before
//! it finds the bytes missing, which this sees even when the allocation
//! succeeds. A decoder property test installs [`LargestAlloc`] as its test
//! binary's global allocator and runs each decode in
//! [`largest_alloc_bytes`] (each proptest case runs on one thread):
//!
//! ```
//! #[global_allocator]
//! static ALLOC: quarry_testkit::LargestAlloc = quarry_testkit::LargestAlloc;
//!
//! fn main() {
//!     let (bytes, largest) =
//!         quarry_testkit::largest_alloc_bytes(|| vec![0u8; 10_000]);
//!     assert_eq!(bytes.len(), 10_000);
//!     assert!(largest >= 10_000);
//! }
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, noting each thread's largest allocation and the
/// bytes it allocated in all.
pub struct LargestAlloc;

thread_local! {
    static LARGEST_BYTES: Cell<usize> = const { Cell::new(0) };
    static TOTAL_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn note(size_bytes: usize) {
    // `try_with`: the slots may be gone while the thread is being torn down.
    let _ = LARGEST_BYTES.try_with(|l| l.set(l.get().max(size_bytes)));
    let _ = TOTAL_BYTES.try_with(|t| t.set(t.get().saturating_add(size_bytes)));
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// wrapper only records sizes in a thread-local cell, which allocates nothing.
unsafe impl GlobalAlloc for LargestAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `layout` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this wrapper with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its value with the largest single allocation, in
/// bytes, this thread made while it ran. Panics if [`LargestAlloc`] is not
/// the global allocator (every figure would be 0: a test that cannot fail).
pub fn largest_alloc_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let (value, _, largest) = allocated_bytes(f);
    (value, largest)
}

/// Runs `f` and returns its value with the bytes this thread allocated in
/// all while it ran (a grown block counted whole, as if new) and the
/// largest single allocation. Panics as [`largest_alloc_bytes`] does.
pub fn allocated_bytes<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let reset = || {
        LARGEST_BYTES.with(|l| l.set(0));
        TOTAL_BYTES.with(|t| t.set(0));
    };
    reset();
    drop(std::hint::black_box(Vec::<u8>::with_capacity(64)));
    assert!(
        LARGEST_BYTES.with(Cell::get) >= 64,
        "quarry_testkit::LargestAlloc is not this test binary's global allocator"
    );
    reset();
    let value = f();
    (
        value,
        TOTAL_BYTES.with(Cell::get),
        LARGEST_BYTES.with(Cell::get),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOC: LargestAlloc = LargestAlloc;

    #[test]
    fn the_watch_sees_one_large_allocation_and_forgets_it_after() {
        let (v, largest) = largest_alloc_bytes(|| vec![0u8; 1 << 20]);
        assert_eq!(v.len(), 1 << 20);
        assert!(largest >= 1 << 20, "{largest}");
        let ((), largest) = largest_alloc_bytes(|| drop(std::hint::black_box(vec![1u8; 100])));
        assert!((100..1 << 20).contains(&largest), "{largest}");
    }
}
