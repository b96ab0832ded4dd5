//! Behaviour tests of the device: NAND rules, backends, persistence, recovery,
//! ECC through the backing file, and the nand timing model.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_device::{
    BackendKind, BlockAddr, Device, DeviceConfig, DeviceError, EccMode, Geometry, NandTiming,
    OpenOptions, PageAddr, Preset,
};

fn small() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 4,
        pages_per_block: 8,
        page_size_bytes: 4096,
        oob_size_bytes: 32,
    }
}

fn cfg(backend: BackendKind) -> DeviceConfig {
    DeviceConfig {
        backend,
        geometry: Some(small()),
        direct_io: Some(true),
        seed: Some(1),
        ..DeviceConfig::default()
    }
}

/// A fast nand timing: RFSA scaled down 100x, no bit errors unless asked.
fn fast_timing(layout_bytes: u64) -> NandTiming {
    let mut t = NandTiming::preset(Preset::Rfsa, layout_bytes).scaled(0.01);
    t.factory_bad_fraction = 0.0;
    t
}

fn open(backend: BackendKind, dir: &Path) -> Device {
    let options = OpenOptions {
        nand_timing: Some(fast_timing(4800)),
        ..OpenOptions::default()
    };
    Device::open_with(&cfg(backend), dir, options).expect("open")
}

fn page_data(dev: &Device, seed: u8) -> Bytes {
    let n = dev.geometry().page_size_bytes as usize;
    Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect::<Vec<_>>(),
    )
}

/// Flips `n` bytes of the device's backing file at byte `at` (XOR 0xA5).
fn flip_bytes(dev: &Device, at: u64, n: usize) {
    let path = dev.backing_path().expect("path");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = vec![0u8; n];
    file.read_exact_at(&mut b, at).expect("read");
    for x in &mut b {
        *x ^= 0xA5;
    }
    file.write_all_at(&b, at).expect("write");
}

const B: BlockAddr = BlockAddr {
    bus: 1,
    chip: 0,
    block: 2,
};

async fn rules(dev: &Device) {
    let p0 = B.page(0);
    let d = page_data(dev, 1);
    // Erased read.
    let r = dev.read_page(p0).await.expect("read erased");
    assert!(r.erased);
    assert!(r.data.iter().all(|&b| b == 0xFF) && r.oob.iter().all(|&b| b == 0xFF));
    assert_eq!(r.oob.len(), 32);
    // Out of order.
    match dev.program_page(B.page(2), d.clone(), Bytes::new()).await {
        Err(DeviceError::OutOfOrder { expected: 0, .. }) => {}
        other => panic!("expected OutOfOrder, got {other:?}"),
    }
    dev.program_page(p0, d.clone(), Bytes::from_static(b"hi"))
        .await
        .expect("program");
    match dev.program_page(p0, d.clone(), Bytes::new()).await {
        Err(DeviceError::AlreadyProgrammed { .. }) => {}
        other => panic!("expected AlreadyProgrammed, got {other:?}"),
    }
    match dev
        .program_page(B.page(1), d.slice(1..), Bytes::new())
        .await
    {
        Err(DeviceError::PageSize {
            expected: 4096,
            got: 4095,
        }) => {}
        other => panic!("expected PageSize, got {other:?}"),
    }
    match dev
        .program_page(B.page(1), d.clone(), Bytes::from(vec![0; 33]))
        .await
    {
        Err(DeviceError::OobSize { max: 32, got: 33 }) => {}
        other => panic!("expected OobSize, got {other:?}"),
    }
    let out = PageAddr {
        bus: 0,
        chip: 0,
        block: 0,
        page: 8,
    };
    let err = dev.read_page(out).await.expect_err("out of range");
    let msg = err.to_string();
    assert!(
        matches!(err, DeviceError::AddressOutOfRange { field: "page", .. }),
        "{msg}"
    );
    assert!(
        msg.contains("page 0..=7") && msg.contains("bus 0..=1"),
        "{msg}"
    );
    let err = dev
        .erase_block(BlockAddr {
            bus: 2,
            chip: 0,
            block: 0,
        })
        .await
        .expect_err("bus");
    assert!(err.to_string().contains("bus 0..=1"), "{err}");
    // Read back.
    let r = dev.read_page(p0).await.expect("read");
    assert!(!r.erased);
    assert_eq!(r.data, d);
    assert_eq!(&r.oob[..2], b"hi");
    assert!(r.oob[2..].iter().all(|&b| b == 0xFF));
    assert_eq!(r.oob.len(), 32);
    // Erase.
    let before = dev.erase_count(B).expect("ec");
    dev.erase_block(B).await.expect("erase");
    assert_eq!(dev.erase_count(B).expect("ec"), before + 1);
    assert!(dev.read_page(p0).await.expect("read").erased);
    dev.program_page(p0, d.clone(), Bytes::new())
        .await
        .expect("program after erase");
    assert_eq!(dev.read_page(p0).await.expect("read").data, d);
    // Bad block.
    let bad = BlockAddr {
        bus: 0,
        chip: 1,
        block: 3,
    };
    dev.mark_bad(bad).await.expect("mark bad");
    match dev.program_page(bad.page(0), d.clone(), Bytes::new()).await {
        Err(DeviceError::BadBlock { .. }) => {}
        other => panic!("expected BadBlock, got {other:?}"),
    }
    assert!(matches!(
        dev.erase_block(bad).await,
        Err(DeviceError::BadBlock { .. })
    ));
    assert!(dev.info().bad_blocks.contains(&bad));
}

#[tokio::test]
async fn nand_rules_mem() {
    let dev = open(BackendKind::Mem, Path::new("unused"));
    rules(&dev).await;
    dev.close().await.expect("close");
    assert!(matches!(
        dev.read_page(B.page(0)).await,
        Err(DeviceError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nand_rules_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(BackendKind::File, dir.path());
    rules(&dev).await;
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nand_rules_nand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(BackendKind::Nand, dir.path());
    rules(&dev).await;
    dev.close().await.expect("close");
}

async fn fill(dev: &Device) {
    for (i, blk) in [
        B,
        BlockAddr {
            bus: 0,
            chip: 0,
            block: 0,
        },
    ]
    .into_iter()
    .enumerate()
    {
        for p in 0..3 {
            dev.program_page(
                blk.page(p),
                page_data(dev, (i * 10) as u8 + p as u8),
                Bytes::from(vec![p as u8; 5]),
            )
            .await
            .expect("program");
        }
    }
}

async fn check(dev: &Device) {
    for (i, blk) in [
        B,
        BlockAddr {
            bus: 0,
            chip: 0,
            block: 0,
        },
    ]
    .into_iter()
    .enumerate()
    {
        for p in 0..3 {
            let r = dev.read_page(blk.page(p)).await.expect("read");
            assert_eq!(
                r.data,
                page_data(dev, (i * 10) as u8 + p as u8),
                "{blk} page {p}"
            );
            assert_eq!(&r.oob[..5], &[p as u8; 5]);
        }
        assert!(dev.read_page(blk.page(3)).await.expect("read").erased);
        assert_eq!(dev.write_pointer(blk).expect("wp"), 3);
    }
}

async fn persistence(backend: BackendKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = BlockAddr {
        bus: 1,
        chip: 1,
        block: 1,
    };
    {
        let dev = open(backend, dir.path());
        dev.erase_block(B).await.expect("erase");
        dev.erase_block(B).await.expect("erase");
        fill(&dev).await;
        dev.mark_bad(bad).await.expect("bad");
        dev.close().await.expect("close");
    }
    {
        let dev = open(backend, dir.path());
        check(&dev).await;
        assert_eq!(dev.erase_count(B).expect("ec"), 2);
        assert!(dev.is_bad(bad).expect("bad"));
        assert_eq!(dev.info().programmed_pages, 6);
        // Unclean stop: programs after the last metadata save, then drop.
        dev.program_page(B.page(3), page_data(&dev, 99), Bytes::new())
            .await
            .expect("program");
        dev.program_page(B.page(4), page_data(&dev, 98), Bytes::new())
            .await
            .expect("program");
        drop(dev);
    }
    {
        let dev = open(backend, dir.path());
        assert_eq!(
            dev.write_pointer(B).expect("wp"),
            5,
            "write pointer recovered by probing"
        );
        assert_eq!(
            dev.read_page(B.page(4)).await.expect("read").data,
            page_data(&dev, 98)
        );
        assert!(matches!(
            dev.program_page(B.page(4), page_data(&dev, 1), Bytes::new())
                .await,
            Err(DeviceError::AlreadyProgrammed { .. })
        ));
        // Erase then unclean stop: old pages must not come back.
        dev.erase_block(B).await.expect("erase");
        drop(dev);
    }
    let dev = open(backend, dir.path());
    assert_eq!(dev.write_pointer(B).expect("wp"), 0);
    assert_eq!(dev.erase_count(B).expect("ec"), 3);
    assert!(dev.read_page(B.page(0)).await.expect("read").erased);
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_file() {
    persistence(BackendKind::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_nand() {
    persistence(BackendKind::Nand).await;
}

#[tokio::test]
async fn geometry_mismatch_and_corrupt_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(BackendKind::File, dir.path());
    dev.close().await.expect("close");
    drop(dev);
    let mut other = cfg(BackendKind::File);
    other.geometry = Some(Geometry {
        blocks_per_chip: 8,
        ..small()
    });
    let err = Device::open(&other, dir.path())
        .err()
        .expect("mismatch refused");
    let msg = err.to_string();
    assert!(matches!(err, DeviceError::Metadata { .. }), "{msg}");
    assert!(
        msg.contains("4 blocks") && msg.contains("8 blocks"),
        "{msg}"
    );
    let meta = dir.path().join("device.meta");
    let mut bytes = std::fs::read(&meta).expect("meta");
    bytes[50] ^= 1;
    std::fs::write(&meta, &bytes).expect("write");
    let err = Device::open(&cfg(BackendKind::File), dir.path())
        .err()
        .expect("corrupt refused");
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ecc_corrects_flipped_bytes_in_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(BackendKind::File, dir.path());
    let p = B.page(0);
    let d = page_data(&dev, 5);
    dev.program_page(p, d.clone(), Bytes::from_static(b"meta"))
        .await
        .expect("program");
    let off = dev.page_offset_bytes(p).expect("offset");
    let flip = |at: u64, n: usize| flip_bytes(&dev, at, n);
    // Random-ish single bytes in several sectors plus the OOB.
    for at in [3u64, 1500, 2900, 4000] {
        flip(off + at, 1);
    }
    flip(off + dev.slot_layout().oob_offset as u64, 1);
    let r = dev.read_page(p).await.expect("corrected");
    assert_eq!(r.data, d);
    assert_eq!(&r.oob[..4], b"meta");
    assert_eq!(r.corrected_bytes, 5);
    // A 30-byte burst (5 interleaved codewords x 6) in one sector.
    dev.program_page(B.page(1), d.clone(), Bytes::new())
        .await
        .expect("program");
    let off1 = dev.page_offset_bytes(B.page(1)).expect("offset");
    flip(off1 + 2000, 30);
    let r = dev.read_page(B.page(1)).await.expect("burst corrected");
    assert_eq!(r.data, d);
    assert_eq!(r.corrected_bytes, 30);
    // Beyond the code's strength: uncorrectable, never data.
    dev.program_page(B.page(2), d.clone(), Bytes::new())
        .await
        .expect("program");
    let off2 = dev.page_offset_bytes(B.page(2)).expect("offset");
    flip(off2 + 100, 200);
    match dev.read_page(B.page(2)).await {
        Err(DeviceError::Uncorrectable { addr, .. }) => assert_eq!(addr, B.page(2)),
        other => panic!("expected Uncorrectable, got {other:?}"),
    }
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_programs_and_reads_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Arc::new(open(BackendKind::File, dir.path()));
    let mut tasks = Vec::new();
    let g = dev.geometry();
    for bus in 0..g.buses {
        for chip in 0..g.chips_per_bus {
            for block in 0..g.blocks_per_chip {
                let dev = Arc::clone(&dev);
                tasks.push(tokio::spawn(async move {
                    let b = BlockAddr { bus, chip, block };
                    for p in 0..g.pages_per_block {
                        let d = page_data(&dev, (block * 8 + p) as u8);
                        dev.program_page(b.page(p), d.clone(), Bytes::new())
                            .await
                            .expect("program");
                        assert_eq!(dev.read_page(b.page(p)).await.expect("read").data, d);
                    }
                }));
            }
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(dev.info().programmed_pages, g.pages());
    dev.close().await.expect("close");
}

#[tokio::test]
async fn queue_full_is_bounded() {
    let options = OpenOptions {
        max_inflight: 1,
        ..OpenOptions::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = cfg(BackendKind::Nand);
    c.seed = Some(3);
    let options = OpenOptions {
        nand_timing: Some(fast_timing(4800).scaled(100.0)),
        ..options
    };
    let dev = Device::open_with(&c, dir.path(), options).expect("open");
    let p = B.page(0);
    // A read takes the one slot at its first poll and holds it until done.
    // Joined with a second, it could finish within that poll (its chip
    // time may be over by the time the scheduler answers, on a busy
    // machine), and both would pass: so the second is sent only once the
    // first is seen in flight.
    let mut tries = 0;
    loop {
        tries += 1;
        assert!(tries <= 100, "a read was never seen in flight");
        let mut a = Box::pin(dev.read_page(p));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(a.as_mut(), cx))
        })
        .await;
        if first.is_ready() {
            continue;
        }
        let b = dev.read_page(p).await;
        assert!(
            matches!(b, Err(DeviceError::QueueFull { limit: 1 })),
            "{b:?}"
        );
        assert!(a.await.is_ok());
        break;
    }
    // With the slot free again, a read passes.
    assert!(dev.read_page(p).await.is_ok());
}

fn nand_device(dir: &Path, timing: NandTiming, seed: u64) -> Device {
    let c = DeviceConfig {
        backend: BackendKind::Nand,
        preset: Some(Preset::Rfsa),
        geometry: Some(Geometry {
            blocks_per_chip: 4,
            pages_per_block: 4,
            ..quarry_device::preset_geometry(Preset::Rfsa)
        }),
        seed: Some(seed),
        ..DeviceConfig::default()
    };
    Device::open_with(
        &c,
        dir,
        OpenOptions {
            nand_timing: Some(timing),
            ..OpenOptions::default()
        },
    )
    .expect("open nand")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nand_qd1_read_takes_at_least_the_modeled_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = nand_device(dir.path(), NandTiming::preset(Preset::Rfsa, 8800), 1);
    let mut timing = probe.nand_timing().expect("timing").clone();
    drop(probe);
    timing.factory_bad_fraction = 0.0;
    assert!(
        timing.transfer_time() > Duration::from_micros(40)
            && timing.transfer_time() < Duration::from_micros(46)
    );
    // 10x slower than RFSA so task start-up skew on 2 cores is small next to a read.
    let timing = timing.scaled(10.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Arc::new(nand_device(dir.path(), timing.clone(), 1));
    assert_eq!(dev.peak_bus_bandwidth(), Some(8 * 20_000_000));
    let p = PageAddr {
        bus: 0,
        chip: 0,
        block: 0,
        page: 0,
    };
    dev.program_page(p, Bytes::from(vec![1u8; 8192]), Bytes::new())
        .await
        .expect("program");
    let min = timing.read_device_time_min();
    for _ in 0..20 {
        let t = Instant::now();
        let r = dev.read_page(p).await.expect("read");
        let took = t.elapsed();
        assert!(
            took >= min,
            "QD1 read took {took:?}, modeled at least {min:?}"
        );
        assert!(r.data.iter().all(|&b| b == 1));
    }
    // One read per bus at once all complete with their data. How far they
    // overlap is checked in model time by the scheduler's own tests
    // (`nand::tests`): wall time on a loaded 2-core machine cannot show it.
    let mut tasks = Vec::new();
    for bus in 0..8 {
        let dev = Arc::clone(&dev);
        tasks.push(tokio::spawn(async move {
            dev.read_page(PageAddr {
                bus,
                chip: 0,
                block: 1,
                page: 0,
            })
            .await
            .expect("read")
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nand_bit_errors_are_corrected_and_grow_with_wear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut timing = fast_timing(8800);
    timing.rber_fresh = 8.0 / (9216.0 * 8.0); // ~8 flips per fresh page
    timing.rber_growth_per_erase = 0.25;
    let dev = nand_device(dir.path(), timing, 7);
    let b = BlockAddr {
        bus: 3,
        chip: 2,
        block: 1,
    };
    let mut corrected = 0;
    for round in 0..3u32 {
        dev.erase_block(b).await.expect("erase");
        assert_eq!(dev.erase_count(b).expect("ec"), round + 1);
        let d = Bytes::from(vec![round as u8; 8192]);
        dev.program_page(b.page(0), d.clone(), Bytes::new())
            .await
            .expect("program");
        for _ in 0..10 {
            let r = dev.read_page(b.page(0)).await.expect("corrected read");
            assert_eq!(r.data, d);
            corrected += r.corrected_bytes;
        }
    }
    assert!(corrected > 0, "bit errors were injected and corrected");
    assert_eq!(dev.info().erase_count_max, 3);
    dev.close().await.expect("close");
}

#[tokio::test]
async fn nand_factory_bad_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut timing = fast_timing(8800);
    timing.factory_bad_fraction = 0.2;
    let dev = nand_device(dir.path(), timing.clone(), 11);
    let bad = dev.info().bad_blocks;
    assert!(!bad.is_empty(), "some factory bad blocks");
    assert!((bad.len() as u64) < dev.geometry().blocks());
    let b = bad[0];
    assert!(matches!(
        dev.program_page(b.page(0), Bytes::from(vec![0; 8192]), Bytes::new())
            .await,
        Err(DeviceError::BadBlock { .. })
    ));
    assert!(matches!(
        dev.erase_block(b).await,
        Err(DeviceError::BadBlock { .. })
    ));
    dev.close().await.expect("close");
    drop(dev);
    let dev = nand_device(dir.path(), timing, 11);
    assert_eq!(dev.info().bad_blocks, bad, "bad-block table persists");
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_with_program_in_flight_is_busy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut timing = fast_timing(8800);
    timing.t_prog_min_ns = 50_000_000;
    timing.t_prog_max_ns = 50_000_000;
    let dev = Arc::new(nand_device(dir.path(), timing, 5));
    let b = BlockAddr {
        bus: 0,
        chip: 0,
        block: 0,
    };
    let d2 = Arc::clone(&dev);
    let prog = tokio::spawn(async move {
        d2.program_page(b.page(0), Bytes::from(vec![9; 8192]), Bytes::new())
            .await
    });
    while dev.write_pointer(b).expect("wp") == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // In flight: erase is refused, reads see the erased page (a read queues
    // behind the program on the chip, but the page's state is taken on entry).
    let e = dev.erase_block(b).await;
    assert!(matches!(e, Err(DeviceError::BlockBusy { .. })), "{e:?}");
    assert!(dev.read_page(b.page(0)).await.expect("read").erased);
    prog.await.expect("task").expect("program");
    assert!(!dev.read_page(b.page(0)).await.expect("read").erased);
    dev.close().await.expect("close");
}

/// A device opened outside any tokio runtime has no reactor to reap io_uring
/// completions, so it runs on blocking I/O threads; one opened inside a
/// runtime uses io_uring. Both keep the same data.
#[test]
fn file_engine_with_and_without_a_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let outside = Device::open(&cfg(BackendKind::File), dir.path()).expect("open");
    assert_eq!(outside.info().io_engine, "threads");
    let data = page_data(&outside, 9);
    runtime.block_on(async {
        outside.erase_block(B).await.expect("erase");
        outside
            .program_page(B.page(0), data.clone(), Bytes::new())
            .await
            .expect("program");
        outside.close().await.expect("close");
    });
    drop(outside);
    let inside = runtime.block_on(async {
        let dev = Device::open(&cfg(BackendKind::File), dir.path()).expect("reopen");
        assert_eq!(dev.info().io_engine, "io_uring");
        let read = dev.read_page(B.page(0)).await.expect("read");
        assert_eq!(read.data, data);
        dev.close().await.expect("close");
        dev
    });
    drop(inside);
}

/// A caller that gives up on a program (drops its future mid-flight) must not
/// leave the block busy for ever: the page counts as programmed, later pages
/// follow it, and the block can be erased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_program_leaves_the_block_usable() {
    let dir = tempfile::tempdir().expect("tempdir");
    // RFSA timing slowed 20x: a program takes 8-42 ms, so the 50 us timeout
    // below fires first even on a loaded machine (at full speed, 0.4 ms, a
    // late timer let the program finish first once in a while).
    let dev = nand_device(
        dir.path(),
        NandTiming::preset(Preset::Rfsa, 8800).scaled(20.0),
        7,
    );
    let block = BlockAddr {
        bus: 0,
        chip: 0,
        block: 1,
    };
    dev.erase_block(block).await.expect("erase");
    let page = PageAddr {
        bus: 0,
        chip: 0,
        block: 1,
        page: 0,
    };
    let data = page_data(&dev, 3);
    let gave_up = tokio::time::timeout(
        std::time::Duration::from_micros(50),
        dev.program_page(page, data.clone(), Bytes::new()),
    )
    .await;
    assert!(gave_up.is_err(), "the program finished within 50 us");
    match dev.program_page(page, data.clone(), Bytes::new()).await {
        Err(quarry_device::DeviceError::AlreadyProgrammed { .. }) => {}
        other => panic!("the dropped page must count as programmed: {other:?}"),
    }
    let next = PageAddr { page: 1, ..page };
    dev.program_page(next, data.clone(), Bytes::new())
        .await
        .expect("the next page follows");
    assert_eq!(dev.read_page(next).await.expect("read").data, data);
    // Wait out the dropped program's modeled time, then erase.
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    dev.erase_block(block)
        .await
        .expect("the block is not left busy");
    dev.close().await.expect("close");
}

/// `read_pages` answers what `read_page` answers for each page of the run:
/// one disk request on `file`, page by page elsewhere; a damaged page fails
/// alone, unprogrammed pages read as erased, a run may go on into the next
/// block, and a run past the device's end or longer than `max_read_pages`
/// is refused.
#[allow(clippy::too_many_lines)] // one scenario, step by step
async fn multi_page_reads(backend: BackendKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(backend, dir.path());
    let max = dev.max_read_pages();
    assert!(max >= 1 && max <= dev.geometry().pages_per_block);
    let written = 6u32;
    let mut data = Vec::new();
    for p in 0..written {
        let d = page_data(&dev, p as u8 + 40);
        dev.program_page(B.page(p), d.clone(), Bytes::from(vec![p as u8; 4]))
            .await
            .expect("program");
        data.push(d);
    }
    let run = dev.read_pages(B.page(1), 4).await.expect("read run");
    assert_eq!(run.len(), 4);
    for (i, r) in run.into_iter().enumerate() {
        let r = r.expect("page");
        let p = 1 + i;
        assert!(!r.erased);
        assert_eq!(r.data, data[p], "page {p}");
        assert_eq!(&r.oob[..4], &[p as u8; 4]);
    }
    // Past the write pointer: the programmed pages come back, the rest erased.
    let run = dev.read_pages(B.page(4), 4).await.expect("read run");
    let erased: Vec<bool> = run
        .iter()
        .map(|r| r.as_ref().expect("page").erased)
        .collect();
    assert_eq!(erased, vec![false, false, true, true]);
    assert_eq!(run[0].as_ref().expect("page").data, data[4]);
    assert!(dev
        .read_pages(B.page(0), 0)
        .await
        .expect("empty")
        .is_empty());
    // A run goes on into the next block, which follows in the device's page
    // order (and in the backing file): one request on `file`. Its
    // programmed pages come back, the rest read as erased.
    let g = dev.geometry();
    let ppb = g.pages_per_block;
    let next = BlockAddr {
        block: B.block + 1,
        ..B
    };
    assert_eq!(
        g.page_index(next.page(0)),
        g.page_index(B.page(ppb - 1)) + 1
    );
    for p in written..ppb {
        let d = page_data(&dev, p as u8 + 40);
        dev.program_page(B.page(p), d.clone(), Bytes::from(vec![p as u8; 4]))
            .await
            .expect("program");
        data.push(d);
    }
    let beyond = page_data(&dev, 99);
    dev.program_page(next.page(0), beyond.clone(), Bytes::from_static(b"next"))
        .await
        .expect("program the next block");
    let run = dev
        .read_pages(B.page(ppb - 2), 4)
        .await
        .expect("a run across the block boundary");
    let got: Vec<_> = run.into_iter().map(|r| r.expect("page")).collect();
    assert_eq!(got[0].data, data[ppb as usize - 2]);
    assert_eq!(got[1].data, data[ppb as usize - 1]);
    assert_eq!(got[2].data, beyond, "the next block's first page");
    assert_eq!(&got[2].oob[..4], b"next");
    assert!(
        !got[2].erased && got[3].erased,
        "only page 0 of it is written"
    );
    // All programmed: on `file`, one disk request over both blocks.
    let run = dev
        .read_pages(B.page(ppb - 2), 3)
        .await
        .expect("a programmed run across the block boundary");
    let got: Vec<_> = run.into_iter().map(|r| r.expect("page").data).collect();
    assert_eq!(
        got,
        vec![
            data[ppb as usize - 2].clone(),
            data[ppb as usize - 1].clone(),
            beyond.clone()
        ]
    );
    // Past the device's last page, or more than one read may cover: refused.
    let last = BlockAddr {
        bus: g.buses - 1,
        chip: g.chips_per_bus - 1,
        block: g.blocks_per_chip - 1,
    };
    match dev.read_pages(last.page(ppb - 1), 2).await {
        Err(DeviceError::AddressOutOfRange { field: "page", .. }) => {}
        other => panic!(
            "expected AddressOutOfRange, got {:?}",
            other.map(|v| v.len())
        ),
    }
    assert!(dev.read_pages(B.page(0), max + 1).await.is_err());
    if backend == BackendKind::File {
        // Damage page 2 beyond the code's strength: it fails, its neighbours
        // in the same request do not.
        let off = dev.page_offset_bytes(B.page(2)).expect("offset");
        flip_bytes(&dev, off + 100, 400);
        let run = dev.read_pages(B.page(1), 3).await.expect("read run");
        assert_eq!(run[0].as_ref().expect("page 1").data, data[1]);
        match &run[1] {
            Err(DeviceError::Uncorrectable { addr, .. }) => assert_eq!(*addr, B.page(2)),
            other => panic!(
                "expected Uncorrectable, got {:?}",
                other.as_ref().map(|r| r.erased)
            ),
        }
        assert_eq!(run[2].as_ref().expect("page 3").data, data[3]);
        // A few bytes of page 4 damaged: it comes back corrected, from a
        // copy; the request's buffer, which its neighbours share, is not
        // written, so a read again corrects again.
        let off = dev.page_offset_bytes(B.page(4)).expect("offset");
        flip_bytes(&dev, off + 1500, 3);
        for _ in 0..2 {
            let mut fetched = dev.fetch_pages(B.page(3), 3).await.expect("fetch");
            assert_eq!(fetched.len(), 3);
            let fourth = fetched.check_page(1).expect("page 4 corrected");
            assert_eq!((fourth.data, fourth.corrected_bytes), (data[4].clone(), 3));
            assert_eq!(fetched.check_page(0).expect("page 3").data, data[3]);
            assert_eq!(fetched.check_page(2).expect("page 5").data, data[5]);
            assert!(matches!(
                fetched.check_page(3),
                Err(DeviceError::AddressOutOfRange { .. })
            ));
        }
    }
    dev.close().await.expect("close");
    assert!(matches!(
        dev.read_pages(B.page(0), 2).await,
        Err(DeviceError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_page_reads_file() {
    multi_page_reads(BackendKind::File).await;
}

#[tokio::test]
async fn multi_page_reads_mem() {
    multi_page_reads(BackendKind::Mem).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_page_reads_nand() {
    multi_page_reads(BackendKind::Nand).await;
}

/// CRC-only slots of 16 KiB pages are 16896 bytes: runs of them start and
/// end inside 4 KiB pages, and the device widens each request to whole
/// pages. Every start and length within a block, and the device's last
/// block (where widening would run past the file), read back exactly the
/// bytes programmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_page_reads_of_unaligned_slots() {
    let geometry = Geometry {
        page_size_bytes: 16384,
        pages_per_block: 16,
        ..small()
    };
    let config = DeviceConfig {
        ecc: EccMode::Crc,
        geometry: Some(geometry),
        ..cfg(BackendKind::File)
    };
    let slot = quarry_device::SlotLayout::crc_only(&geometry)
        .unwrap()
        .slot_size;
    assert_ne!(
        slot % 4096,
        0,
        "the test needs slots that are not 4 KiB multiples"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Device::open(&config, dir.path()).expect("open");
    let last = geometry.block_at(geometry.blocks() - 1);
    let mut data = HashMap::new();
    for block in [B, last] {
        for p in 0..geometry.pages_per_block {
            let d = page_data(&dev, p as u8 ^ block.bus as u8 ^ (block.block as u8) << 4);
            dev.program_page(block.page(p), d.clone(), Bytes::from(vec![p as u8; 8]))
                .await
                .expect("program");
            data.insert(block.page(p), d);
        }
    }
    let ppb = geometry.pages_per_block;
    let max = dev.max_read_pages().min(ppb);
    for block in [B, last] {
        for first in 0..ppb {
            for count in 1..=max.min(ppb - first) {
                let run = dev
                    .read_pages(block.page(first), count)
                    .await
                    .expect("read run");
                for (i, r) in run.into_iter().enumerate() {
                    let addr = block.page(first + i as u32);
                    let r = r.unwrap_or_else(|e| panic!("{addr} in {first}+{count}: {e}"));
                    assert_eq!(r.data, data[&addr], "{addr} in {first}+{count}");
                    assert_eq!(&r.oob[..8], &[addr.page as u8; 8]);
                }
            }
        }
    }
    dev.close().await.expect("close");
}

/// `ecc = "crc"` slots have no parity room; a device made with parity room
/// (by `ecc = "rs"`, or by a build before CRC-only slots) keeps its layout
/// when opened as crc, and a CRC-only device opened as rs is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crc_only_slots_and_devices_made_with_parity_room() {
    // 16 KiB pages: there the parity room changes the slot size (4 KiB
    // pages round up to the same 512-byte multiple either way).
    let geometry = Geometry {
        page_size_bytes: 16384,
        ..small()
    };
    let with_ecc = |ecc| DeviceConfig {
        ecc,
        geometry: Some(geometry),
        ..cfg(BackendKind::File)
    };
    let rs_slot = quarry_device::SlotLayout::new(&geometry).unwrap().slot_size as u64;
    let crc_slot = quarry_device::SlotLayout::crc_only(&geometry)
        .unwrap()
        .slot_size as u64;
    assert!(crc_slot < rs_slot);
    // Made with parity room, opened as crc: same layout, same data.
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Device::open(&with_ecc(EccMode::Rs), dir.path()).expect("open rs");
    let d = page_data(&dev, 9);
    dev.program_page(B.page(0), d.clone(), Bytes::from_static(b"m"))
        .await
        .expect("program");
    dev.close().await.expect("close");
    let dev = Device::open(&with_ecc(EccMode::Crc), dir.path()).expect("open as crc");
    assert_eq!(dev.slot_size_bytes(), rs_slot);
    assert_eq!(dev.read_page(B.page(0)).await.expect("read").data, d);
    dev.close().await.expect("close");
    // A fresh crc device: the smaller slots, and it reopens as crc only.
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Device::open(&with_ecc(EccMode::Crc), dir.path()).expect("open crc");
    assert_eq!(dev.slot_size_bytes(), crc_slot);
    dev.program_page(B.page(0), d.clone(), Bytes::new())
        .await
        .expect("program");
    dev.program_page(B.page(1), d.clone(), Bytes::new())
        .await
        .expect("program");
    let run = dev.read_pages(B.page(0), 2).await.expect("read run");
    assert!(run.iter().all(|r| r.as_ref().is_ok_and(|r| r.data == d)));
    dev.close().await.expect("close");
    let dev = Device::open(&with_ecc(EccMode::Crc), dir.path()).expect("reopen crc");
    assert_eq!(dev.read_page(B.page(1)).await.expect("read").data, d);
    dev.close().await.expect("close");
    let err = Device::open(&with_ecc(EccMode::Rs), dir.path())
        .err()
        .expect("a crc device opened as rs is refused");
    assert!(err.to_string().contains("slot size"), "{err}");
    assert!(err.to_string().contains("ecc"), "{err}");
}

/// Bytes of the file's blocks on its filesystem.
fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("stat").blocks() * 512
}

/// With `preallocate = true` the `file` backend's backing file is
/// allocated whole when the device opens, and erases keep it allocated (in
/// place: the file stays in long runs) while the erased pages read as
/// erased; `preallocate = false` leaves it sparse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backing_file_is_allocated_whole_and_erases_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let whole = DeviceConfig {
        preallocate: Some(true),
        ..cfg(BackendKind::File)
    };
    let dev = Device::open(&whole, dir.path()).unwrap();
    let path = dir.path().join("pages.bin");
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(allocated_bytes(&path) >= len, "allocated whole");
    let block = BlockAddr {
        bus: 0,
        chip: 0,
        block: 0,
    };
    let page = block.page(0);
    dev.program_page(page, page_data(&dev, 3), Bytes::new())
        .await
        .unwrap();
    assert_eq!(dev.read_page(page).await.unwrap().data, page_data(&dev, 3));
    dev.erase_block(block).await.unwrap();
    assert!(dev.read_page(page).await.unwrap().erased);
    assert!(allocated_bytes(&path) >= len, "the erase kept the blocks");
    drop(dev);

    let dir = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        preallocate: Some(false),
        ..cfg(BackendKind::File)
    };
    let dev = Device::open(&config, dir.path()).unwrap();
    let path = dir.path().join("pages.bin");
    assert!(
        allocated_bytes(&path) < std::fs::metadata(&path).unwrap().len() / 2,
        "sparse"
    );
    drop(dev);
}

/// By default the backing file takes no room up front: a device of 64 GiB
/// opens with a few blocks of its file on the disk, through O_DIRECT, and
/// grows as pages are written (they read back), and an erase gives the room
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_file_grows_as_pages_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = DeviceConfig {
        capacity_bytes: Some(64 << 30),
        geometry: None,
        ..cfg(BackendKind::File)
    };
    let dev = Device::open(&config, dir.path()).unwrap();
    assert_eq!(dev.geometry().capacity_bytes(), 64 << 30);
    // O_DIRECT works on the sparse file wherever it does on an allocated
    // one (on this machine's ext4 both have it).
    let allocated = Device::open(
        &DeviceConfig {
            preallocate: Some(true),
            ..cfg(BackendKind::File)
        },
        &dir.path().join("allocated"),
    )
    .unwrap();
    assert_eq!(dev.info().direct_io, allocated.info().direct_io);
    drop(allocated);
    let path = dir.path().join("pages.bin");
    assert!(std::fs::metadata(&path).unwrap().len() > 64 << 30);
    assert!(
        allocated_bytes(&path) < 1 << 20,
        "{}",
        allocated_bytes(&path)
    );
    let block = BlockAddr {
        bus: 1,
        chip: 2,
        block: 3,
    };
    let pages: Vec<(Bytes, Bytes)> = (0..8).map(|i| (page_data(&dev, i), Bytes::new())).collect();
    dev.program_pages(block.page(0), &pages).await.unwrap();
    let written = allocated_bytes(&path);
    let page_bytes = u64::from(dev.geometry().page_size_bytes);
    assert!(written >= 8 * page_bytes, "{written}");
    assert!(written < (8 * page_bytes) + (1 << 20), "{written}");
    for (i, (data, _)) in pages.iter().enumerate() {
        let got = dev.read_page(block.page(i as u32)).await.unwrap();
        assert_eq!(&got.data, data, "page {i}");
    }
    dev.erase_block(block).await.unwrap();
    assert!(
        allocated_bytes(&path) < written,
        "the erase gave the room back"
    );
    drop(dev);
}

/// A capacity sizes the geometry in whole blocks; one the shape cannot
/// hold, or one given with a geometry, is refused with the reason.
#[test]
fn a_capacity_sizes_the_geometry_or_is_refused() {
    let base = Geometry::default();
    let row = base.chips() * u64::from(base.pages_per_block) * u64::from(base.page_size_bytes);
    let g = base.with_capacity(8 << 30).unwrap();
    assert_eq!(g.capacity_bytes(), 8 << 30);
    assert_eq!(
        base.with_capacity((8 << 30) + row - 1)
            .unwrap()
            .capacity_bytes(),
        8 << 30,
        "rounded down to whole blocks"
    );
    for bad in [0, row, u64::MAX] {
        match base.with_capacity(bad) {
            Err(quarry_geometry::GeometryError::InvalidGeometry { reason }) => {
                assert!(
                    reason.contains(&format!("capacity_bytes = {bad}")),
                    "{reason}"
                )
            }
            other => panic!("capacity {bad}: {other:?}"),
        }
    }
    let both = DeviceConfig {
        capacity_bytes: Some(1 << 30),
        ..cfg(BackendKind::Mem)
    };
    match quarry_device::geometry_of(&both) {
        Err(DeviceError::Config { reason }) => assert!(reason.contains("not both"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// A filesystem without room for the device fails the open, naming the
/// file, instead of a write later. Needs root (a 1 MiB tmpfs); without it
/// the test fails, saying so (quarry_testkit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_without_room_for_the_device_fails_the_open() {
    if !quarry_testkit::require_root("mount a 1 MiB tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(dir.path())
        .status();
    let mounted = mounted.map_err(|e| e.to_string()).and_then(|status| {
        if status.success() {
            Ok(())
        } else {
            Err(format!("mount -t tmpfs exited {status}"))
        }
    });
    if !quarry_testkit::require(
        "a 1 MiB tmpfs",
        "the test mounts one itself as root (mount, util-linux)",
        mounted,
    ) {
        return;
    }
    // About 2.4 MB of slots.
    let config = DeviceConfig {
        geometry: Some(Geometry {
            blocks_per_chip: 16,
            ..small()
        }),
        preallocate: Some(true),
        ..cfg(BackendKind::File)
    };
    let result = Device::open(&config, dir.path()).map(drop);
    // Sparse, the same device opens: its writes would fail later.
    let sparse = Device::open(
        &DeviceConfig {
            preallocate: Some(false),
            ..config.clone()
        },
        &dir.path().join("sparse"),
    )
    .map(drop);
    // Lazily: the devices' I/O tasks let go of their files as they wind down.
    let unmounted = std::process::Command::new("umount")
        .arg("-l")
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    assert!(unmounted, "umount {}", dir.path().display());
    match result {
        Err(DeviceError::NoSpace { path, .. }) => assert!(path.ends_with("pages.bin"), "{path:?}"),
        other => panic!("expected NoSpace, got {other:?}"),
    }
    sparse.expect("a sparse device file fits");
}

/// Under a read budget of one request, many reads issued at once all come
/// back right (each completion starts the next, in order); raising the
/// budget while reads wait starts them; writes are not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_under_a_read_budget_all_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = std::sync::Arc::new(open(BackendKind::File, dir.path()));
    let ppb = dev.geometry().pages_per_block;
    let mut data = Vec::new();
    for p in 0..ppb {
        let d = page_data(&dev, p as u8);
        dev.program_page(B.page(p), d.clone(), Bytes::new())
            .await
            .expect("program");
        data.push(d);
    }
    for budget in [1usize, 3 * 66 * 1024, usize::MAX] {
        dev.set_read_budget_bytes(budget);
        let mut reads = tokio::task::JoinSet::new();
        for round in 0..4u32 {
            for p in 0..ppb {
                let dev = std::sync::Arc::clone(&dev);
                let count = 1 + (p + round) % 2;
                let count = count.min(ppb - p);
                reads.spawn(async move { (p, dev.read_pages(B.page(p), count).await) });
            }
        }
        if budget == 1 {
            // Lift the budget while reads wait behind it: they start.
            dev.set_read_budget_bytes(2);
        }
        // A read left waiting behind the budget would hang here: fail.
        let deadline = std::time::Duration::from_secs(60);
        while let Some(done) = tokio::time::timeout(deadline, reads.join_next())
            .await
            .expect("reads waiting behind the budget were never started")
        {
            let (p, pages) = done.expect("reader");
            for (i, page) in pages.expect("read").into_iter().enumerate() {
                let page = page.expect("page");
                assert_eq!(
                    page.data,
                    data[p as usize + i],
                    "page {} at budget {budget}",
                    p as usize + i
                );
            }
        }
    }
    // A write is never held behind the read budget.
    dev.set_read_budget_bytes(1);
    let block = BlockAddr {
        block: B.block + 1,
        ..B
    };
    dev.program_page(block.page(0), page_data(&dev, 9), Bytes::new())
        .await
        .expect("program under a read budget");
    dev.close().await.expect("close");
}

/// A stream reader (the `file` backend's own ring for one thread) answers
/// runs in the order they were issued, at any depth, what `read_pages`
/// answers: a damaged page fails alone, a run with a page not programmed
/// is left to `fetch_pages`, more than its bound of reads is refused, and
/// dropping it with reads at the disk waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reader_answers_runs_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(BackendKind::File, dir.path());
    assert!(open(BackendKind::Mem, dir.path())
        .stream_reader(1)
        .is_none());
    let ppb = dev.geometry().pages_per_block;
    let blocks: Vec<BlockAddr> = (0..3).map(|block| BlockAddr { block, ..B }).collect();
    let mut data = HashMap::new();
    for b in &blocks {
        for p in 0..ppb {
            let d = page_data(&dev, (b.block * ppb + p) as u8);
            dev.program_page(b.page(p), d.clone(), Bytes::from(vec![p as u8; 4]))
                .await
                .expect("program");
            data.insert(b.page(p), d);
        }
    }
    let off = dev.page_offset_bytes(blocks[1].page(2)).expect("offset");
    flip_bytes(&dev, off + 100, 400);
    let runs: Vec<(PageAddr, u32)> = blocks
        .iter()
        .flat_map(|b| [(b.page(0), 3), (b.page(3), ppb - 3)])
        .collect();
    for depth in [1, 2, 4] {
        let mut reader = dev.stream_reader(depth).expect("file backend");
        for &(first, count) in &runs {
            assert!(reader.issue(first, count).expect("issue"));
        }
        assert_eq!(reader.len(), runs.len());
        for &(first, count) in &runs {
            let pages = reader.take_next().expect("read").check();
            assert_eq!(pages.len(), count as usize);
            for (i, page) in pages.into_iter().enumerate() {
                let addr = first.block_addr().page(first.page + i as u32);
                match page {
                    Ok(r) => assert_eq!(r.data, data[&addr], "{addr} at depth {depth}"),
                    Err(DeviceError::Uncorrectable { addr: bad, .. }) => {
                        assert_eq!((bad, addr), (blocks[1].page(2), blocks[1].page(2)))
                    }
                    Err(e) => panic!("{addr}: {e}"),
                }
            }
        }
        assert!(reader.is_empty());
        assert!(reader.take_next().is_err(), "nothing issued");
    }
    // A block not programmed: not read in one request.
    let blank = BlockAddr { block: 3, ..B };
    let mut reader = dev.stream_reader(2).expect("file backend");
    assert!(!reader.issue(blank.page(0), 2).expect("issue"));
    assert!(matches!(
        reader.issue(blocks[0].page(0), dev.max_read_pages() + 1),
        Err(DeviceError::AddressOutOfRange { .. })
    ));
    for _ in 0..quarry_device::MAX_STREAM_READS {
        assert!(reader.issue(blocks[0].page(0), 2).expect("issue"));
    }
    assert!(matches!(
        reader.issue(blocks[0].page(0), 2),
        Err(DeviceError::QueueFull { .. })
    ));
    // Dropped with reads at the disk and waiting: they finish first, and
    // the blocks they held can be erased after.
    drop(reader);
    dev.erase_block(blocks[0])
        .await
        .expect("erase after the reads");
    dev.close().await.expect("close");
}

/// `program_pages` lands what `program_page` would, page by page: each page
/// reads back with its data and OOB (in one request and one by one), the
/// block's write pointer moves past the run and survives a reopen; a run
/// that is empty, too long, crosses the block's end, starts anywhere but the
/// write pointer, or has a page of the wrong size is refused and changes
/// nothing.
async fn multi_page_programs(backend: BackendKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(backend, dir.path());
    let ppb = dev.geometry().pages_per_block;
    let max = dev.max_program_pages();
    assert!(max >= 4 && max <= ppb, "max {max}");
    let block = BlockAddr {
        bus: 0,
        chip: 1,
        block: 1,
    };
    let run = |seed: u8, n: u32| -> Vec<(Bytes, Bytes)> {
        (0..n)
            .map(|k| {
                let tag = seed.wrapping_add(k as u8);
                (page_data(&dev, tag), Bytes::from(vec![tag; 7]))
            })
            .collect()
    };
    let out_of_range = |r: Result<(), DeviceError>| {
        assert!(
            matches!(r, Err(DeviceError::AddressOutOfRange { .. })),
            "{r:?}"
        )
    };
    out_of_range(dev.program_pages(block.page(0), &[]).await);
    out_of_range(dev.program_pages(block.page(0), &run(1, max + 1)).await);
    out_of_range(dev.program_pages(block.page(ppb - 2), &run(1, 3)).await);
    match dev.program_pages(block.page(1), &run(1, 2)).await {
        Err(DeviceError::OutOfOrder { expected: 0, .. }) => {}
        other => panic!("a run past the write pointer: {other:?}"),
    }
    let mut short = run(1, 2);
    short[1].0 = short[1].0.slice(1..);
    assert!(matches!(
        dev.program_pages(block.page(0), &short).await,
        Err(DeviceError::PageSize { .. })
    ));
    assert_eq!(
        dev.write_pointer(block).expect("wp"),
        0,
        "refusals change nothing"
    );

    dev.program_pages(block.page(0), &run(10, 3))
        .await
        .expect("a run of three");
    assert_eq!(dev.write_pointer(block).expect("wp"), 3);
    assert!(matches!(
        dev.program_pages(block.page(2), &run(1, 1)).await,
        Err(DeviceError::AlreadyProgrammed { .. })
    ));
    dev.program_page(block.page(3), page_data(&dev, 13), Bytes::from(vec![13; 7]))
        .await
        .expect("a single page follows a run");
    let rest = ppb - 4;
    assert!(rest <= max);
    dev.program_pages(block.page(4), &run(14, rest))
        .await
        .expect("a run to the block's end");
    let expect = |dev: &Device, p: u32| (page_data(dev, 10 + p as u8), vec![10 + p as u8; 7]);
    for p in 0..ppb {
        let r = dev.read_page(block.page(p)).await.expect("read");
        let (data, oob) = expect(&dev, p);
        assert_eq!(r.data, data, "page {p}");
        assert_eq!(&r.oob[..7], &oob[..], "page {p}");
    }
    let together = dev
        .read_pages(block.page(0), ppb)
        .await
        .expect("read_pages");
    for (p, r) in together.into_iter().enumerate() {
        assert_eq!(r.expect("page").data, expect(&dev, p as u32).0, "page {p}");
    }
    dev.close().await.expect("close");
    if backend == BackendKind::Mem {
        return;
    }
    let dev = open(backend, dir.path());
    assert_eq!(dev.write_pointer(block).expect("wp"), ppb);
    for p in 0..ppb {
        let r = dev.read_page(block.page(p)).await.expect("read");
        assert_eq!(r.data, expect(&dev, p).0, "page {p} after a reopen");
    }
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_page_programs_file() {
    multi_page_programs(BackendKind::File).await;
}

#[tokio::test]
async fn multi_page_programs_mem() {
    multi_page_programs(BackendKind::Mem).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_page_programs_nand() {
    multi_page_programs(BackendKind::Nand).await;
}

/// With `sync_writes` (the `file` default), a small program writes zeros
/// over the 32 pages after it, so the next programs of the block overwrite
/// written file blocks (whose flush is a cache flush, not a journal
/// commit); a program of the next page accepted while the fill runs waits
/// for it and is not overwritten by it. Without `sync_writes` nothing is
/// filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocks_first_program_fills_the_block_and_a_concurrent_program_survives_it() {
    for sync in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig {
            sync_writes: Some(sync),
            ..cfg(BackendKind::File)
        };
        let dev = Device::open(&config, dir.path()).unwrap();
        let path = dir.path().join("pages.bin");
        let before = allocated_bytes(&path);
        let block = BlockAddr {
            bus: 0,
            chip: 1,
            block: 2,
        };
        let (d0, d1) = (page_data(&dev, 1), page_data(&dev, 2));
        let (first, second) = tokio::join!(
            dev.program_page(block.page(0), d0.clone(), Bytes::new()),
            dev.program_page(block.page(1), d1.clone(), Bytes::new()),
        );
        first.unwrap();
        second.unwrap();
        assert_eq!(dev.read_page(block.page(0)).await.unwrap().data, d0);
        assert_eq!(dev.read_page(block.page(1)).await.unwrap().data, d1);
        let grown = allocated_bytes(&path) - before;
        let ppb = u64::from(dev.geometry().pages_per_block);
        let block_bytes = ppb.min(33) * dev.slot_size_bytes();
        if sync {
            assert!(grown >= block_bytes, "filled: {grown} of {block_bytes}");
            assert!(dev.flushes() >= 1);
        } else {
            assert!(
                grown < block_bytes / 2,
                "not filled: {grown} of {block_bytes}"
            );
            assert_eq!(dev.flushes(), 0);
        }
        // An erase gives the room back and the next first program fills
        // the block again.
        dev.erase_block(block).await.unwrap();
        dev.program_page(block.page(0), d1.clone(), Bytes::new())
            .await
            .unwrap();
        assert_eq!(dev.read_page(block.page(0)).await.unwrap().data, d1);
        assert!(dev.read_page(block.page(1)).await.unwrap().erased);
        dev.close().await.unwrap();
    }
}

/// `flush_interval_ms` (Redis's `everysec` contract for a device that
/// acknowledges from the page cache): the file is flushed on that rhythm,
/// and without it, never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsynced_device_flushes_every_interval_and_only_with_one() {
    for interval in [Some(20), None] {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig {
            sync_writes: Some(false),
            flush_interval_ms: interval,
            ..cfg(BackendKind::File)
        };
        let dev = Device::open(&config, dir.path()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        match interval {
            Some(_) => assert!(dev.flushes() >= 3, "{} flushes in 300 ms", dev.flushes()),
            None => assert_eq!(dev.flushes(), 0),
        }
        dev.close().await.unwrap();
    }
}

/// `Device::sync` (what the volume calls before a checkpoint, a trim or an
/// erase): one `fdatasync` on a device that acknowledges from the page
/// cache; none under `sync_writes`, whose programs complete only once
/// flushed, nor on the `mem` backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_flushes_only_a_device_that_acknowledges_unflushed() {
    for (backend, sync_writes, flushes_a_sync) in [
        (BackendKind::File, false, 1),
        (BackendKind::File, true, 0),
        (BackendKind::Mem, false, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig {
            sync_writes: Some(sync_writes),
            flush_interval_ms: None,
            ..cfg(backend)
        };
        let dev = Device::open(&config, dir.path()).unwrap();
        let p = BlockAddr {
            bus: 0,
            chip: 0,
            block: 1,
        }
        .page(0);
        let data = page_data(&dev, 3);
        dev.program_page(p, data.clone(), Bytes::new())
            .await
            .unwrap();
        let before = dev.flushes();
        dev.sync().await.unwrap();
        dev.sync().await.unwrap();
        assert_eq!(
            dev.flushes() - before,
            2 * flushes_a_sync,
            "{backend:?}, sync_writes {sync_writes}"
        );
        assert_eq!(dev.read_page(p).await.unwrap().data, data);
        dev.close().await.unwrap();
    }
}

/// `Device::close_sectors` (garbage collection's, before it copies a
/// page): the page keeps what it holds and takes no more sectors; a page
/// that is not open is left as it is.
#[tokio::test]
async fn a_closed_page_keeps_its_sectors_and_takes_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let dev = open(BackendKind::File, dir.path());
    let s = dev.sector_size_bytes();
    let full = page_data(&dev, 5);
    let p = B.page(0);
    dev.close_sectors(p).await.unwrap();
    dev.program_sectors(p, 0, full.slice(..s), Bytes::new())
        .await
        .unwrap();
    dev.close_sectors(p).await.unwrap();
    dev.close_sectors(p).await.unwrap();
    let e = dev
        .program_sectors(p, 1, full.slice(s..2 * s), Bytes::new())
        .await
        .unwrap_err();
    assert!(matches!(e, DeviceError::PageNotOpen { .. }), "{e}");
    assert_sectors(&dev, p, &full, 1).await;
    dev.close().await.unwrap();
}

/// Page `p` as read, checked against `want` for its first `sectors`
/// sectors and erased (0xFF) after them.
async fn assert_sectors(dev: &Device, p: PageAddr, want: &Bytes, sectors: usize) {
    let s = dev.sector_size_bytes();
    let r = dev
        .read_page(p)
        .await
        .expect("a page programmed in pieces reads");
    assert!(!r.erased);
    assert_eq!(
        &r.data[..sectors * s],
        &want[..sectors * s],
        "programmed sectors"
    );
    assert!(
        r.data[sectors * s..].iter().all(|&b| b == 0xFF),
        "sectors after {sectors} read as erased"
    );
}

async fn pieces(backend: BackendKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(backend, dir.path());
    let s = dev.sector_size_bytes();
    assert_eq!(s, 1024);
    let full = page_data(&dev, 7);
    dev.erase_block(B).await.expect("erase");
    let p = B.page(0);
    dev.program_sectors(p, 0, full.slice(..s), Bytes::from_static(b"log"))
        .await
        .expect("first sector");
    assert_sectors(&dev, p, &full, 1).await;
    assert_eq!(&dev.read_page(p).await.expect("read").oob[..3], b"log");
    dev.program_sectors(p, 1, full.slice(s..3 * s), Bytes::new())
        .await
        .expect("two more");
    assert_sectors(&dev, p, &full, 3).await;
    dev.program_sectors(p, 3, full.slice(3 * s..), Bytes::new())
        .await
        .expect("the last");
    assert_sectors(&dev, p, &full, 4).await;
    match dev
        .program_sectors(p, 3, full.slice(3 * s..), Bytes::new())
        .await
    {
        Err(DeviceError::PageNotOpen { .. }) => {}
        other => panic!("a full page takes no more sectors: {other:?}"),
    }
    // The next page, whole, and one more in pieces: a multi-page read
    // takes both kinds.
    let next = page_data(&dev, 8);
    dev.program_page(B.page(1), next.clone(), Bytes::new())
        .await
        .expect("whole page");
    dev.program_sectors(B.page(2), 0, next.slice(..2 * s), Bytes::new())
        .await
        .expect("pieces again");
    let run = dev.read_pages(B.page(0), 3).await.expect("read run");
    let run: Vec<_> = run
        .into_iter()
        .map(|r| r.expect("each page of the run").data)
        .collect();
    assert_eq!(run[0], full);
    assert_eq!(run[1], next);
    assert_eq!(&run[2][..2 * s], &next[..2 * s]);
    assert!(run[2][2 * s..].iter().all(|&b| b == 0xFF));
    dev.close().await.expect("close");
}

#[tokio::test]
async fn a_page_programmed_in_pieces_reads_back_at_each_step_mem() {
    pieces(BackendKind::Mem).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_programmed_in_pieces_reads_back_at_each_step_file() {
    pieces(BackendKind::File).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_programmed_in_pieces_reads_back_at_each_step_nand() {
    pieces(BackendKind::Nand).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_program_out_of_turn_is_refused_and_keeps_what_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = open(BackendKind::File, dir.path());
    let s = dev.sector_size_bytes();
    let d = page_data(&dev, 3);
    dev.erase_block(B).await.expect("erase");
    let p = B.page(0);
    dev.program_sectors(p, 0, d.slice(..s), Bytes::new())
        .await
        .expect("first sector");
    let refusal = |r: Result<(), DeviceError>| match r {
        Err(e) => e,
        Ok(()) => panic!("accepted"),
    };
    let e = refusal(dev.program_sectors(p, 2, d.slice(..s), Bytes::new()).await);
    assert!(
        matches!(e, DeviceError::PageNotOpen { .. }) && e.to_string().contains("takes sector 1"),
        "{e}"
    );
    let e = refusal(
        dev.program_sectors(p, 1, d.slice(..s), Bytes::from_static(b"x"))
            .await,
    );
    assert!(e.to_string().contains("OOB"), "{e}");
    let e = refusal(
        dev.program_sectors(p, 1, d.slice(..100), Bytes::new())
            .await,
    );
    assert!(
        matches!(e, DeviceError::SectorRange { bytes: 100, .. }),
        "{e}"
    );
    let e = refusal(
        dev.program_sectors(p, 3, d.slice(..2 * s), Bytes::new())
            .await,
    );
    assert!(matches!(e, DeviceError::SectorRange { .. }), "{e}");
    let e = refusal(dev.program_sectors(p, 0, d.slice(..s), Bytes::new()).await);
    assert!(matches!(e, DeviceError::AlreadyProgrammed { .. }), "{e}");
    let e = refusal(
        dev.program_sectors(B.page(2), 0, d.slice(..s), Bytes::new())
            .await,
    );
    assert!(
        matches!(e, DeviceError::OutOfOrder { expected: 1, .. }),
        "{e}"
    );
    let e = refusal(
        dev.program_sectors(B.page(1), 1, d.slice(..s), Bytes::new())
            .await,
    );
    assert!(matches!(e, DeviceError::PageNotOpen { .. }), "{e}");
    assert_sectors(&dev, p, &d, 1).await;
    // A later page programmed closes it.
    dev.program_page(B.page(1), d.clone(), Bytes::new())
        .await
        .expect("next page");
    let e = refusal(dev.program_sectors(p, 1, d.slice(..s), Bytes::new()).await);
    assert!(matches!(e, DeviceError::PageNotOpen { .. }), "{e}");
    assert_sectors(&dev, p, &d, 1).await;
    // So does an erase.
    dev.program_sectors(B.page(2), 0, d.slice(..s), Bytes::new())
        .await
        .expect("pieces");
    dev.erase_block(B).await.expect("erase");
    let e = refusal(
        dev.program_sectors(B.page(2), 1, d.slice(..s), Bytes::new())
            .await,
    );
    assert!(matches!(e, DeviceError::PageNotOpen { .. }), "{e}");
    assert_eq!(dev.write_pointer(B).expect("wp"), 0);
    assert!(dev.read_page(p).await.expect("read").erased);
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_closes_an_open_page_and_keeps_its_sectors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s;
    let d;
    {
        let dev = open(BackendKind::File, dir.path());
        s = dev.sector_size_bytes();
        d = page_data(&dev, 9);
        dev.erase_block(B).await.expect("erase");
        dev.program_sectors(B.page(0), 0, d.slice(..2 * s), Bytes::from_static(b"hd"))
            .await
            .expect("two sectors");
        // Unclean stop.
        drop(dev);
    }
    let dev = open(BackendKind::File, dir.path());
    assert_eq!(
        dev.write_pointer(B).expect("wp"),
        1,
        "the page counts as programmed"
    );
    assert_sectors(&dev, B.page(0), &d, 2).await;
    assert_eq!(
        &dev.read_page(B.page(0)).await.expect("read").oob[..2],
        b"hd"
    );
    match dev
        .program_sectors(B.page(0), 2, d.slice(2 * s..3 * s), Bytes::new())
        .await
    {
        Err(DeviceError::PageNotOpen { .. }) => {}
        other => panic!("a reopened device's pages take no more sectors: {other:?}"),
    }
    dev.program_page(B.page(1), d.clone(), Bytes::new())
        .await
        .expect("the next page");
    dev.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_in_a_page_programmed_in_pieces_is_corrected_or_reported() {
    for ecc in [EccMode::Rs, EccMode::Crc] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = DeviceConfig {
            ecc,
            ..cfg(BackendKind::File)
        };
        let dev = Device::open_with(&config, dir.path(), OpenOptions::default()).expect("open");
        let s = dev.sector_size_bytes();
        let d = page_data(&dev, 11);
        dev.erase_block(B).await.expect("erase");
        let p = B.page(0);
        dev.program_sectors(p, 0, d.slice(..2 * s), Bytes::new())
            .await
            .expect("two sectors");
        let off = dev.page_offset_bytes(p).expect("offset");
        // A few bad bytes in a sector never programmed: still erased.
        flip_bytes(&dev, off + 3 * s as u64 + 10, 3);
        assert_sectors(&dev, p, &d, 2).await;
        // In a programmed sector: corrected with parity, reported without.
        flip_bytes(&dev, off + s as u64 + 5, 3);
        match (ecc, dev.read_page(p).await) {
            (EccMode::Rs, Ok(r)) => {
                assert_eq!(&r.data[..2 * s], &d[..2 * s]);
                assert_eq!(r.corrected_bytes, 3);
            }
            (EccMode::Crc, Err(DeviceError::Uncorrectable { .. })) => {}
            (_, other) => panic!("{ecc:?}: {other:?}"),
        }
        // Read in pieces, the damage is named instead (without parity).
        let (r, damaged) = dev.read_page_pieces(p).await.expect("read in pieces");
        assert_eq!(&r.data[..s], &d[..s]);
        match ecc {
            EccMode::Rs => assert!(damaged.is_empty(), "corrected: {damaged:?}"),
            EccMode::Crc => assert_eq!(damaged, vec![1]),
        }
        flip_bytes(&dev, off + s as u64 + 5, 3);
        // A torn program of sector 2: its data landed, its codes did not.
        let path = dev.backing_path().expect("path").to_path_buf();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        file.write_all_at(&d[2 * s..3 * s], off + 2 * s as u64)
            .expect("write");
        match dev.read_page(p).await {
            Err(DeviceError::Uncorrectable { detail, .. }) => {
                assert!(detail.contains("sector 2"), "{detail}")
            }
            other => panic!("{ecc:?}: a torn sector is damage, not data: {other:?}"),
        }
        // Read in pieces: the sectors before it, and its name.
        let (r, damaged) = dev.read_page_pieces(p).await.expect("read in pieces");
        assert_eq!(damaged, vec![2], "{ecc:?}");
        assert_eq!(&r.data[..2 * s], &d[..2 * s]);
        assert!(r.data[3 * s..].iter().all(|&b| b == 0xFF));
        // A page programmed whole reads in pieces as it reads: damage fails it.
        dev.program_page(B.page(1), d.clone(), Bytes::new())
            .await
            .expect("whole page");
        let (r, damaged) = dev.read_page_pieces(B.page(1)).await.expect("a whole page");
        assert_eq!((r.data, damaged), (d.clone(), Vec::new()));
        let off1 = dev.page_offset_bytes(B.page(1)).expect("offset");
        flip_bytes(&dev, off1 + 100, 200);
        assert!(matches!(
            dev.read_page_pieces(B.page(1)).await,
            Err(DeviceError::Uncorrectable { .. })
        ));
        dev.close().await.expect("close");
    }
}
