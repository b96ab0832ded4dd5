//! The kill -9 and power-loss tests: a process writing and trimming pages
//! through a file-backed space manager is killed with SIGKILL at random
//! points, 20 times. After each kill the test reopens the device and the
//! manager and checks every page: it holds its newest acknowledged state, or
//! the state of the one operation on it that had started and not been
//! acknowledged; its content is an intact version (nothing half-written is
//! visible).
//!
//! A kill alone loses nothing the process wrote (the host's page cache
//! outlives it), so the power-loss test runs the writer with O_DIRECT on a
//! crashfs mount and, after each kill, drops everything the process did not
//! sync (every other round: a seeded random half of it, page by page, as
//! writeback in any order would leave it).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use quarry_crashfs::{CrashFs, PowerLoss};
use quarry_device::BackendKind;
use quarry_testkit::run_then_kill;
use quarry_volume::{LogicalPage, VolumeConfig};

const PAGES: u64 = 400;
const ROUNDS: u64 = 20;

/// A page's state: a version, or nothing (trimmed or never written).
type PageState = Option<u64>;

/// Parses one complete output line: (begun?, index, resulting state).
fn parse(line: &str) -> Option<(bool, u64, PageState)> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() != 4 {
        return None;
    }
    let begun = match f[0] {
        "B" => true,
        "A" => false,
        _ => return None,
    };
    let index: u64 = f[2].parse().ok()?;
    let version: u64 = f[3].parse().ok()?;
    let state = match f[1] {
        "W" => Some(version),
        "T" => None,
        _ => return None,
    };
    Some((begun, index, state))
}

#[test]
fn kill_9_in_the_middle_of_a_write_load_20_times() {
    let dir = tempfile::tempdir().unwrap();
    kill_rounds(dir.path(), None);
}

#[test]
fn power_loss_in_the_middle_of_a_write_load_20_times() {
    if !quarry_testkit::require_fuse() {
        return;
    }
    let fs = CrashFs::mount_temporary().expect("mount crashfs");
    kill_rounds(fs.mountpoint(), Some(&fs));
    fs.unmount().expect("unmount crashfs");
}

/// The harness has teeth: a device that acknowledges programs without
/// flushing them (`sync_writes = false`, as every program was before the
/// flush was added) loses acknowledged pages at the first power loss.
#[test]
fn the_power_loss_test_catches_a_device_that_does_not_flush() {
    if !quarry_testkit::require_fuse() {
        return;
    }
    let fs = CrashFs::mount_temporary().expect("mount crashfs");
    let dir = fs.mountpoint();
    let lines = run_then_kill(
        Command::new(env!("CARGO_BIN_EXE_volume-crash-writer"))
            .arg(dir)
            .arg("0")
            .arg("unsynced"),
        true,
        300,
        Duration::ZERO,
        "unsynced writer",
    );
    let report = fs.power_loss(PowerLoss::DropAll).expect("power loss");
    assert!(report.pages_dropped > 0, "{report:?}");
    let mut acked: HashMap<u64, PageState> = HashMap::new();
    for (begun, index, state) in lines.iter().filter_map(|l| parse(l)) {
        if !begun {
            acked.insert(index, state);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let missing = runtime.block_on(async {
        let (m, _) = open(BackendKind::File, crash_geometry(), dir, quiet()).await;
        let mut missing = m.stats().pages_lost_at_open;
        for (&index, &state) in &acked {
            let id = LogicalPage::new(1, index);
            let got = m.read(id).await.ok().flatten().map(|d| version_of(id, &d));
            missing += u64::from(got != state);
        }
        m.close().await.unwrap();
        missing
    });
    assert!(
        missing > 0,
        "{} acknowledged operations, none lost: the harness would not catch a missing flush",
        acked.len()
    );
    drop(fs);
}

/// Runs the writer and kills it `ROUNDS` times in `dir`; with `power`, each
/// kill is followed by a power loss and the writer uses O_DIRECT.
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn kill_rounds(dir: &Path, power: Option<&CrashFs>) {
    let exe = env!("CARGO_BIN_EXE_volume-crash-writer");
    let mode = if power.is_some() {
        "direct"
    } else {
        "buffered"
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut model: HashMap<u64, PageState> = HashMap::new();
    // QUARRY_CRASH_SEED picks other kill points (the writer's stream is fixed).
    let seed = std::env::var("QUARRY_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xC2A5);
    let mut rng = Rng(seed);
    let mut erase_count_max = 0;
    let (mut acked_total, mut in_flight_seen, mut newer_seen) = (0u64, 0u64, 0u64);
    let mut lost_pages = 0u64;
    let started = Instant::now();
    for round in 0..ROUNDS {
        // Every fifth round is killed early, maybe while still recovering.
        let early = round % 5 == 4;
        let acks = if early { 0 } else { 50 + rng.below(1200) };
        let then = Duration::from_millis(if early { rng.below(40) } else { rng.below(15) });
        let lines = run_then_kill(
            Command::new(exe).arg(dir).arg(round.to_string()).arg(mode),
            !early,
            acks,
            then,
            &format!("round {round}"),
        );
        if let Some(fs) = power {
            let report = fs
                .power_loss(PowerLoss::alternating(round))
                .expect("power loss");
            lost_pages += report.pages_dropped;
        }

        // What the writer was told, and what was still in flight.
        let mut pending: HashMap<u64, PageState> = HashMap::new();
        for line in &lines {
            let Some((begun, index, state)) = parse(line) else {
                continue;
            };
            if begun {
                assert!(
                    pending.insert(index, state).is_none(),
                    "two operations in flight on {index}"
                );
            } else {
                assert_eq!(pending.remove(&index), Some(state), "ack without begin");
                model.insert(index, state);
                acked_total += 1;
            }
        }

        // Recover and check every page.
        runtime.block_on(async {
            let config = VolumeConfig {
                background: false,
                ..VolumeConfig::default()
            };
            let (m, weak) = open(BackendKind::File, crash_geometry(), dir, config).await;
            let s = m.stats();
            assert_eq!(s.pages_lost_at_open, 0, "round {round}: {s:?}");
            erase_count_max = s.erase_count_max;
            m.verify().expect("invariants after recovery");
            for index in 0..PAGES {
                let id = LogicalPage::new(1, index);
                let got = m
                    .read(id)
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: read {id}: {e}"))
                    .map(|data| version_of(id, &data));
                let acked = model.get(&index).copied().flatten();
                let in_flight = pending.get(&index).copied();
                if got == acked {
                    continue;
                }
                assert_eq!(
                    Some(got),
                    in_flight,
                    "round {round}: page {index} reads {got:?}; acknowledged {acked:?}, in \
                     flight {in_flight:?}"
                );
                in_flight_seen += 1;
                if got.is_some() {
                    newer_seen += 1;
                }
                model.insert(index, got);
            }
            if round % 2 == 0 {
                m.close().await.unwrap();
            } else {
                crash(m, weak).await;
            }
        });
    }
    eprintln!(
        "{ROUNDS} kills ({mode}), {acked_total} acknowledged operations checked, \
         {in_flight_seen} unacknowledged operations found applied ({newer_seen} writes), most \
         erases of a block {erase_count_max}, {lost_pages} unsynced 4 KiB pages lost at power \
         losses, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(acked_total > 1000);
    assert!(
        erase_count_max >= 2,
        "garbage collection never ran during the load"
    );
}

/// A device without `sync_writes` acknowledges programs from the page
/// cache. A checkpoint must still name only pages on the medium: recovery
/// reads no OOB record of the pages it covers, and the older versions it
/// replaced are no longer named, so a page the power took would be lost
/// with every version of it (the volume syncs the device before saving
/// one; before, this test read every page as lost).
#[test]
fn a_checkpoint_on_a_device_without_synced_writes_names_only_pages_on_the_medium() {
    if !quarry_testkit::require_fuse() {
        return;
    }
    let fs = CrashFs::mount_temporary().expect("mount crashfs");
    let dir = fs.mountpoint();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = quarry_device::DeviceConfig {
        sync_writes: Some(false),
        flush_interval_ms: None,
        ..device_config(BackendKind::File, crash_geometry())
    };
    let ids: Vec<LogicalPage> = (0..40).map(|i| LogicalPage::new(1, i)).collect();
    runtime.block_on(async {
        let device = std::sync::Arc::new(quarry_device::Device::open(&config, dir).unwrap());
        let weak = std::sync::Arc::downgrade(&device);
        let m = quarry_volume::SpaceManager::open(device, quiet(), dir)
            .await
            .unwrap();
        for version in 1..=2 {
            for &id in &ids {
                m.write(id, content(id, version, m.page_size()))
                    .await
                    .unwrap();
            }
            m.checkpoint().await.unwrap();
        }
        crash(m, weak).await;
    });
    fs.power_loss(PowerLoss::DropAll).expect("power loss");
    runtime.block_on(async {
        let device = std::sync::Arc::new(quarry_device::Device::open(&config, dir).unwrap());
        let m = quarry_volume::SpaceManager::open(device, quiet(), dir)
            .await
            .unwrap();
        for &id in &ids {
            let page = m.read(id).await.unwrap_or_else(|e| panic!("{id}: {e}"));
            let page = page.unwrap_or_else(|| panic!("{id} is not mapped"));
            assert_eq!(version_of(id, &page), 2, "{id}");
        }
        m.close().await.unwrap();
    });
    drop(fs);
}
