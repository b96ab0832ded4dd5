//! Page-slot buffers aligned for O_DIRECT, recycled through a bounded pool.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Alignment of every slot buffer: enough for O_DIRECT on 512- and 4096-byte
/// logical-block devices.
pub(crate) const BUF_ALIGN: usize = 4096;

/// A zero-initialised heap buffer aligned to [`BUF_ALIGN`]. Its length may
/// be set below its capacity (a multi-page read uses as much of a large
/// buffer as it needs); the allocation keeps its capacity.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    align: usize,
    /// Mapped by [`AlignedBuf::new_huge`] (unmapped on drop) rather than
    /// taken from the allocator.
    mapped: bool,
}

/// Size and alignment of a transparent huge page on x86-64.
const HUGE_PAGE_BYTES: usize = 2 << 20;

// SAFETY: AlignedBuf uniquely owns its allocation (like a Box<[u8]>), so moving
// it to or sharing it with another thread is as safe as for Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`; mutation needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> AlignedBuf {
        assert!(len > 0, "aligned buffer must not be empty");
        let layout = Layout::from_size_align(len, BUF_ALIGN).expect("valid buffer layout");
        // SAFETY: layout has a non-zero size (asserted above).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf {
            ptr,
            len,
            cap: len,
            align: BUF_ALIGN,
            mapped: false,
        }
    }

    /// A buffer of at least `len` bytes (its capacity rounded up to whole
    /// 2 MiB pages) backed by transparent huge pages where the kernel has
    /// them. Why: a disk request may carry a bounded number of memory
    /// segments (254 on this machine's virtio disk), one per physically
    /// contiguous piece; scattered 4 KiB pages cut a 4 MiB read into
    /// requests of under 1 MiB, which this disk serves markedly slower,
    /// while a huge page is one segment of 2 MiB. Without huge pages it is
    /// an ordinary buffer.
    ///
    /// The memory is mapped afresh rather than taken from the allocator:
    /// memory the allocator hands back after earlier frees may already be
    /// faulted in as 4 KiB pages, which the huge-page hint does not merge (a
    /// node that had just stored gigabytes read at 1.4 MiB per request
    /// instead of 2). Fresh anonymous memory is also zero already, so it
    /// needs no clearing.
    pub(crate) fn new_huge(len: usize) -> AlignedBuf {
        assert!(len > 0, "aligned buffer must not be empty");
        let cap = len.div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
        if let Some(buf) = AlignedBuf::new_hugetlb(len, cap) {
            return buf;
        }
        // Mapped one huge page wider, then trimmed to a 2 MiB boundary.
        let map_len = cap + HUGE_PAGE_BYTES;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing touches no existing memory; the result is checked.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            let layout = Layout::from_size_align(cap, HUGE_PAGE_BYTES).expect("valid layout");
            alloc::handle_alloc_error(layout)
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE_BYTES);
        let (head, tail) = (aligned - start, start + map_len - (aligned + cap));
        // SAFETY: both ranges lie inside the mapping just made and outside
        // [aligned, aligned + cap), which is kept; unmapping them touches
        // nothing else. A failure leaves them mapped (a leak of under 2 MiB).
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + cap) as *mut libc::c_void, tail);
            }
        }
        // SAFETY: [aligned, aligned + cap) is mapped and owned here; madvise
        // only sets a paging hint on it (a failure, e.g. no THP support,
        // leaves it an ordinary mapping).
        unsafe {
            libc::madvise(aligned as *mut libc::c_void, cap, libc::MADV_HUGEPAGE);
        }
        let Some(ptr) = NonNull::new(aligned as *mut u8) else {
            let layout = Layout::from_size_align(cap, HUGE_PAGE_BYTES).expect("valid layout");
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf {
            ptr,
            len,
            cap,
            align: HUGE_PAGE_BYTES,
            mapped: true,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Uses the first `len` bytes (at most the capacity) from now on.
    pub(crate) fn set_len(&mut self, len: usize) {
        assert!(
            len > 0 && len <= self.cap,
            "length {len} outside 1..={}",
            self.cap
        );
        self.len = len;
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to `cap >= len` initialised (zeroed at
        // allocation) bytes owned by self; the borrow of self keeps them alive and unaliased by
        // any &mut.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer for handing the buffer to the kernel (io_uring / pread).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl AlignedBuf {
    /// `cap` bytes of the machine's reserved huge pages (`MAP_HUGETLB`), if
    /// it has that many free: `None` otherwise (none reserved, or all in
    /// use). On this VM, fio read a fully written file 7-10% faster into
    /// such buffers than into transparent huge pages (four alternating
    /// pairs: 2697-2766 MiB/s against 2504-2571), and the device's own
    /// streaming reads were faster with them in five alternating pairs of
    /// six (`stream_rate 4096 32 31`: 2058 MiB/s on average against 1741).
    fn new_hugetlb(len: usize, cap: usize) -> Option<AlignedBuf> {
        debug_assert!(cap.is_multiple_of(HUGE_PAGE_BYTES));
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing touches no existing memory; the result is
        // checked. Huge-page mappings are aligned to the huge page.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
                -1,
                0,
            )
        };
        static SAID: std::sync::Once = std::sync::Once::new();
        if raw == libc::MAP_FAILED {
            SAID.call_once(|| {
                tracing::info!(
                    "read buffers on transparent huge pages: no reserved huge page is free \
                     (vm.nr_hugepages; reserved ones read faster here)"
                )
            });
            return None;
        }
        SAID.call_once(|| tracing::info!("read buffers on reserved huge pages"));
        let ptr = NonNull::new(raw.cast::<u8>())?;
        assert_eq!(
            ptr.as_ptr() as usize % HUGE_PAGE_BYTES,
            0,
            "a huge-page mapping off a huge-page boundary"
        );
        Some(AlignedBuf {
            ptr,
            len,
            cap,
            align: HUGE_PAGE_BYTES,
            mapped: true,
        })
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: [ptr, ptr + cap) is the mapping kept by `new_huge`,
            // unmapped only here, once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.cap) };
            return;
        }
        let layout = Layout::from_size_align(self.cap, self.align).expect("valid buffer layout");
        // SAFETY: ptr was allocated in `new` with exactly this layout and is
        // freed only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

/// A bounded free list of slot-sized aligned buffers. Taking never blocks (a
/// fresh buffer is allocated when the list is empty); returning keeps at most
/// `max_free` buffers, so idle memory is bounded. Buffers in use are bounded by
/// the device's in-flight limit plus what callers still hold in `PageRead`s.
pub(crate) struct BufPool {
    free: Mutex<Vec<AlignedBuf>>,
    buf_len: usize,
    max_free: usize,
    huge: bool,
}

impl BufPool {
    pub(crate) fn new(buf_len: usize, max_free: usize) -> Arc<BufPool> {
        Arc::new(BufPool {
            free: Mutex::new(Vec::new()),
            buf_len,
            max_free,
            huge: false,
        })
    }

    /// A pool of buffers of at least `buf_len` bytes on huge pages
    /// ([`AlignedBuf::new_huge`]), for multi-page reads.
    pub(crate) fn new_huge(buf_len: usize, max_free: usize) -> Arc<BufPool> {
        let cap = buf_len.div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
        Arc::new(BufPool {
            free: Mutex::new(Vec::new()),
            buf_len: cap,
            max_free,
            huge: true,
        })
    }

    pub(crate) fn take(self: &Arc<Self>) -> PooledBuf {
        let buf = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_else(|| {
                if self.huge {
                    AlignedBuf::new_huge(self.buf_len)
                } else {
                    AlignedBuf::new(self.buf_len)
                }
            });
        debug_assert_eq!(buf.len(), self.buf_len);
        debug_assert_eq!(buf.capacity(), self.buf_len);
        PooledBuf {
            buf: Some(buf),
            pool: Arc::clone(self),
        }
    }

    #[cfg(test)]
    pub(crate) fn free_count(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A buffer on loan from a [`BufPool`]; goes back to the pool when dropped.
/// It is also the owner behind the `Bytes` of a `PageRead`, so page data is
/// handed to callers without a copy.
pub(crate) struct PooledBuf {
    buf: Option<AlignedBuf>,
    pool: Arc<BufPool>,
}

impl PooledBuf {
    pub(crate) fn buf(&self) -> &AlignedBuf {
        self.buf.as_ref().expect("buffer present until drop")
    }
    pub(crate) fn buf_mut(&mut self) -> &mut AlignedBuf {
        self.buf.as_mut().expect("buffer present until drop")
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self.buf().as_slice()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(mut buf) = self.buf.take() {
            // The next borrower gets the whole buffer.
            buf.set_len(buf.capacity());
            let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
            if free.len() < self.pool.max_free {
                free.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed_and_recycled() {
        let pool = BufPool::new(9216, 2);
        let mut a = pool.take();
        assert_eq!(a.buf_mut().as_mut_ptr() as usize % BUF_ALIGN, 0);
        assert!(a.as_ref().iter().all(|&b| b == 0));
        a.buf_mut().as_mut_slice()[9215] = 7;
        let b = pool.take();
        let c = pool.take();
        drop(a);
        drop(b);
        drop(c);
        assert_eq!(pool.free_count(), 2, "pool keeps at most max_free buffers");
        let bytes = bytes::Bytes::from_owner(pool.take());
        assert_eq!(bytes.len(), 9216);
        drop(bytes);
        assert_eq!(pool.free_count(), 2);
    }

    #[test]
    fn a_shortened_buffer_returns_to_the_pool_whole() {
        let pool = BufPool::new(8192, 1);
        let mut a = pool.take();
        a.buf_mut().set_len(4096);
        assert_eq!(a.as_ref().len(), 4096);
        a.buf_mut().as_mut_slice().fill(9);
        drop(a);
        let b = pool.take();
        assert_eq!(b.as_ref().len(), 8192);
        assert_eq!(b.buf().capacity(), 8192);
    }

    #[test]
    fn huge_buffers_are_whole_huge_pages_zeroed_and_recycled() {
        let pool = BufPool::new_huge(3 << 20, 1);
        let mut a = pool.take();
        assert_eq!(a.as_ref().len(), 4 << 20, "rounded up to whole 2 MiB pages");
        assert_eq!(a.buf_mut().as_mut_ptr() as usize % (2 << 20), 0);
        assert!(a.as_ref().iter().all(|&b| b == 0));
        a.buf_mut().set_len(100_000);
        a.buf_mut().as_mut_slice().fill(3);
        drop(a);
        let b = pool.take();
        assert_eq!(b.as_ref().len(), 4 << 20);
        assert_eq!(pool.free_count(), 0);
        // Past the pool's bound a buffer is unmapped; a fresh one is zero.
        let mut c = pool.take();
        c.buf_mut().as_mut_slice().fill(9);
        drop(b);
        drop(c);
        assert_eq!(pool.free_count(), 1);
        let d = pool.take();
        let e = pool.take();
        assert!(
            d.as_ref()[..100_000].iter().all(|&x| x == 3),
            "the kept buffer comes back as it was"
        );
        assert!(
            e.as_ref().iter().all(|&x| x == 0),
            "a fresh mapping is zero"
        );
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_length_past_the_capacity_is_refused() {
        let pool = BufPool::new(4096, 1);
        pool.take().buf_mut().set_len(4097);
    }
}
