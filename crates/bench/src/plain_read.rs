//! A plain reader that checks what it reads: the program a user might
//! write instead of a scan, and a second peer for `bench stream` beside
//! fio. fio never touches the bytes it reads; a scan must, and so does this
//! reader: two threads keep two O_DIRECT reads of [`CHUNK_BYTES`] in flight
//! into buffers on huge pages, and a third computes the CRC-32C of each
//! buffer as it comes in. Without the check, the same reader shows what its
//! way of reading costs by itself, apart from touching the bytes.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use memmap2::{MmapMut, MmapOptions};

/// Bytes per read: fio's best request size here.
pub(crate) const CHUNK_BYTES: usize = 2 << 20;
/// Reads in flight, one per reader thread.
pub(crate) const READERS: usize = 2;
/// Buffers: the reads in flight and as many filled ones waiting for the
/// check.
const BUFFERS: usize = 6;
/// Largest file read (its chunks' CRCs are kept to be combined in order).
const MAX_FILE_BYTES: u64 = 1 << 40;

/// What one pass read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainRead {
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
    /// CRC-32C of what was read, combined from its chunks' (when checked).
    pub(crate) crc32c: Option<u32>,
    /// The buffers were on reserved huge pages (else ordinary pages).
    pub(crate) huge_pages: bool,
}

impl PlainRead {
    pub(crate) fn mib_per_s(&self) -> f64 {
        crate::measure::mib_per_s(self.bytes, self.seconds)
    }
}

/// Reads `path` as the module doc says, checking each chunk when `check`:
/// all of it but a tail of less than 4 KiB, which O_DIRECT cannot read
/// whole.
pub(crate) fn read_file(path: &Path, check: bool) -> Result<PlainRead> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
    let file_bytes = file.metadata()?.len();
    let size = file_bytes - file_bytes % 4096;
    if size == 0 || size > MAX_FILE_BYTES {
        bail!(
            "{}: {file_bytes} bytes; the plain reader reads from 4 KiB to {MAX_FILE_BYTES} bytes",
            path.display()
        );
    }
    let chunks = size.div_ceil(CHUNK_BYTES as u64) as usize;
    let mut huge_pages = true;
    let mut buffers = Vec::with_capacity(BUFFERS);
    for _ in 0..BUFFERS {
        let huge = MmapOptions::new()
            .len(CHUNK_BYTES)
            .huge(Some(21))
            .map_anon();
        let buf = match huge {
            Ok(buf) => buf,
            Err(_) => {
                huge_pages = false;
                MmapOptions::new().len(CHUNK_BYTES).map_anon()?
            }
        };
        buffers.push(buf);
    }
    let (free_tx, free_rx) = crossbeam_channel::bounded::<MmapMut>(BUFFERS);
    let (filled_tx, filled_rx) =
        crossbeam_channel::bounded::<Result<(usize, usize, MmapMut)>>(BUFFERS);
    for buf in buffers {
        free_tx.send(buf).context("the buffer queue")?;
    }
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let crcs = std::thread::scope(|scope| -> Result<Vec<u32>> {
        // Both queues' checker ends move in here, so that on an error they
        // close when this returns and no reader waits on them for ever.
        let (filled_rx, free_tx) = (filled_rx, free_tx);
        for _ in 0..READERS {
            let (free_rx, filled_tx, file, next) =
                (free_rx.clone(), filled_tx.clone(), &file, &next);
            scope.spawn(move || {
                // Ends when the chunks are all claimed, or when the checker
                // has stopped (the buffer queue is closed).
                while let Ok(mut buf) = free_rx.recv() {
                    let chunk = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if chunk >= chunks {
                        return;
                    }
                    let at = chunk as u64 * CHUNK_BYTES as u64;
                    let len = (size - at).min(CHUNK_BYTES as u64) as usize;
                    let read = file
                        .read_exact_at(&mut buf[..len], at)
                        .with_context(|| format!("reading {len} bytes at {at}"))
                        .map(|()| (chunk, len, buf));
                    let failed = read.is_err();
                    if filled_tx.send(read).is_err() || failed {
                        return;
                    }
                }
            });
        }
        drop(filled_tx);
        let mut crcs = vec![0u32; chunks];
        for _ in 0..chunks {
            let (chunk, len, buf) = filled_rx.recv().context("a reader stopped early")??;
            if check {
                crcs[chunk] = crc32c::crc32c(&buf[..len]);
            }
            // The readers may have ended already; the buffer is then dropped.
            let _ = free_tx.send(buf);
        }
        // Closing the buffer queue ends any reader still waiting on it.
        drop(free_tx);
        Ok(crcs)
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let mut crc = 0u32;
    for (i, c) in crcs.iter().enumerate() {
        let len = (size - i as u64 * CHUNK_BYTES as u64).min(CHUNK_BYTES as u64) as usize;
        crc = if i == 0 {
            *c
        } else {
            crc32c::crc32c_combine(crc, *c, len)
        };
    }
    Ok(PlainRead {
        bytes: size,
        seconds,
        crc32c: check.then_some(crc),
        huge_pages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_byte_once_in_order_of_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data");
        // Two and a half chunks, so the last read is a short one.
        let data: Vec<u8> = (0..(CHUNK_BYTES * 5 / 2))
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1])
            .collect();
        std::fs::write(&path, &data).expect("write");
        let read = read_file(&path, true).expect("read");
        assert_eq!(read.bytes, data.len() as u64);
        assert_eq!(
            read.crc32c,
            Some(crc32c::crc32c(&data)),
            "every byte, in place"
        );
        let unchecked = read_file(&path, false).expect("read");
        assert_eq!(
            (unchecked.bytes, unchecked.crc32c),
            (data.len() as u64, None)
        );
    }

    #[test]
    fn leaves_out_a_tail_o_direct_cannot_read_and_refuses_less_than_a_page() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("odd");
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let read = read_file(&path, true).expect("read");
        assert_eq!(read.bytes, 4096);
        assert_eq!(read.crc32c, Some(crc32c::crc32c(&data[..4096])));
        std::fs::write(&path, &data[..4000]).expect("write");
        let e = read_file(&path, true).expect_err("under 4 KiB");
        assert!(format!("{e:#}").contains("from 4 KiB"), "{e:#}");
    }
}
