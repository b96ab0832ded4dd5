//! The shape a scan's reads take, with nothing else around it: one thread,
//! one io_uring, O_DIRECT reads of 2 MiB into buffers on reserved huge
//! pages, read in order through a file. It is the yardstick that set the
//! node's read path (`docs/benchmarks.md`, "One thread, two buffers"):
//!
//! - `none DEPTH`: `DEPTH` reads in flight into `DEPTH` buffers, each sent
//!   again as soon as it is in; the bytes are never looked at (what `fio
//!   --bs=2M --iodepth=DEPTH --iomem=mmaphuge` does);
//! - `touch DEPTH`: `DEPTH` reads in flight and one buffer more; as a read
//!   comes in, the next goes into the spare buffer and the thread then
//!   computes the CRC-32C of the one that came in (what a scan must do);
//! - `rotate DEPTH`: as `touch`, with two spare buffers taken in turn, so
//!   one buffer more circulates.
//!
//! ```text
//! echo 64 > /proc/sys/vm/nr_hugepages
//! cargo run --release -p quarry-device --example two_buffers -- FILE touch 1
//! ```
//!
//! Prints the rate in MiB/s and the CRCs folded together (so the check is
//! not optimized away). Alternate it with fio over the same file: this
//! disk's rate drifts by a fifth between minutes.

use std::collections::VecDeque;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

const READ_BYTES: usize = 2 << 20;
const HUGE_PAGE_SHIFT: i32 = 21;

/// One read buffer on a reserved huge page, unmapped when dropped.
struct HugeBuf {
    ptr: *mut u8,
}

impl HugeBuf {
    fn new() -> HugeBuf {
        // SAFETY: an anonymous private mapping with no address hint has no
        // other owner; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                READ_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_HUGETLB
                    | (HUGE_PAGE_SHIFT << libc::MAP_HUGE_SHIFT),
                -1,
                0,
            )
        };
        assert!(
            ptr != libc::MAP_FAILED,
            "no free 2 MiB huge page: echo 64 > /proc/sys/vm/nr_hugepages"
        );
        HugeBuf { ptr: ptr.cast() }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is READ_BYTES long and lives as long as self;
        // no read is in flight into a buffer whose bytes are looked at
        // (the loop only checks buffers whose completion it has taken).
        unsafe { std::slice::from_raw_parts(self.ptr, READ_BYTES) }
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, once.
        unsafe { libc::munmap(self.ptr.cast(), READ_BYTES) };
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(mode), Some(depth)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: two_buffers FILE none|touch|rotate DEPTH");
        std::process::exit(2);
    };
    let depth: usize = depth.parse().expect("DEPTH is a number");
    assert!((1..=16).contains(&depth), "DEPTH is 1 to 16");
    let spares = match mode.as_str() {
        "none" => 0,
        "touch" => 1,
        "rotate" => 2,
        other => panic!("mode {other:?} is none, touch or rotate"),
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("opening FILE with O_DIRECT");
    let reads = file.metadata().expect("FILE's size").len() as usize / READ_BYTES;
    let buffers: Vec<HugeBuf> = (0..depth + spares).map(|_| HugeBuf::new()).collect();
    // Free buffers, first in first out: with one spare the same two take
    // turns, with two spares a third circulates.
    let mut free: VecDeque<usize> = (0..buffers.len()).collect();
    let mut ring = IoUring::new(64).expect("io_uring");
    let fd = types::Fd(file.as_raw_fd());
    let mut next = 0usize;
    let submit = |ring: &mut IoUring, buffer: usize, index: usize| {
        let read = opcode::Read::new(fd, buffers[buffer].ptr, READ_BYTES as u32)
            .offset((index * READ_BYTES) as u64)
            .build()
            .user_data(buffer as u64);
        // SAFETY: the buffer stays mapped until the loop has taken this
        // read's completion, and no other read targets it meanwhile.
        unsafe { ring.submission().push(&read).expect("ring has room") };
    };
    let started = Instant::now();
    for _ in 0..depth.min(reads) {
        let buffer = free.pop_front().expect("a free buffer");
        submit(&mut ring, buffer, next);
        next += 1;
    }
    let mut crcs = 0u32;
    let mut done = 0usize;
    while done < reads {
        ring.submit_and_wait(1).expect("waiting for a read");
        let completions: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (buffer, result) in completions {
            assert_eq!(result, READ_BYTES as i32, "a short or failed read");
            done += 1;
            if spares == 0 {
                if next < reads {
                    submit(&mut ring, buffer, next);
                    next += 1;
                    ring.submit().expect("submitting");
                }
                continue;
            }
            if next < reads {
                let spare = free.pop_front().expect("a spare buffer");
                submit(&mut ring, spare, next);
                next += 1;
                ring.submit().expect("submitting");
            }
            crcs ^= crc32c::crc32c(buffers[buffer].bytes());
            free.push_back(buffer);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{mode} {depth}: {:.0} MiB/s (crc {crcs:08x})",
        (reads * READ_BYTES) as f64 / f64::from(1 << 20) / seconds
    );
}
