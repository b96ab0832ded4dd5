//! The largest single allocation a thread made since it last asked: a
//! decoder that trusts a claimed length or count allocates for it before
//! it finds the bytes missing, which this sees even when the allocation
//! succeeds. Included by the decoder property tests, whose cases each run
//! on one thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct LargestAlloc;

thread_local! {
    static LARGEST_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn note(size_bytes: usize) {
    // `try_with`: the slot may be gone while the thread is being torn down.
    let _ = LARGEST_BYTES.try_with(|l| l.set(l.get().max(size_bytes)));
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
/// bytes, this thread made while it ran.
pub fn largest_alloc_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST_BYTES.with(|l| l.set(0));
    let value = f();
    (value, LARGEST_BYTES.with(Cell::get))
}
