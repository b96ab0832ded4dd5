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
//!   one buffer more circulates;
//! - `scan DEPTH`: as `touch`, but page by page (64 KiB) a CRC-32C
//!   (`crc-fast`) and then an 8-byte pattern search, as a node checks and
//!   folds; it prints the time of each per read (`TWICE=1` searches each
//!   page a second time and prints that too).
//!
//! The reads go straight through the file, or with `STRIPES=N` 16 MiB from
//! each of N regions in turn (a node's device file, chip by chip); with
//! `SLOTS=1` they are shaped as a node's: 32 slots of 66048 bytes widened
//! to 4 KiB, each starting off a 64 KiB boundary and overlapping the one
//! before by 4 KiB.
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
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};

const READ_BYTES: usize = 2 << 20;
/// Each buffer spans two huge pages, so a read of a node's 32 slots
/// (2 MiB + 16 KiB, rounded out to 4 KiB) fits.
const BUFFER_BYTES: usize = 4 << 20;
/// A node's page slot: 64 KiB of data and its spare area.
const SLOT_BYTES: usize = 66048;
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
                BUFFER_BYTES,
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

    fn bytes(&self, len: usize) -> &[u8] {
        assert!(len <= BUFFER_BYTES);
        // SAFETY: the mapping is BUFFER_BYTES long (len is at most that)
        // and lives as long as self;
        // no read is in flight into a buffer whose bytes are looked at
        // (the loop only checks buffers whose completion it has taken).
        unsafe { std::slice::from_raw_parts(self.ptr, len) }
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, once.
        unsafe { libc::munmap(self.ptr.cast(), BUFFER_BYTES) };
    }
}

/// The order the file's reads go in: straight through, or with
/// `STRIPES=N` as a striped writer leaves a device file laid out chip by
/// chip: the file is cut into `N` regions and 16 MiB (an erase block) is
/// read from each region in turn.
fn read_order(reads: usize) -> Vec<usize> {
    let stripes: usize = std::env::var("STRIPES")
        .ok()
        .map(|s| s.parse().expect("STRIPES is a number"))
        .unwrap_or(1);
    const BLOCK_READS: usize = 8;
    let region = reads / stripes / BLOCK_READS * BLOCK_READS;
    if stripes <= 1 || region == 0 {
        return (0..reads).collect();
    }
    let mut order = Vec::with_capacity(reads);
    for block in (0..region).step_by(BLOCK_READS) {
        for stripe in 0..stripes {
            order.extend((0..BLOCK_READS).map(|k| stripe * region + block + k));
        }
    }
    order
}

#[allow(clippy::too_many_lines)] // an example program, read top to bottom
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(mode), Some(depth)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: two_buffers FILE none|touch|rotate|scan DEPTH");
        std::process::exit(2);
    };
    let depth: usize = depth.parse().expect("DEPTH is a number");
    assert!((1..=16).contains(&depth), "DEPTH is 1 to 16");
    let spares = match mode.as_str() {
        "none" => 0,
        "touch" => 1,
        "rotate" => 2,
        "scan" => 1,
        other => panic!("mode {other:?} is none, touch, rotate or scan"),
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("opening FILE with O_DIRECT");
    let file_bytes = file.metadata().expect("FILE's size").len() as usize;
    // Slot reads need one 4 KiB more at the end than 2 MiB reads.
    let order = read_order(file_bytes.saturating_sub(4096) / (32 * SLOT_BYTES).max(READ_BYTES));
    let reads = order.len();
    let buffers: Vec<HugeBuf> = (0..depth + spares).map(|_| HugeBuf::new()).collect();
    // Free buffers, first in first out: with one spare the same two take
    // turns, with two spares a third circulates.
    let mut free: VecDeque<usize> = (0..buffers.len()).collect();
    let mut ring = IoUring::new(64).expect("io_uring");
    let fd = types::Fd(file.as_raw_fd());
    let mut next = 0usize;
    // With SLOTS=1 the reads are where a node's are: 32 slots of 66048
    // bytes from slot 32 * i, rounded out to 4 KiB, so each starts off any
    // 64 KiB boundary and overlaps the one before by 4 KiB.
    let slots = std::env::var("SLOTS").is_ok_and(|s| s == "1");
    let span = |index: usize| -> (u64, usize) {
        if !slots {
            return ((order[index] * READ_BYTES) as u64, READ_BYTES);
        }
        let start = order[index] * 32 * SLOT_BYTES;
        let end = start + 32 * SLOT_BYTES;
        let (start, end) = (start / 4096 * 4096, end.div_ceil(4096) * 4096);
        (start as u64, end - start)
    };
    let submit = |ring: &mut IoUring, buffer: usize, index: usize| {
        let (offset, len) = span(index);
        let read = opcode::Read::new(fd, buffers[buffer].ptr, len as u32)
            .offset(offset)
            .build()
            .user_data((buffer as u64) << 32 | len as u64);
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
    let mut bytes_read = 0usize;
    let finder = memchr::memmem::Finder::new(b"ABCDEFGH");
    let (mut crc_time, mut search_time) = (Duration::ZERO, Duration::ZERO);
    let mut again_time = Duration::ZERO;
    while done < reads {
        ring.submit_and_wait(1).expect("waiting for a read");
        let completions: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (tag, result) in completions {
            let (buffer, len) = (tag >> 32, tag & 0xffff_ffff);
            assert_eq!(result, len as i32, "a short or failed read");
            bytes_read += len;
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
            if mode == "scan" {
                // A node's check and a kernel, page by page: the CRC brings
                // the page into the cache, the search reads it from there.
                for page in buffers[buffer].bytes(len).chunks(64 << 10) {
                    let t = Instant::now();
                    crcs ^= crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, page) as u32;
                    let u = Instant::now();
                    crcs ^= finder.find_iter(page).count() as u32;
                    let v = Instant::now();
                    if std::env::var_os("TWICE").is_some() {
                        crcs ^= finder.find_iter(page).count() as u32;
                        again_time += v.elapsed();
                    }
                    crc_time += u - t;
                    search_time += v - u;
                }
            } else {
                crcs ^= crc32c::crc32c(buffers[buffer].bytes(len));
            }
            free.push_back(buffer);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{mode} {depth}: {:.0} MiB/s (crc {crcs:08x})",
        bytes_read as f64 / f64::from(1 << 20) / seconds
    );
    if mode == "scan" {
        let per_read = |d: Duration| d.as_secs_f64() * 1e3 / reads as f64;
        println!(
            "per read: CRC {:.3} ms, search {:.3} ms, again {:.3} ms",
            per_read(crc_time),
            per_read(search_time),
            per_read(again_time)
        );
    }
}
