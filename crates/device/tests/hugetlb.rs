//! Multi-page reads land in the machine's reserved huge pages when some are
//! free, and in transparent huge pages otherwise. Alone in its own test
//! binary: it reserves huge pages (`vm.nr_hugepages`, root) and counts the
//! free ones, which other tests' buffers would disturb. Without root, or
//! where no huge page can be reserved, the test fails saying so.

use std::path::Path;

use bytes::Bytes;
use quarry_device::{BackendKind, Device, DeviceConfig, EccMode, Geometry};

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

fn free_huge_pages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .expect("meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("HugePages_Free")
}

async fn read_a_run(dir: &Path) -> Device {
    let geometry = Geometry {
        buses: 1,
        chips_per_bus: 1,
        blocks_per_chip: 2,
        pages_per_block: 64,
        page_size_bytes: 64 << 10,
        oob_size_bytes: 64,
    };
    let config = DeviceConfig {
        backend: BackendKind::File,
        geometry: Some(geometry),
        ecc: EccMode::Crc,
        ..DeviceConfig::default()
    };
    let dev = Device::open(&config, dir).expect("open");
    let block = geometry.block_at(0);
    for p in 0..16 {
        let data = Bytes::from(vec![p as u8; 64 << 10]);
        dev.program_page(block.page(p), data, Bytes::new())
            .await
            .expect("program");
    }
    let pages = dev.read_pages(block.page(0), 16).await.expect("read");
    for (p, page) in pages.into_iter().enumerate() {
        let page = page.expect("page");
        assert!(page.data.iter().all(|&b| b == p as u8), "page {p}");
    }
    dev
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_buffers_take_reserved_huge_pages_when_free() {
    if !quarry_testkit::require_root("reserve huge pages in vm.nr_hugepages") {
        return;
    }
    let Some(before) = quarry_testkit::need(
        &format!("reservable huge pages ({NR_HUGEPAGES})"),
        "the kernel must have hugetlbfs (CONFIG_HUGETLBFS)",
        std::fs::read_to_string(NR_HUGEPAGES),
    ) else {
        return;
    };
    let before: u64 = before.trim().parse().expect("a number");
    let free_before = free_huge_pages();
    let reserved = std::fs::write(NR_HUGEPAGES, (before + 4).to_string())
        .map_err(|e| format!("writing {NR_HUGEPAGES}: {e}"))
        .and_then(|()| {
            // The kernel reserves what it can find contiguous memory for.
            if free_huge_pages() > free_before {
                Ok(())
            } else {
                Err(format!(
                    "{NR_HUGEPAGES} was raised to {} but no huge page was reserved (memory too fragmented?)",
                    before + 4
                ))
            }
        });
    if reserved.is_err() {
        let _ = std::fs::write(NR_HUGEPAGES, before.to_string());
    }
    if !quarry_testkit::require(
        "4 more reserved huge pages",
        "the test reserves them itself as root",
        reserved,
    ) {
        return;
    }
    let free = free_huge_pages();
    let dir = tempfile::tempdir().unwrap();
    let dev = read_a_run(dir.path()).await;
    let taken = free.saturating_sub(free_huge_pages());
    drop(dev);
    let _ = std::fs::write(NR_HUGEPAGES, before.to_string());
    assert!(
        taken >= 1,
        "{free} reserved huge pages were free, the read took none"
    );
    // None free: the same read works on transparent huge pages.
    if free_huge_pages() == 0 {
        let dir = tempfile::tempdir().unwrap();
        drop(read_a_run(dir.path()).await);
    }
}
