//! How fast the device streams multi-page reads off a `file` backend:
//! programs `MIB` MiB of 64 KiB pages (CRC-only slots, O_DIRECT) in a
//! scratch directory, then reads them back with `READS` requests of
//! `PAGES` pages in flight, block by block, and prints GB/s. Run it next to
//! fio on the same disk to see what the device layer costs. `HOLD` keeps
//! the pages of the last `HOLD` reads alive, as a pipeline that has not yet
//! consumed them does (the disk here fills many distinct buffers slower
//! than a few reused ones); `nocheck` skips the CRC check
//! (`OpenOptions::skip_read_check`, for measuring only); `pipe` keeps the
//! reads in one task and starts the next before checking the one that came
//! in, as a scan does (without it each read is a task that reads and
//! checks). In the environment: `PASSES`, the passes over the data (3);
//! `BUDGET`, reads at the disk at most (the device's read budget; the other
//! reads in flight wait in the engine); `FIO`, fio's arguments for a read of
//! the same bytes after each pass (e.g. "--bs=2M --iodepth=2").
//!
//! `cargo run --release -p quarry-device --example stream_rate -- [MIB] [READS] [PAGES] [HOLD] [nocheck] [pipe]`

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use quarry_device::{BackendKind, Device, DeviceConfig, EccMode, Geometry};

#[allow(clippy::too_many_lines)] // an example program, read top to bottom
fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    let skip_read_check = words.iter().any(|w| w == "nocheck");
    let pipe = words.iter().any(|w| w == "pipe");
    let args: Vec<usize> = words
        .iter()
        .filter(|w| *w != "nocheck" && *w != "pipe")
        .map(|a| a.parse().expect("a number"))
        .collect();
    let mib = args.first().copied().unwrap_or(1024);
    let reads = args.get(1).copied().unwrap_or(32);
    let pages = args.get(2).copied().unwrap_or(16) as u32;
    let hold = args.get(3).copied().unwrap_or(0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let dir = tempfile::tempdir_in(std::env::var("TMPDIR").unwrap_or("/tmp".into()))
            .expect("scratch dir");
        let ppb = 256u32;
        let blocks = (mib as u64 * 16).div_ceil(u64::from(ppb)) as u32;
        let geometry = Geometry {
            buses: 1,
            chips_per_bus: 1,
            blocks_per_chip: blocks,
            pages_per_block: ppb,
            page_size_bytes: 64 << 10,
            oob_size_bytes: 64,
        };
        let config = DeviceConfig {
            backend: BackendKind::File,
            geometry: Some(geometry),
            ecc: EccMode::Crc,
            ..DeviceConfig::default()
        };
        let options = quarry_device::OpenOptions {
            skip_read_check,
            ..Default::default()
        };
        let dev = Arc::new(Device::open_with(&config, dir.path(), options).expect("open"));
        if let Some(reads) = std::env::var("BUDGET")
            .ok()
            .and_then(|b| b.parse::<usize>().ok())
        {
            // At most this many reads at the disk; the rest wait in the
            // engine, started by each completion.
            dev.set_read_budget_bytes(reads * quarry_device::MAX_READ_RUN_BYTES);
        }
        let page = Bytes::from(vec![7u8; 64 << 10]);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for b in 0..blocks {
            let dev = Arc::clone(&dev);
            let page = page.clone();
            tasks.push(tokio::spawn(async move {
                let block = geometry.block_at(u64::from(b));
                for p in 0..ppb {
                    dev.program_page(block.page(p), page.clone(), Bytes::new())
                        .await
                        .expect("program");
                }
            }));
        }
        for t in tasks {
            t.await.expect("writer");
        }
        eprintln!(
            "programmed {mib} MiB in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let mut addrs = Vec::new();
        for b in 0..blocks {
            let block = geometry.block_at(u64::from(b));
            for p in (0..ppb).step_by(pages as usize) {
                addrs.push((block.page(p), pages.min(ppb - p)));
            }
        }
        let passes: usize = std::env::var("PASSES")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(3);
        for _ in 0..passes {
            let started = Instant::now();
            let mut bytes = 0u64;
            let mut in_flight = if pipe {
                read_piped(&dev, &addrs, reads).await
            } else {
                read_all(&dev, &addrs, reads, hold).await
            };
            bytes += std::mem::take(&mut in_flight);
            let secs = started.elapsed().as_secs_f64();
            println!(
                "{reads} reads of {pages} pages in flight: {:.0} MiB/s of page data",
                bytes as f64 / f64::from(1 << 20) / secs
            );
            if let Ok(fio) = std::env::var("FIO") {
                // The same bytes, read by fio right after (FIO holds its
                // extra arguments, e.g. "--bs=2M --iodepth=2").
                let path = dev.backing_path().expect("a file backend");
                let out = std::process::Command::new("fio")
                    .args(["--name=same", "--rw=read", "--direct=1", "--readonly"])
                    .args(["--ioengine=io_uring", "--output-format=terse"])
                    .arg(format!("--filename={}", path.display()))
                    .arg(format!(
                        "--size={}",
                        u64::from(blocks) * u64::from(ppb) * dev.slot_size_bytes()
                    ))
                    .args(fio.split_whitespace())
                    .output()
                    .expect("fio");
                let terse = String::from_utf8_lossy(&out.stdout);
                // Terse v3: field 7 is the read bandwidth in KiB/s.
                let kib: f64 = terse
                    .split(';')
                    .nth(6)
                    .and_then(|f| f.parse().ok())
                    .unwrap_or(0.0);
                println!(
                    "fio {fio} on the same bytes: {:.0} MiB/s of slots",
                    kib / 1024.0
                );
            }
        }
        dev.close().await.expect("close");
    });
}

/// Reads every (address, count) with `depth` reads in flight, keeping the
/// pages of the last `hold` reads; returns the page bytes read.
async fn read_all(
    dev: &Arc<Device>,
    addrs: &[(quarry_device::PageAddr, u32)],
    depth: usize,
    hold: usize,
) -> u64 {
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0;
    let mut bytes = 0u64;
    let mut held = std::collections::VecDeque::new();
    loop {
        while next < addrs.len() && set.len() < depth {
            let (addr, n) = addrs[next];
            let dev = Arc::clone(dev);
            set.spawn(async move {
                let pages = dev.read_pages(addr, n).await.expect("read");
                let pages: Vec<_> = pages.into_iter().map(|p| p.expect("page").data).collect();
                (pages.iter().map(|p| p.len() as u64).sum::<u64>(), pages)
            });
            next += 1;
        }
        match set.join_next().await {
            Some(r) => {
                let (read, pages) = r.expect("reader");
                bytes += read;
                held.push_back(pages);
                if held.len() > hold {
                    held.pop_front();
                }
            }
            None => return bytes,
        }
    }
}

/// Keeps `depth` fetches in flight, starting the next before checking the
/// one whose bytes came in (as a scan does); returns the page bytes read.
async fn read_piped(
    dev: &Arc<Device>,
    addrs: &[(quarry_device::PageAddr, u32)],
    depth: usize,
) -> u64 {
    use futures::stream::{FuturesOrdered, StreamExt};
    use futures::FutureExt;
    let mut in_flight = FuturesOrdered::new();
    let mut done = std::collections::VecDeque::new();
    // The read taken last round, checked only once its replacement is out.
    let mut taken = None;
    let mut next = 0;
    let mut bytes = 0u64;
    loop {
        while next < addrs.len() && in_flight.len() + done.len() < depth {
            let (addr, n) = addrs[next];
            in_flight.push_back(dev.fetch_pages(addr, n));
            next += 1;
        }
        // The new requests reach the disk at this poll, before any check.
        while let Some(Some(f)) = in_flight.next().now_or_never() {
            done.push_back(f);
        }
        if let Some(fetched) = taken.take() {
            let fetched: Result<quarry_device::FetchedPages<'_>, _> = fetched;
            let pages = fetched.expect("fetch").check();
            bytes += pages
                .iter()
                .map(|p| p.as_ref().expect("page").data.len() as u64)
                .sum::<u64>();
            continue;
        }
        taken = match done.pop_front() {
            Some(f) => Some(f),
            None => match in_flight.next().await {
                Some(f) => Some(f),
                None => return bytes,
            },
        };
    }
}
