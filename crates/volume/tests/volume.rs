//! Behaviour of the space manager on the `mem` and `file` backends: model
//! checks under random overwrites, garbage collection under pressure, wear
//! leveling, a full device, recovery after a crash, injected failures.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use quarry_device::{BackendKind, Geometry};
use quarry_volume::{
    FaultPlan, LogicalPage, SpaceManager, VictimPolicy, VolumeConfig, VolumeError,
};

/// What the model says a page holds: a version, or nothing (trimmed / never written).
type Model = HashMap<LogicalPage, Option<u64>>;

/// The error a manager's open fails with (quiet configuration).
async fn refused(backend: BackendKind, geometry: Geometry, dir: &std::path::Path) -> VolumeError {
    let device = open_device(backend, geometry, dir);
    SpaceManager::open(device, quiet(), dir)
        .await
        .err()
        .expect("the open is refused")
}

/// A quiet manager on a small `file` device, failing as `faults` says.
async fn faulty_file(
    dir: &std::path::Path,
    faults: &FaultPlan,
) -> (SpaceManager, std::sync::Weak<quarry_device::Device>) {
    open_faulty(BackendKind::File, small(), dir, quiet(), faults.clone()).await
}

async fn check_model(m: &SpaceManager, model: &Model) {
    for (&id, want) in model {
        let got = m
            .read(id)
            .await
            .unwrap_or_else(|e| panic!("read {id}: {e}"));
        match (want, got) {
            (None, None) => {}
            (Some(v), Some(data)) => assert_eq!(version_of(id, &data), *v, "page {id}"),
            (want, got) => panic!("page {id}: model {want:?}, read {:?}", got.map(|d| d.len())),
        }
    }
    m.verify().expect("invariants");
    let live = model.values().filter(|v| v.is_some()).count() as u64;
    assert_eq!(m.stats().live_pages, live);
}

/// Random writes (85%), trims (10%) and reads (5%) over `pages` logical pages
/// of two spaces, checked against a model; returns the model.
async fn random_ops(m: &SpaceManager, model: &mut Model, seed: u64, ops: u64, pages: u64) {
    let mut rng = Rng(seed);
    let size = m.page_size();
    for n in 0..ops {
        let id = LogicalPage::new((rng.below(2) + 1) as u32, rng.below(pages / 2));
        let roll = rng.below(100);
        if roll < 85 {
            let version = seed << 32 | n;
            m.write(id, content(id, version, size))
                .await
                .expect("write");
            model.insert(id, Some(version));
        } else if roll < 95 {
            m.trim(id).await.expect("trim");
            model.insert(id, None);
        } else {
            let got = m.read(id).await.expect("read");
            let want = model.get(&id).copied().flatten();
            assert_eq!(got.map(|d| version_of(id, &d)), want, "page {id}");
        }
    }
}

#[tokio::test]
async fn write_read_trim_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    let id = LogicalPage::new(3, 1 << 50);
    assert_eq!(m.read(id).await.unwrap(), None);
    m.write(id, content(id, 1, 512)).await.unwrap();
    m.write(id, content(id, 2, 512)).await.unwrap();
    assert_eq!(version_of(id, &m.read(id).await.unwrap().unwrap()), 2);
    let s = m.stats();
    assert_eq!(
        (s.live_pages, s.dead_pages, s.user_pages_written),
        (1, 1, 2)
    );
    assert_eq!(m.pages_in(3), vec![1 << 50]);
    match m.write(id, Bytes::from_static(b"short")).await {
        Err(VolumeError::PageSize {
            expected: 512,
            got: 5,
        }) => {}
        other => panic!("{other:?}"),
    }
    m.trim(id).await.unwrap();
    assert_eq!(m.read(id).await.unwrap(), None);
    assert_eq!(m.stats().live_pages, 0);
    m.verify().unwrap();
    m.close().await.unwrap();
    assert!(matches!(m.read(id).await, Err(VolumeError::Closed)));
    assert!(matches!(
        m.write(id, content(id, 3, 512)).await,
        Err(VolumeError::Closed)
    ));
}

#[tokio::test]
async fn pages_in_lists_one_space_in_index_order_without_trimmed_pages() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    let mut ids = Vec::new();
    for space in [0u32, 4, 5, u32::MAX] {
        for index in [u64::MAX, 9, 0, 3, 1 << 40] {
            ids.push(LogicalPage::new(space, index));
        }
    }
    for &id in &ids {
        m.write(id, content(id, 1, 512)).await.unwrap();
    }
    m.trim_many(vec![LogicalPage::new(4, 3), LogicalPage::new(5, 0)])
        .await
        .unwrap();
    assert_eq!(m.pages_in(4), vec![0, 9, 1 << 40, u64::MAX]);
    assert_eq!(m.pages_in(5), vec![3, 9, 1 << 40, u64::MAX]);
    assert_eq!(m.pages_in(u32::MAX), vec![0, 3, 9, 1 << 40, u64::MAX]);
    assert_eq!(m.pages_in(0).len(), 5);
    assert!(m.pages_in(1).is_empty());
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_geometry_with_too_small_an_oob_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let g = Geometry {
        oob_size_bytes: 16,
        ..small()
    };
    let err = refused(BackendKind::Mem, g, dir.path()).await;
    assert!(matches!(
        err,
        VolumeError::OobTooSmall { have: 16, need: 32 }
    ));
    assert!(err.to_string().contains("oob_size_bytes >= 32"), "{err}");
    // Too few blocks for the reserve and the open blocks.
    let g = Geometry {
        blocks_per_chip: 1,
        ..small()
    };
    let err = refused(BackendKind::Mem, g, dir.path()).await;
    assert!(err.to_string().contains("needs at least"), "{err}");
}

#[tokio::test]
async fn a_mem_device_starts_empty_even_with_an_old_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let id = LogicalPage::new(1, 1);
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    m.write(id, content(id, 1, 512)).await.unwrap();
    m.close().await.unwrap();
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    assert_eq!(m.read(id).await.unwrap(), None);
    assert_eq!(m.stats().pages_lost_at_open, 0);
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_second_manager_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    let err = refused(BackendKind::Mem, small(), dir.path()).await;
    assert!(matches!(err, VolumeError::Locked { .. }), "{err}");
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_overwrites_match_a_model_on_mem() {
    let dir = tempfile::tempdir().unwrap();
    // Background collection and checkpoints on, as in production.
    let config = VolumeConfig {
        checkpoint_interval_pages: 500,
        ..VolumeConfig::default()
    };
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), config).await;
    let mut model = Model::new();
    random_ops(&m, &mut model, 1, 6000, 700).await;
    check_model(&m, &model).await;
    let s = m.stats();
    assert!(s.gc_blocks_collected > 0, "{s:?}");
    assert!(s.write_amplification > 1.0);
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_and_readers_never_see_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(
        BackendKind::Mem,
        small(),
        dir.path(),
        VolumeConfig::default(),
    )
    .await;
    let m = Arc::new(m);
    let mut tasks = Vec::new();
    // Four writers on disjoint pages, each keeping its own model.
    for w in 0..4u64 {
        let m = Arc::clone(&m);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(w + 100);
            let mut model = Model::new();
            for n in 0..1500u64 {
                let id = LogicalPage::new(1, rng.below(150) * 4 + w);
                m.write(id, content(id, n, 512)).await.expect("write");
                model.insert(id, Some(n));
            }
            model
        }));
    }
    // Two readers checking that whatever they see is an intact version.
    let mut readers = Vec::new();
    for r in 0..2u64 {
        let m = Arc::clone(&m);
        readers.push(tokio::spawn(async move {
            let mut rng = Rng(r + 7);
            let mut seen = 0;
            for _ in 0..3000 {
                let id = LogicalPage::new(1, rng.below(600));
                if let Some(data) = m.read(id).await.expect("read") {
                    version_of(id, &data);
                    seen += 1;
                }
            }
            seen
        }));
    }
    let mut model = Model::new();
    for t in tasks {
        model.extend(t.await.unwrap());
    }
    for r in readers {
        assert!(r.await.unwrap() > 0);
    }
    check_model(&m, &model).await;
    assert!(m.stats().gc_blocks_collected > 0);
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_overwrites_match_a_model_on_file_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    for round in 0..3u64 {
        let (m, _) = open(
            BackendKind::File,
            small(),
            dir.path(),
            VolumeConfig::default(),
        )
        .await;
        check_model(&m, &model).await;
        random_ops(&m, &mut model, round + 10, 1500, 600).await;
        check_model(&m, &model).await;
        m.close().await.unwrap();
    }
}

#[tokio::test]
async fn gc_under_pressure_keeps_every_page() {
    let dir = tempfile::tempdir().unwrap();
    for policy in [VictimPolicy::Greedy, VictimPolicy::CostBenefit] {
        let sub = dir.path().join(format!("{policy:?}"));
        let config = VolumeConfig {
            victim_policy: policy,
            ..quiet()
        };
        let (m, _) = open(BackendKind::Mem, small(), &sub, config).await;
        let cap = m.capacity_pages();
        // Fill to 2 pages short of capacity, then overwrite a hot tenth many times.
        let mut model = Model::new();
        for i in 0..cap - 2 {
            let id = LogicalPage::new(0, i);
            m.write(id, content(id, 0, 512)).await.unwrap();
            model.insert(id, Some(0));
        }
        let mut rng = Rng(5);
        for n in 1..4000u64 {
            let i = if rng.below(10) < 8 {
                rng.below(cap / 10)
            } else {
                rng.below(cap - 2)
            };
            let id = LogicalPage::new(0, i);
            m.write(id, content(id, n, 512)).await.unwrap();
            model.insert(id, Some(n));
        }
        check_model(&m, &model).await;
        let s = m.stats();
        assert!(s.gc_blocks_collected > 50, "{policy:?}: {s:?}");
        assert!(s.free_blocks >= s.reserved_blocks - 1, "{s:?}");
        m.close().await.unwrap();
    }
}

#[tokio::test]
async fn wear_leveling_bounds_the_erase_count_spread() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 6;
    let mut spreads = Vec::new();
    for wear_spread_limit in [limit, 1 << 20] {
        let config = VolumeConfig {
            wear_spread_limit,
            ..quiet()
        };
        let sub = dir.path().join(wear_spread_limit.to_string());
        let (m, _) = open(BackendKind::Mem, small(), &sub, config).await;
        // Half the device is cold (written once), a small hot set is rewritten.
        let cold = m.capacity_pages() / 2;
        for i in 0..cold {
            let id = LogicalPage::new(0, i);
            m.write(id, content(id, 0, 512)).await.unwrap();
        }
        let mut rng = Rng(9);
        for n in 1..12_000u64 {
            let id = LogicalPage::new(1, rng.below(64));
            m.write(id, content(id, n, 512)).await.unwrap();
        }
        for i in (0..cold).step_by(7) {
            let id = LogicalPage::new(0, i);
            assert_eq!(version_of(id, &m.read(id).await.unwrap().unwrap()), 0);
        }
        m.verify().unwrap();
        let s = m.stats();
        assert!(
            s.erase_count_max >= 10,
            "the hot set wore some blocks: {s:?}"
        );
        spreads.push((s.erase_count_max - s.erase_count_min, s));
        m.close().await.unwrap();
    }
    let (with, s) = &spreads[0];
    assert!(s.wear_blocks_moved > 0, "{s:?}");
    assert!(
        *with <= limit + 2,
        "spread {with} > limit {limit} + 2: {s:?}"
    );
    let (without, s) = &spreads[1];
    assert_eq!(s.wear_blocks_moved, 0);
    assert!(
        *without > limit + 2,
        "without wear leveling the spread is {without}: {s:?}"
    );
}

#[tokio::test]
async fn a_full_device_says_no_space_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (m, weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let mut model = Model::new();
    let mut n = 0u64;
    let err = loop {
        let id = LogicalPage::new(2, n);
        match m.write(id, content(id, 1, 512)).await {
            Ok(()) => {
                model.insert(id, Some(1));
                n += 1;
            }
            Err(e) => break e,
        }
        assert!(n <= 1024, "a 1024-page device took more than 1024 pages");
    };
    let cap = m.capacity_pages();
    assert_eq!(n, cap);
    match &err {
        VolumeError::NoSpace {
            live_pages,
            capacity_pages,
            device_pages: 1024,
            ..
        } => assert_eq!((*live_pages, *capacity_pages), (cap, cap)),
        other => panic!("expected NoSpace, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("no space") && msg.contains("1024 pages"),
        "{msg}"
    );
    // Overwrites of live pages still succeed (garbage collection has room).
    for i in (0..cap).step_by(3) {
        let id = LogicalPage::new(2, i);
        m.write(id, content(id, 2, 512)).await.unwrap();
        model.insert(id, Some(2));
    }
    check_model(&m, &model).await;
    // A trim makes room for exactly one new page.
    m.trim(LogicalPage::new(2, 0)).await.unwrap();
    model.insert(LogicalPage::new(2, 0), None);
    let id = LogicalPage::new(5, 5);
    m.write(id, content(id, 1, 512)).await.unwrap();
    model.insert(id, Some(1));
    assert!(matches!(
        m.write(LogicalPage::new(5, 6), content(id, 1, 512)).await,
        Err(VolumeError::NoSpace { .. })
    ));
    // And all of it survives a crash.
    crash(m, weak).await;
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

#[tokio::test]
async fn recovery_after_a_crash_restores_writes_and_trims() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let config = VolumeConfig {
        checkpoint_interval_pages: 0,
        ..quiet()
    };
    for round in 0..4u64 {
        let (m, weak) = open(BackendKind::File, small(), dir.path(), config.clone()).await;
        check_model(&m, &model).await;
        if round > 0 {
            assert!(
                m.stats().pages_scanned_at_open > 0,
                "round {round} scanned nothing"
            );
            assert_eq!(m.stats().pages_lost_at_open, 0);
        }
        random_ops(&m, &mut model, round + 20, 700, 600).await;
        if round % 2 == 1 {
            // A checkpoint in the middle: the next open scans only what follows.
            m.checkpoint().await.unwrap();
            random_ops(&m, &mut model, round + 40, 300, 600).await;
        }
        crash(m, weak).await;
    }
    let (m, _) = open(BackendKind::File, small(), dir.path(), config).await;
    check_model(&m, &model).await;
    assert!(m.stats().gc_blocks_collected == 0 || m.stats().live_pages > 0);
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_trim_whose_log_append_fails_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultPlan::new();
    let (m, weak) = faulty_file(dir.path(), &faults).await;
    let ids: Vec<LogicalPage> = (0..4).map(|i| LogicalPage::new(1, i)).collect();
    for &id in &ids {
        m.write(id, content(id, 1, 512)).await.unwrap();
    }
    faults.fail_trim_append_after(0);
    let err = m.trim_many(ids[..2].to_vec()).await.unwrap_err();
    assert!(matches!(err, VolumeError::Io { .. }), "{err}");
    // Not durable, so not applied: both pages still read back.
    for &id in &ids[..2] {
        assert_eq!(version_of(id, &m.read(id).await.unwrap().unwrap()), 1);
    }
    assert_eq!(m.stats().live_pages, 4);
    m.verify().unwrap();
    // The log was cut back: the next trim follows whole records, and after a
    // crash only the acknowledged trim is replayed.
    m.trim(ids[2]).await.unwrap();
    crash(m, weak).await;
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let mut model = Model::new();
    for (i, &id) in ids.iter().enumerate() {
        model.insert(id, (i != 2).then_some(1));
    }
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

/// Rewrites the checkpoint in `dir` with `edit` applied to its body and the
/// checksum made valid again.
fn edit_checkpoint(dir: &std::path::Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let path = dir.join("volume.ckpt");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 4);
    edit(&mut bytes);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
}

#[tokio::test]
async fn a_checkpoint_mapping_one_physical_page_twice_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    for i in 0..2 {
        let id = LogicalPage::new(1, i);
        m.write(id, content(id, 1, 512)).await.unwrap();
    }
    m.close().await.unwrap();
    drop(m);
    // Header 64 bytes, 64 blocks of 16, the entry count (8), then entries of
    // 24 bytes whose last 4 are the physical page: point the second entry
    // at the first one's page.
    edit_checkpoint(dir.path(), |b| {
        let first = 64 + 64 * 16 + 8;
        assert_eq!(b.len(), first + 2 * 24, "two entries");
        let phys: [u8; 4] = b[first + 20..first + 24].try_into().unwrap();
        b[first + 24 + 20..first + 48].copy_from_slice(&phys);
    });
    let err = refused(BackendKind::File, small(), dir.path()).await;
    assert!(matches!(err, VolumeError::Metadata { .. }), "{err}");
    assert!(err.to_string().contains("volume.ckpt"), "{err}");
}

#[tokio::test]
async fn a_checkpoint_bounds_the_scan_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (m, weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    for i in 0..300 {
        let id = LogicalPage::new(0, i);
        m.write(id, content(id, 0, 512)).await.unwrap();
    }
    m.checkpoint().await.unwrap();
    for i in 0..10 {
        let id = LogicalPage::new(0, i);
        m.write(id, content(id, 1, 512)).await.unwrap();
    }
    crash(m, weak).await;
    let (m, weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let scanned = m.stats().pages_scanned_at_open;
    assert!((10..=20).contains(&scanned), "scanned {scanned}");
    for i in 0..300 {
        let id = LogicalPage::new(0, i);
        let want = u64::from(i < 10);
        assert_eq!(version_of(id, &m.read(id).await.unwrap().unwrap()), want);
    }
    // After a clean close nothing needs scanning.
    m.close().await.unwrap();
    drop(m);
    assert_eq!(weak.strong_count(), 0);
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    assert_eq!(m.stats().pages_scanned_at_open, 0);
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_dropped_write_or_trim_future_finishes_the_operation_whole() {
    use futures::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), quiet()).await;
    let a = LogicalPage::new(1, 1);
    let b = LogicalPage::new(1, 2);
    m.write(b, content(b, 1, 512)).await.unwrap();
    // Polled once, then dropped: a write on `mem` ends in that poll (it
    // runs on the caller's task); whatever is left runs on in a task of
    // its own (the file backend's case: see the next test).
    let _ = m.write(a, content(a, 1, 512)).now_or_never();
    assert!(m.trim(b).now_or_never().is_none());
    m.verify().unwrap();
    let mut model = Model::new();
    model.insert(a, Some(1));
    model.insert(b, None);
    for _ in 0..500 {
        if m.read(a).await.unwrap().is_some() && m.read(b).await.unwrap().is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    check_model(&m, &model).await;
    assert_eq!(m.stats().user_pages_written, 2);
    m.close().await.unwrap();
}

#[tokio::test]
async fn capacity_follows_the_formula_and_retired_blocks_lower_it() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultPlan::new();
    let (m, _) = open_faulty(
        BackendKind::Mem,
        small(),
        dir.path(),
        quiet(),
        faults.clone(),
    )
    .await;
    // floor((good 64 - reserve max(3, 64 / 128) - 4 chips - 1) * 16 * 0.95)
    assert_eq!(m.capacity_pages(), (56.0f64 * 16.0 * 0.95).floor() as u64);
    assert_eq!(m.stats().reserved_blocks, 3);
    faults.fail_program_after(0);
    let id = LogicalPage::new(1, 1);
    m.write(id, content(id, 1, 512)).await.unwrap();
    let s = m.stats();
    assert_eq!((s.retired_blocks, s.good_blocks), (1, 63), "{s:?}");
    assert_eq!(s.capacity_pages, (55.0f64 * 16.0 * 0.95).floor() as u64);
    m.verify().unwrap();
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_damaged_checkpoint_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let id = LogicalPage::new(1, 1);
    m.write(id, content(id, 1, 512)).await.unwrap();
    m.close().await.unwrap();
    drop(m);
    let path = dir.path().join("volume.ckpt");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[70] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let err = refused(BackendKind::File, small(), dir.path()).await;
    assert!(matches!(err, VolumeError::Metadata { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("volume.ckpt") && msg.contains("checksum"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_checkpoint_deletes_the_trim_logs_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let logs = || {
        let mut v: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("volume-trims-"))
            .collect();
        v.sort();
        v
    };
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let mut model = Model::new();
    for round in 0..3 {
        random_ops(&m, &mut model, 80 + round, 200, 100).await;
        m.checkpoint().await.unwrap();
        let generation = m.stats().checkpoint_generation;
        assert_eq!(logs(), vec![format!("volume-trims-{generation:016x}.log")]);
    }
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_task_checkpoints_every_interval() {
    let dir = tempfile::tempdir().unwrap();
    let config = VolumeConfig {
        checkpoint_interval_pages: 100,
        ..VolumeConfig::default()
    };
    let (m, _) = open(BackendKind::Mem, small(), dir.path(), config).await;
    let mut model = Model::new();
    for round in 0..3 {
        // 120 writes, past the interval: one checkpoint follows.
        let before = m.stats().checkpoint_generation;
        for i in 0..120 {
            let id = LogicalPage::new(1, i);
            m.write(id, content(id, round, 512)).await.unwrap();
            model.insert(id, Some(round));
        }
        let mut generation = before;
        for _ in 0..500 {
            generation = m.stats().checkpoint_generation;
            if generation > before {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(generation > before, "round {round}: no checkpoint");
    }
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

#[tokio::test]
async fn failed_programs_and_erases_retire_blocks_and_keep_data() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultPlan::new();
    let (m, weak) = faulty_file(dir.path(), &faults).await;
    let mut model = Model::new();
    random_ops(&m, &mut model, 50, 300, 500).await;
    // A program fails mid-block: the block is retired and its pages moved.
    faults.fail_program_after(5);
    random_ops(&m, &mut model, 51, 300, 500).await;
    // An erase fails during garbage collection.
    faults.fail_erase_after(1);
    random_ops(&m, &mut model, 52, 2500, 500).await;
    assert_eq!(faults.programs_failed(), 1);
    assert_eq!(faults.erases_failed(), 1);
    m.collect_garbage(4).await.unwrap();
    check_model(&m, &model).await;
    let s = m.stats();
    assert_eq!(s.retired_blocks, 2, "{s:?}");
    assert_eq!(s.bad_blocks, 2, "{s:?}");
    assert_eq!(s.good_blocks, 62);
    // The retirements are in the device's bad-block table and survive a crash.
    crash(m, weak).await;
    let device = open_device(BackendKind::File, small(), dir.path());
    assert_eq!(device.info().bad_blocks.len(), 2);
    let m = SpaceManager::open(device, quiet(), dir.path())
        .await
        .unwrap();
    check_model(&m, &model).await;
    assert_eq!(m.stats().bad_blocks, 2);
    random_ops(&m, &mut model, 53, 500, 500).await;
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_block_that_always_fails_is_never_used_again() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultPlan::new();
    // Every program on chip 0:0's first four blocks fails.
    for block in 0..4 {
        faults.fail_programs_in(quarry_device::BlockAddr {
            bus: 0,
            chip: 0,
            block,
        });
    }
    let (m, _) = open_faulty(
        BackendKind::Mem,
        small(),
        dir.path(),
        quiet(),
        faults.clone(),
    )
    .await;
    let mut model = Model::new();
    random_ops(&m, &mut model, 60, 2000, 400).await;
    check_model(&m, &model).await;
    let s = m.stats();
    assert_eq!(s.retired_blocks, 4, "{s:?}");
    assert_eq!(faults.programs_failed(), 4);
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nand_backend_with_factory_bad_blocks_and_bit_errors() {
    use quarry_device::{Device, NandTiming, OpenOptions, Preset};
    let dir = tempfile::tempdir().unwrap();
    // RFSA timing scaled down 500x, 10% factory bad blocks, ~2 bit errors per
    // page read (corrected by the device's ECC; a rare uncorrectable read is
    // read again).
    let mut timing = NandTiming::preset(Preset::Rfsa, 600).scaled(0.002);
    timing.factory_bad_fraction = 0.1;
    timing.rber_fresh = 2.0 / (600.0 * 8.0);
    let open_nand = || {
        let options = OpenOptions {
            nand_timing: Some(timing.clone()),
            ..OpenOptions::default()
        };
        let config = device_config(BackendKind::Nand, small());
        Arc::new(Device::open_with(&config, dir.path(), options).expect("open nand"))
    };
    let device = open_nand();
    let factory_bad = device.info().bad_blocks.len() as u64;
    assert!(factory_bad > 0, "the model marked no block bad");
    let weak = Arc::downgrade(&device);
    let m = SpaceManager::open(device, VolumeConfig::default(), dir.path())
        .await
        .unwrap();
    let s = m.stats();
    assert_eq!(
        (s.bad_blocks, s.good_blocks),
        (factory_bad, 64 - factory_bad)
    );
    let mut model = Model::new();
    random_ops(&m, &mut model, 70, 2000, 400).await;
    check_model(&m, &model).await;
    assert!(m.stats().gc_blocks_collected > 0);
    crash(m, weak).await;
    let m = SpaceManager::open(open_nand(), VolumeConfig::default(), dir.path())
        .await
        .unwrap();
    check_model(&m, &model).await;
    assert_eq!(m.stats().bad_blocks, factory_bad);
    m.close().await.unwrap();
}

#[tokio::test]
async fn write_amplification_benchmark_runs() {
    let dir = tempfile::tempdir().unwrap();
    let opts = quarry_volume::WaBenchOptions {
        geometry: Geometry {
            buses: 2,
            chips_per_bus: 2,
            blocks_per_chip: 32,
            pages_per_block: 32,
            page_size_bytes: 512,
            oob_size_bytes: 64,
        },
        fills: vec![0.5, 0.8],
        warmup_writes: 1.0,
        measured_writes: 1.0,
        dir: dir.path().join("wa"),
        ..quarry_volume::WaBenchOptions::default()
    };
    let points = quarry_volume::write_amplification(&opts).await.unwrap();
    assert_eq!(points.len(), 2);
    assert!(points[0].write_amplification >= 1.0);
    assert!(
        points[1].write_amplification > points[0].write_amplification,
        "{points:?}"
    );
    assert!((points[1].greedy_theory - 2.5).abs() < 1e-9);
}

/// Reads every page of `ids` through `read_many` and checks it against the
/// model.
async fn check_many(m: &SpaceManager, ids: &[LogicalPage], model: &Model) {
    let got = m.read_many(ids).await.expect("read_many");
    assert_eq!(got.len(), ids.len());
    for (id, page) in ids.iter().zip(got) {
        let want = model.get(id).copied().flatten();
        assert_eq!(page.map(|d| version_of(*id, &d)), want, "page {id}");
    }
}

/// Runs written concurrently read back right through `read_run` and
/// `read_many` (in any order of pages, across runs, through overwrites,
/// trims, garbage collection and a crash); a run with a wrong page, or
/// past the device's capacity, is refused with the reason and leaves what
/// is stored as it was.
/// A fetch answers the pages as they were when it looked them up: the
/// bytes are in memory once `fetch_many` returns, so overwrites, trims and
/// garbage collection before `finish` (which checks them) change nothing of
/// its answer; a read after them sees the new versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_answers_the_versions_it_looked_up() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let size = m.page_size();
    let space = 3u32;
    let ids: Vec<LogicalPage> = (0..20).map(|i| LogicalPage::new(space, i)).collect();
    let pages = ids.iter().map(|&id| content(id, 1, size)).collect();
    m.write_run(ids[0], pages).await.expect("write_run");
    let fetched = m.fetch_many(&ids).await.expect("fetch");
    assert_eq!(fetched.len(), ids.len());
    let mut model = Model::new();
    for (k, &id) in ids.iter().enumerate() {
        if k % 5 == 0 {
            m.trim(id).await.unwrap();
            model.insert(id, None);
        } else {
            m.write(id, content(id, 2, size)).await.unwrap();
            model.insert(id, Some(2));
        }
    }
    m.collect_garbage(8).await.unwrap();
    let old = fetched.finish().await.expect("finish");
    for (&id, page) in ids.iter().zip(old) {
        assert_eq!(
            version_of(id, &page.expect("written when fetched")),
            1,
            "{id}"
        );
    }
    check_many(&m, &ids, &model).await;
    m.verify().unwrap();
}

/// A fetched run hands its pages out one at a time, each checked when
/// taken, in any order: what `finish` would have answered for each; a page
/// never written is `None`, a page past the run an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetched_run_hands_out_its_pages_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let size = m.page_size();
    let space = 4u32;
    let written: Vec<LogicalPage> = (0..12).map(|i| LogicalPage::new(space, i)).collect();
    let pages = written.iter().map(|&id| content(id, 1, size)).collect();
    m.write_run(written[0], pages).await.expect("write_run");
    let mut ids = written.clone();
    ids.insert(5, LogicalPage::new(space, 1000));
    let mut fetched = m.fetch_many(&ids).await.expect("fetch");
    for (j, &id) in ids.iter().enumerate().rev() {
        let page = fetched.page(j).await.expect("page");
        if id.index == 1000 {
            assert!(page.is_none(), "never written");
        } else {
            let page = page.expect("written");
            assert_eq!(version_of(id, &page.data), 1, "{id}");
        }
    }
    match fetched.page(ids.len()).await {
        Err(e) => assert!(
            e.to_string().contains(&format!("page {}", ids.len())),
            "{e}"
        ),
        Ok(_) => panic!("a page past the run"),
    }
    m.verify().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_read_back_in_any_order_through_overwrites_gc_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (m, weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let m = Arc::new(m);
    let size = m.page_size();
    let mut model = Model::new();
    let space = 7u32;
    // 12 runs of 7 pages, written at once.
    let mut tasks = Vec::new();
    for r in 0..12u64 {
        let m = Arc::clone(&m);
        let first = LogicalPage::new(space, r * 7);
        let pages = (0..7)
            .map(|i| {
                let id = LogicalPage::new(space, r * 7 + i);
                content(id, 1, size)
            })
            .collect();
        tasks.push(tokio::spawn(async move { m.write_run(first, pages).await }));
    }
    for t in tasks {
        t.await.unwrap().expect("write_run");
    }
    for i in 0..84 {
        model.insert(LogicalPage::new(space, i), Some(1));
    }
    let all: Vec<LogicalPage> = (0..90).map(|i| LogicalPage::new(space, i)).collect();
    // In logical order (with 6 never-written pages at the end), reversed,
    // and interleaved.
    check_many(&m, &all, &model).await;
    let reversed: Vec<LogicalPage> = all.iter().rev().copied().collect();
    check_many(&m, &reversed, &model).await;
    let mixed: Vec<LogicalPage> = (0..90)
        .map(|i| LogicalPage::new(space, (i * 37) % 90))
        .collect();
    check_many(&m, &mixed, &model).await;
    let run = m.read_run(LogicalPage::new(space, 3), 10).await.unwrap();
    assert_eq!(run.len(), 10);
    for (k, page) in run.into_iter().enumerate() {
        let id = LogicalPage::new(space, 3 + k as u64);
        assert_eq!(version_of(id, &page.expect("written")), 1);
    }
    // Overwrites and trims move pages out of their runs; garbage collection
    // moves the rest.
    let mut rng = Rng(11);
    for v in 2..6u64 {
        for _ in 0..40 {
            let id = LogicalPage::new(space, rng.below(84));
            if rng.below(10) == 0 {
                m.trim(id).await.unwrap();
                model.insert(id, None);
            } else {
                m.write(id, content(id, v, size)).await.unwrap();
                model.insert(id, Some(v));
            }
        }
        m.collect_garbage(4).await.unwrap();
        check_many(&m, &mixed, &model).await;
    }
    // A wrong page size anywhere in a run: refused before anything is written.
    let first = LogicalPage::new(space, 200);
    let bad = vec![content(first, 1, size), Bytes::from(vec![0u8; size - 1])];
    match m.write_run(first, bad).await {
        Err(VolumeError::PageSize { got, .. }) => assert_eq!(got, size - 1),
        other => panic!("expected PageSize, got {other:?}"),
    }
    assert_eq!(m.read(first).await.unwrap(), None);
    // Too many pages for one call.
    let err = m
        .read_run(first, quarry_volume::MAX_RUN_PAGES as u64 + 1)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("at most"), "{err}");
    m.verify().expect("invariants");
    let m = Arc::into_inner(m).expect("one owner");
    crash(m, weak).await;
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    check_many(&m, &all, &model).await;
    check_model(&m, &model).await;
    // Runs until the device is full: the last one fails with NoSpace, what
    // was acknowledged before stays.
    let mut next = 1000u64;
    let err = loop {
        let first = LogicalPage::new(space, next);
        let pages = (0..5)
            .map(|i| content(LogicalPage::new(space, next + i), 1, size))
            .collect();
        match m.write_run(first, pages).await {
            Ok(()) => {
                for i in 0..5 {
                    model.insert(LogicalPage::new(space, next + i), Some(1));
                }
                next += 5;
            }
            Err(e) => break e,
        }
        assert!(next < 2000, "a 1024-page device took more than 1000 pages");
    };
    assert!(matches!(err, VolumeError::NoSpace { .. }), "{err:?}");
    // Pages of the failed run before the one refused are written; the model
    // takes them from the device.
    for i in next..next + 5 {
        let id = LogicalPage::new(space, i);
        if let Some(page) = m.read(id).await.unwrap() {
            model.insert(id, Some(version_of(id, &page)));
        }
    }
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

/// The tag a run's first page carries in these tests: its number, repeated
/// to a length that varies with it (up to the whole room).
fn run_tag(run: u64, room: usize) -> Bytes {
    Bytes::from(vec![run as u8 + 1; (run as usize * 7) % (room + 1)])
}

/// What a page written with `tag` reads back as its tag: the bytes, then
/// 0xFF up to the room.
fn padded(tag: &[u8], room: usize) -> Vec<u8> {
    let mut want = tag.to_vec();
    want.resize(room, 0xFF);
    want
}

async fn check_tags(m: &SpaceManager, space: u32, runs: u64, run_pages: u64) {
    let room = m.tag_capacity_bytes();
    let ids: Vec<LogicalPage> = (0..runs * run_pages)
        .map(|i| LogicalPage::new(space, i))
        .collect();
    let fetched = m.fetch_many(&ids).await.unwrap().finish_tagged().await;
    for (&id, page) in ids.iter().zip(fetched.unwrap()) {
        let page = page.expect("written");
        assert_eq!(version_of(id, &page.data), 1, "{id}");
        let (run, k) = (id.index / run_pages, id.index % run_pages);
        let want = if k == 0 {
            padded(&run_tag(run, room), room)
        } else {
            padded(&[], room)
        };
        assert_eq!(&page.tag[..], &want[..], "fetched {id}");
        let single = m.read_tagged(id).await.unwrap().expect("written");
        assert_eq!(single, page, "read {id}");
    }
}

/// A run's tag stays with its first page through reads, garbage
/// collection's moves and a crash; a tag beyond the spare area is refused
/// before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_stay_with_their_pages_through_gc_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (m, weak) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let size = m.page_size();
    let room = m.tag_capacity_bytes();
    assert_eq!(room, 64 - quarry_volume::OOB_RECORD_BYTES);
    let (space, runs, run_pages) = (4u32, 12u64, 5u64);
    for r in 0..runs {
        let first = LogicalPage::new(space, r * run_pages);
        let pages = (0..run_pages)
            .map(|i| content(LogicalPage::new(space, first.index + i), 1, size))
            .collect();
        m.write_run_tagged(first, pages, run_tag(r, room))
            .await
            .unwrap();
    }
    check_tags(&m, space, runs, run_pages).await;
    // Every page but the first of each run written again (untagged): the
    // runs' blocks then hold only the first pages live, garbage collection
    // takes those blocks first, and the tags move with the pages.
    for r in 0..runs {
        for k in 1..run_pages {
            let id = LogicalPage::new(space, r * run_pages + k);
            m.write(id, content(id, 1, size)).await.unwrap();
        }
    }
    m.collect_garbage(16).await.unwrap();
    assert!(m.stats().gc_pages_moved > 0, "{:?}", m.stats());
    check_tags(&m, space, runs, run_pages).await;
    crash(m, weak).await;
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    check_tags(&m, space, runs, run_pages).await;

    let first = LogicalPage::new(space, 500);
    let pages = vec![content(first, 1, size)];
    let err = m
        .write_run_tagged(first, pages, Bytes::from(vec![1; room + 1]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("a page tag of {} bytes", room + 1)) && err.contains("room for 36"),
        "{err}"
    );
    assert_eq!(m.read(first).await.unwrap(), None);
    m.verify().unwrap();
    m.close().await.unwrap();
}

/// A run goes to the device as its first page and then batches of
/// consecutive pages, so it reads back in one request per block. A batch
/// whose program fails retires its block and its pages land elsewhere:
/// every page of the run reads back, before and after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_batch_fails_still_lands_whole() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultPlan::new();
    let (m, weak) = faulty_file(dir.path(), &faults).await;
    let size = m.page_size();
    let space = 5u32;
    let run = |from: u64| -> Vec<LogicalPage> {
        (from..from + 40)
            .map(|i| LogicalPage::new(space, i))
            .collect()
    };
    let pages = |ids: &[LogicalPage]| ids.iter().map(|&id| content(id, 1, size)).collect();
    // 40 pages from the start of a block: page 0, a batch of 15 filling
    // the block, page 16 opening the next, 15 more, page 32, 7 more: six
    // programs (a page at a time would fail at the eighth).
    faults.fail_program_after(7);
    let first = run(0);
    m.write_run(first[0], pages(&first)).await.expect("run");
    assert_eq!(
        faults.programs_failed(),
        0,
        "more than 7 programs for one run"
    );
    let reads = m.locate(&first).expect("locate").device_reads().count();
    assert!(
        reads <= 3,
        "{reads} device reads for 40 pages in 16-page blocks"
    );
    // The next run's first page is the seventh program; its first batch,
    // the eighth, fails.
    let second = run(100);
    m.write_run(second[0], pages(&second))
        .await
        .expect("a failed batch is written elsewhere");
    assert_eq!(faults.programs_failed(), 1);
    assert_eq!(m.stats().retired_blocks, 1);
    let mut model = Model::new();
    for &id in first.iter().chain(&second) {
        model.insert(id, Some(1));
    }
    check_model(&m, &model).await;
    crash(m, weak).await;
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

/// Garbage collection moves a block's live pages in batches of
/// consecutive pages: eight live pages take one program where a page at a
/// time would take eight. A batch whose program fails retires the block it
/// was going to, and the pages are moved anyway: every page reads back,
/// before and after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_moves_live_pages_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FaultPlan::new();
    let (m, weak) = faulty_file(dir.path(), &faults).await;
    let size = m.page_size();
    let mut model = Model::new();
    // Two runs of 17 pages on two chips: each fills a 16-page block (sealed
    // when its 17th page opens the next), then half of each block is
    // trimmed.
    for (space, from) in [(9u32, 0u64), (10, 16)] {
        let ids: Vec<LogicalPage> = (from..from + 17)
            .map(|i| LogicalPage::new(space, i))
            .collect();
        let pages = ids.iter().map(|&id| content(id, 1, size)).collect();
        m.write_run(ids[0], pages).await.expect("run");
        for (k, &id) in ids.iter().enumerate() {
            if k % 2 == 0 && k < 16 {
                m.trim(id).await.unwrap();
                model.insert(id, None);
            } else {
                model.insert(id, Some(1));
            }
        }
    }
    faults.fail_program_after(1);
    assert_eq!(m.collect_garbage(1).await.unwrap(), 1);
    assert_eq!(m.stats().gc_pages_moved, 8);
    assert_eq!(
        faults.programs_failed(),
        0,
        "eight live pages took more than one program"
    );
    check_model(&m, &model).await;
    // The second victim's batch is the program that fails.
    assert_eq!(m.collect_garbage(1).await.unwrap(), 1);
    assert_eq!(faults.programs_failed(), 1);
    assert_eq!(m.stats().retired_blocks, 1);
    check_model(&m, &model).await;
    crash(m, weak).await;
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    check_model(&m, &model).await;
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_write_whose_caller_stops_waiting_still_lands_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::File, small(), dir.path(), quiet()).await;
    let size = m.page_size();
    let id = LogicalPage::new(1, 3);
    m.write(id, content(id, 1, size))
        .await
        .expect("first write");
    // Polled once (it goes to the disk and waits), then dropped: the write
    // runs on to its end by itself.
    {
        let write = m.write(id, content(id, 2, size));
        tokio::pin!(write);
        let first = futures::poll!(write.as_mut());
        assert!(first.is_pending(), "a file write waits for the disk");
    }
    let mut landed = false;
    for _ in 0..500 {
        let data = m
            .read(id)
            .await
            .expect("read")
            .expect("the page holds data");
        match version_of(id, &data) {
            2 => {
                landed = true;
                break;
            }
            1 => tokio::time::sleep(std::time::Duration::from_millis(2)).await,
            other => panic!("page {id} holds version {other}"),
        }
    }
    assert!(landed, "the dropped write never landed");
    m.verify().expect("invariants");
    assert_eq!(m.stats().live_pages, 1);
    m.close().await.unwrap();
}
