//! A write load for the crash test (`tests/crash.rs`): opens a file-backed
//! device and a space manager in DIR, then writes and trims a deterministic
//! stream of pages from four tasks forever, printing each operation to stdout
//! before it starts (`B`) and once it is acknowledged (`A`):
//!
//! ```text
//! READY
//! B W <index> <version>     a write of page (1, index) with that version's content
//! A W <index> <version>
//! B T <index> <version>     a trim of page (1, index)
//! A T <index> <version>
//! ```
//!
//! Usage: `volume-crash-writer DIR ROUND direct|buffered|unsynced` (the
//! backing file opened with O_DIRECT or through the page cache; `unsynced`
//! is O_DIRECT without the flush before an acknowledgement, to show that
//! the power-loss test catches its absence: it only writes, and takes no
//! checkpoint, since the volume syncs the device before a trim and a
//! checkpoint). The test kills it with SIGKILL.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use common::{content, Rng};
use quarry_device::{BackendKind, Device, DeviceConfig};
use quarry_volume::{LogicalPage, SpaceManager, VolumeConfig};

/// Logical pages the load touches (space 1, indices below this).
const PAGES: u64 = 400;
const TASKS: u64 = 4;
/// Ends by itself after this many operations per task if nobody kills it.
const MAX_OPS_PER_TASK: u64 = 200_000;

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes()).expect("stdout");
    out.write_all(b"\n").expect("stdout");
    out.flush().expect("stdout");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 || !["direct", "buffered", "unsynced"].contains(&args[3].as_str()) {
        eprintln!("usage: volume-crash-writer DIR ROUND direct|buffered|unsynced");
        std::process::exit(2);
    }
    let dir = PathBuf::from(&args[1]);
    let round: u64 = args[2].parse().expect("ROUND is a number");
    let device_config = DeviceConfig {
        direct_io: Some(args[3] != "buffered"),
        sync_writes: Some(args[3] != "unsynced"),
        ..common::device_config(BackendKind::File, common::crash_geometry())
    };
    let device = Arc::new(Device::open(&device_config, &dir).expect("open device"));
    let unsynced = args[3] == "unsynced";
    let config = VolumeConfig {
        checkpoint_interval_pages: if unsynced { 0 } else { 200 },
        ..VolumeConfig::default()
    };
    let volume = Arc::new(
        SpaceManager::open(device, config, &dir)
            .await
            .expect("open space manager"),
    );
    say("READY".into());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let volume = Arc::clone(&volume);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(round * 1000 + t);
            for n in 0..MAX_OPS_PER_TASK {
                let index = rng.below(PAGES / TASKS) * TASKS + t;
                let id = LogicalPage::new(1, index);
                let version = (round << 32) | (t << 24) | n;
                if unsynced || rng.below(100) < 85 {
                    say(format!("B W {index} {version}"));
                    volume
                        .write(id, content(id, version, volume.page_size()))
                        .await
                        .expect("write");
                    say(format!("A W {index} {version}"));
                } else {
                    say(format!("B T {index} {version}"));
                    volume.trim(id).await.expect("trim");
                    say(format!("A T {index} {version}"));
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
    volume.close().await.expect("close");
}
