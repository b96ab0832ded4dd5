//! The tables' log packs records of a page or less into the sectors of a
//! page, one after another (`SpaceManager::write_sectors`): on a volume of
//! 4 KiB pages, four sectors of 1 KiB each.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use common::*;
use quarry_device::{BackendKind, Device, Geometry};
use quarry_store::{Batch, Table, TableStore, VolumeTableConfig, VolumeTableStore};
use quarry_volume::{LogicalPage, SpaceManager};

const LOG_SPACE: u32 = quarry_store::DEFAULT_LOG_SPACE;

fn sectored() -> Geometry {
    Geometry {
        page_size_bytes: 4096,
        ..geometry()
    }
}

async fn open_tables(volume: &Arc<SpaceManager>) -> VolumeTableStore {
    VolumeTableStore::open(
        Arc::clone(volume),
        VolumeTableConfig {
            compact_min_log_pages: 1000,
            ..VolumeTableConfig::default()
        },
    )
    .await
    .unwrap()
}

type Model = BTreeMap<Vec<u8>, Bytes>;

/// A file-backed volume of 4 KiB pages in `dir`, the tables over it, and
/// the model of what they hold.
async fn start(dir: &Path) -> (Arc<SpaceManager>, Weak<Device>, VolumeTableStore, Model) {
    let (volume, device) = open_volume_with(BackendKind::File, dir, quiet(), sectored()).await;
    let tables = open_tables(&volume).await;
    (volume, device, tables, Model::new())
}

async fn finish(tables: VolumeTableStore, volume: Arc<SpaceManager>) {
    drop(tables);
    volume.close().await.unwrap();
}

async fn reopen(
    dir: &std::path::Path,
    tables: VolumeTableStore,
    volume: Arc<SpaceManager>,
    device: Weak<Device>,
) -> (Arc<SpaceManager>, Weak<Device>, VolumeTableStore) {
    drop(tables);
    drop(volume);
    wait_released(device).await;
    let (volume, device) = open_volume_with(BackendKind::File, dir, quiet(), sectored()).await;
    let tables = open_tables(&volume).await;
    (volume, device, tables)
}

/// Commits key `i` with a value that makes a record of one sector.
async fn commit(tables: &VolumeTableStore, model: &mut Model, i: u64) {
    let key = format!("key-{i:04}").into_bytes();
    let value = Bytes::from(noise(i, 300));
    let mut batch = Batch::new();
    batch.put(Table::Chunks, key.clone(), value.clone());
    tables.commit(batch).await.unwrap();
    model.insert(key, value);
}

async fn assert_holds(tables: &VolumeTableStore, model: &Model) {
    let got: Model = tables
        .scan(Table::Chunks, b"", None, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(&got, model);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_commits_share_log_pages_and_come_back_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device, tables, mut model) = start(dir.path()).await;
    for i in 0..10 {
        commit(&tables, &mut model, i).await;
    }
    let st = tables.stats();
    assert_eq!(st.log_records_written, 10);
    assert_eq!(st.log_pages, 3, "four records a page: {st:?}");
    let (volume, device, tables) = reopen(dir.path(), tables, volume, device).await;
    assert_holds(&tables, &model).await;
    let st = tables.stats();
    assert_eq!(
        (st.records_replayed_at_open, st.last_seq),
        (10, 10),
        "{st:?}"
    );
    // After a reopen the next record begins a page.
    for i in 10..15 {
        commit(&tables, &mut model, i).await;
    }
    assert_eq!(tables.stats().log_pages, 5);
    let (volume, _, tables) = reopen(dir.path(), tables, volume, device).await;
    assert_holds(&tables, &model).await;
    assert_eq!(tables.stats().last_seq, 15);
    finish(tables, volume).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_page_that_takes_no_more_sectors_in_place_is_written_again_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device, tables, mut model) = start(dir.path()).await;
    commit(&tables, &mut model, 0).await;
    // Every chip's open block takes two more pages: the log page's block
    // has its next page programmed, so the device takes no more sectors of
    // the log page in place.
    for i in 0..8u64 {
        volume
            .write(LogicalPage::new(9, i), Bytes::from(noise(i, 4096)))
            .await
            .unwrap();
    }
    commit(&tables, &mut model, 1).await;
    commit(&tables, &mut model, 2).await;
    assert_eq!(tables.stats().log_pages, 1, "{:?}", tables.stats());
    let (volume, _, tables) = reopen(dir.path(), tables, volume, device).await;
    assert_holds(&tables, &model).await;
    assert_eq!(tables.stats().last_seq, 3);
    finish(tables, volume).await;
}

// The page written again is a new version holding the old one's records;
// until it is durable the old version is what holds them. A power loss in
// the middle of it may keep the new version's spare area and lose its
// sectors: the records acknowledged before must still be there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_page_written_again_and_lost_leaves_the_records_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device, tables, mut model) = start(dir.path()).await;
    commit(&tables, &mut model, 0).await;
    commit(&tables, &mut model, 1).await;
    for i in 0..8u64 {
        volume
            .write(LogicalPage::new(9, i), Bytes::from(noise(i, 4096)))
            .await
            .unwrap();
    }
    commit(&tables, &mut model, 2).await;
    assert_eq!(tables.stats().log_pages, 1, "{:?}", tables.stats());
    let (offset, path) = log_page_offset(&volume, &device, 0);
    drop(tables);
    drop(volume);
    wait_released(device).await;
    // As the power loss leaves it: the new version's sectors did not
    // arrive, its spare area did (the old version is untouched).
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0xFF; 3 * 1024], offset).unwrap();
    drop(file);
    model.remove(b"key-0002".as_slice());

    let (volume, _) = open_volume_with(BackendKind::File, dir.path(), quiet(), sectored()).await;
    let tables = open_tables(&volume).await;
    assert_holds(&tables, &model).await;
    assert_eq!(tables.stats().last_seq, 2);
    finish(tables, volume).await;
}

/// The bytes of the device file behind log page `index`.
fn log_page_offset(
    volume: &SpaceManager,
    device: &Weak<Device>,
    index: u64,
) -> (u64, std::path::PathBuf) {
    let id = LogicalPage::new(LOG_SPACE, index);
    let (addr, _) = volume.locate(&[id]).unwrap().device_reads().next().unwrap();
    let device = device.upgrade().unwrap();
    (
        device.page_offset_bytes(addr).unwrap(),
        device.backing_path().unwrap().to_path_buf(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_cut_short_ends_its_page_and_the_log_goes_on_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device, tables, mut model) = start(dir.path()).await;
    commit(&tables, &mut model, 0).await;
    commit(&tables, &mut model, 1).await;
    let first = *volume.pages_in(LOG_SPACE).first().unwrap();
    let (offset, path) = log_page_offset(&volume, &device, first);
    drop(tables);
    drop(volume);
    wait_released(device).await;
    // As a crash in the middle of the second record's program leaves it.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0xA5; 300], offset + 1024 + 40).unwrap();
    drop(file);
    model.remove(b"key-0001".as_slice());

    let (volume, device) =
        open_volume_with(BackendKind::File, dir.path(), quiet(), sectored()).await;
    let tables = open_tables(&volume).await;
    assert_holds(&tables, &model).await;
    assert_eq!(tables.stats().last_seq, 1);
    // The next record begins the next page, and the replay reads past the
    // cut-short one to it.
    commit(&tables, &mut model, 2).await;
    let (volume, device, tables) = reopen(dir.path(), tables, volume, device).await;
    assert_holds(&tables, &model).await;
    assert_eq!(tables.stats().last_seq, 2);

    // Damage to a page's first record with the log going on after it is
    // an error, not a shorter log.
    let (offset, path) = log_page_offset(&volume, &device, first);
    drop(tables);
    drop(volume);
    wait_released(device).await;
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0x5A; 200], offset + 100).unwrap();
    drop(file);
    let (volume, _) = open_volume_with(BackendKind::File, dir.path(), quiet(), sectored()).await;
    let err = VolumeTableStore::open(Arc::clone(&volume), VolumeTableConfig::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is damaged") && err.contains("follows it"),
        "{err}"
    );
    volume.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_after_a_compaction_begin_a_page_of_the_new_log() {
    let dir = tempfile::tempdir().unwrap();
    let (volume, device, tables, mut model) = start(dir.path()).await;
    commit(&tables, &mut model, 0).await;
    tables.compact().await.unwrap();
    // The page holding record 1 has room, but the log after the snapshot
    // begins at a page of its own.
    commit(&tables, &mut model, 1).await;
    commit(&tables, &mut model, 2).await;
    let (volume, _, tables) = reopen(dir.path(), tables, volume, device).await;
    assert_holds(&tables, &model).await;
    let st = tables.stats();
    assert_eq!((st.records_replayed_at_open, st.last_seq), (2, 3), "{st:?}");
    finish(tables, volume).await;
}
