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
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use quarry_crashfs::{CrashFs, PowerLoss};
use quarry_device::BackendKind;
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
    let backing = tempfile::tempdir().unwrap();
    let mountpoint = tempfile::tempdir().unwrap();
    let fs = CrashFs::mount(backing.path(), mountpoint.path()).expect("mount crashfs");
    kill_rounds(mountpoint.path(), Some(&fs));
    fs.unmount().expect("unmount crashfs");
}

/// The power loss of round `round`: all unsynced state lost, or a seeded
/// half of it kept.
fn loss_of(round: u64) -> PowerLoss {
    if round % 2 == 0 {
        PowerLoss::DropAll
    } else {
        PowerLoss::KeepSome {
            seed: round,
            keep_per_mille: 500,
        }
    }
}

/// Runs the writer and kills it `ROUNDS` times in `dir`; with `power`, each
/// kill is followed by a power loss and the writer uses O_DIRECT.
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn kill_rounds(dir: &std::path::Path, power: Option<&CrashFs>) {
    let exe = env!("CARGO_BIN_EXE_volume-crash-writer");
    let direct = if power.is_some() { "direct" } else { "buffered" };
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
        let mut child = Command::new(exe)
            .arg(dir)
            .arg(round.to_string())
            .arg(direct)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn volume-crash-writer");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    // A line cut by the kill has no newline: dropped.
                    Ok(_) if line.ends_with('\n') => {
                        if tx.send(line.trim_end().to_string()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => return,
                }
            }
        });
        // Every fifth round is killed early, maybe while still recovering.
        let early = round % 5 == 4;
        let target = if early { 0 } else { 50 + rng.below(1200) };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut lines = Vec::new();
        let mut ready = early;
        let mut acks = 0;
        while (!ready || acks < target) && Instant::now() < deadline {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    ready |= line == "READY";
                    acks += u64::from(line.starts_with("A "));
                    lines.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("round {round}: the writer exited early: {:?}", child.wait())
                }
            }
        }
        assert!(ready && acks >= target, "round {round}: writer too slow");
        std::thread::sleep(Duration::from_millis(if early {
            rng.below(40)
        } else {
            rng.below(15)
        }));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        if let Some(fs) = power {
            let report = fs.power_loss(loss_of(round)).expect("power loss");
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
        "{ROUNDS} kills ({direct}), {acked_total} acknowledged operations checked, \
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
