//! Pages written in pieces (`SpaceManager::write_sectors`): a page's
//! sectors written a range at a time on one physical page, as a log of
//! small records writes them, through reopens, new versions, trims,
//! garbage collection and a program cut short.

mod common;

use std::os::unix::fs::FileExt;

use bytes::Bytes;
use common::*;
use quarry_device::{BackendKind, Geometry};
use quarry_volume::{LogicalPage, SectorsWritten, SpaceManager};

/// `small()` with 4 KiB pages: four sectors of 1 KiB each.
fn sectored() -> Geometry {
    Geometry {
        page_size_bytes: 4096,
        ..small()
    }
}

/// Page `id` as read: its first `sectors` sectors those of `want`, the rest
/// erased (0xFF).
async fn assert_page(m: &SpaceManager, id: LogicalPage, want: &Bytes, sectors: usize) {
    let s = m.sector_size_bytes();
    let page = m.read(id).await.unwrap().expect("written");
    assert_eq!(&page[..sectors * s], &want[..sectors * s], "{id}: sectors");
    assert!(
        page[sectors * s..].iter().all(|&b| b == 0xFF),
        "{id}: sectors after {sectors} are erased"
    );
}

#[tokio::test]
async fn a_page_written_in_pieces_grows_and_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (m, weak) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
    let s = m.sector_size_bytes();
    assert_eq!(s, 1024);
    let id = LogicalPage::new(2, 7);
    let want = content(id, 1, m.page_size());
    let written = |r: Result<SectorsWritten, _>| r.unwrap();
    assert_eq!(
        written(m.write_sectors(id, 0, want.slice(..s)).await),
        SectorsWritten::Written
    );
    assert_page(&m, id, &want, 1).await;
    assert_eq!(
        written(m.write_sectors(id, 1, want.slice(s..3 * s)).await),
        SectorsWritten::Written
    );
    assert_page(&m, id, &want, 3).await;
    // Not the next sector, or a page never written: nothing is written.
    assert_eq!(
        written(m.write_sectors(id, 2, want.slice(..s)).await),
        SectorsWritten::Closed
    );
    let never = LogicalPage::new(2, 8);
    assert_eq!(
        written(m.write_sectors(never, 1, want.slice(..s)).await),
        SectorsWritten::Closed
    );
    assert_eq!(m.read(never).await.unwrap(), None);
    let e = m
        .write_sectors(id, 3, want.slice(..2 * s))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("whole number of 1024-byte sectors"),
        "{e}"
    );
    assert_page(&m, id, &want, 3).await;
    m.verify().unwrap();
    crash(m, weak).await;

    let (m, _) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
    assert_page(&m, id, &want, 3).await;
    // A reopened device's pages take no more sectors: the writer starts
    // the page anew with all of them.
    assert_eq!(
        written(m.write_sectors(id, 3, want.slice(3 * s..)).await),
        SectorsWritten::Closed
    );
    assert_eq!(
        written(m.write_sectors(id, 0, want.clone()).await),
        SectorsWritten::Written
    );
    assert_eq!(m.read(id).await.unwrap().unwrap(), want);
    m.verify().unwrap();
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_page_written_anew_trimmed_or_moved_takes_no_more_sectors() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
    let s = m.sector_size_bytes();
    let size = m.page_size();
    let space = 3u32;
    let (anew, trimmed, moved) = (
        LogicalPage::new(space, 1000),
        LogicalPage::new(space, 1001),
        LogicalPage::new(space, 1002),
    );
    for id in [anew, trimmed, moved] {
        let first = content(id, 1, size).slice(..s);
        assert_eq!(
            m.write_sectors(id, 0, first).await.unwrap(),
            SectorsWritten::Written
        );
    }
    m.write(anew, content(anew, 2, size)).await.unwrap();
    m.trim(trimmed).await.unwrap();
    // Fill the chips' blocks and write it all again, so the blocks hold
    // little but `moved` and garbage collection takes them.
    for version in 1..=2 {
        for i in 0..120u64 {
            let id = LogicalPage::new(space, i);
            m.write(id, content(id, version, size)).await.unwrap();
        }
    }
    m.collect_garbage(16).await.unwrap();
    assert!(m.stats().gc_pages_moved > 0, "{:?}", m.stats());
    let more = |id: LogicalPage| content(id, 1, size).slice(s..2 * s);
    for id in [anew, trimmed, moved] {
        assert_eq!(
            m.write_sectors(id, 1, more(id)).await.unwrap(),
            SectorsWritten::Closed,
            "{id}"
        );
    }
    assert_eq!(m.read(anew).await.unwrap().unwrap(), content(anew, 2, size));
    assert_eq!(m.read(trimmed).await.unwrap(), None);
    assert_page(&m, moved, &content(moved, 1, size), 1).await;
    m.verify().unwrap();
    m.close().await.unwrap();
}

#[tokio::test]
async fn a_program_cut_short_keeps_what_came_before() {
    let dir = tempfile::tempdir().unwrap();
    let (m, weak) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
    let s = m.sector_size_bytes();
    let id = LogicalPage::new(5, 1);
    let want = content(id, 1, m.page_size());
    m.write_sectors(id, 0, want.slice(..s)).await.unwrap();
    m.write_sectors(id, 1, want.slice(s..2 * s)).await.unwrap();
    let (offset, path) = file_offset(&m, &weak, id);
    crash(m, weak).await;
    // As a crash mid-program leaves it: sector 1's bytes changed under its
    // codes.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&vec![0x5A; s / 2], offset + s as u64 + 100)
        .unwrap();
    drop(file);

    let (m, _) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
    // Still mapped: a strict read names the damage, a read in pieces gives
    // the sectors that hold and names the one that does not.
    let e = m.read(id).await.unwrap_err();
    assert!(e.to_string().contains("sector 1"), "{e}");
    let (page, damaged) = m.read_pieces(id).await.unwrap().expect("mapped");
    assert_eq!(damaged, vec![1]);
    assert_eq!(&page[..s], &want[..s]);
    assert!(page[2 * s..].iter().all(|&b| b == 0xFF));
    m.close().await.unwrap();
}

/// Where page `id` lies in the device's backing file.
fn file_offset(
    m: &SpaceManager,
    weak: &std::sync::Weak<quarry_device::Device>,
    id: LogicalPage,
) -> (u64, std::path::PathBuf) {
    let (addr, _) = m.locate(&[id]).unwrap().device_reads().next().unwrap();
    let device = weak.upgrade().unwrap();
    (
        device.page_offset_bytes(addr).unwrap(),
        device.backing_path().unwrap().to_path_buf(),
    )
}

// A log page rewritten from sector 0 (its records and a new one) is a new
// version holding what the old one held. A power loss may keep its spare
// area and lose its sectors; recovery must then keep the old version, or
// records acknowledged long before are lost (the power-loss test of the
// CLI found this).
#[tokio::test]
async fn a_new_version_whose_first_program_did_not_arrive_leaves_the_old_one() {
    let s = 1024;
    for lost in [0xFFu8, 0x00, 0x5A] {
        let dir = tempfile::tempdir().unwrap();
        let (m, weak) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
        assert_eq!(m.sector_size_bytes(), s);
        let id = LogicalPage::new(4, 2);
        let old = content(id, 1, m.page_size());
        m.write_sectors(id, 0, old.slice(..s)).await.unwrap();
        m.write_sectors(id, 1, old.slice(s..2 * s)).await.unwrap();
        let new = content(id, 2, m.page_size());
        m.write_sectors(id, 0, new.slice(..3 * s)).await.unwrap();
        assert_page(&m, id, &new, 3).await;
        let (offset, path) = file_offset(&m, &weak, id);
        crash(m, weak).await;
        // As a power loss leaves it: the spare area arrived, one of the
        // first program's sectors did not.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&vec![lost; s], offset + s as u64)
            .unwrap();
        drop(file);

        let (m, _) = open(BackendKind::File, sectored(), dir.path(), quiet()).await;
        assert_page(&m, id, &old, 2).await;
        m.verify().unwrap();
        m.close().await.unwrap();
    }
}

#[tokio::test]
async fn pages_left_behind_leave_room_for_the_next_ones_to_grow() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = open(BackendKind::Mem, sectored(), dir.path(), quiet()).await;
    let s = m.sector_size_bytes();
    let size = m.page_size();
    // Many pages written in pieces (once, the volume kept at most 256 open
    // and a page past that took no more): those left behind close as their
    // blocks move on, and the last still grows.
    let pages = 300u64;
    for i in 0..pages {
        let id = LogicalPage::new(6, i);
        let first = content(id, 1, size).slice(..s);
        assert_eq!(
            m.write_sectors(id, 0, first).await.unwrap(),
            SectorsWritten::Written
        );
    }
    let last = LogicalPage::new(6, pages - 1);
    let want = content(last, 1, size);
    assert_eq!(
        m.write_sectors(last, 1, want.slice(s..2 * s))
            .await
            .unwrap(),
        SectorsWritten::Written
    );
    assert_page(&m, last, &want, 2).await;
    // The first page's block has moved on: it takes no more.
    let first = LogicalPage::new(6, 0);
    assert_eq!(
        m.write_sectors(first, 1, content(first, 1, size).slice(s..2 * s))
            .await
            .unwrap(),
        SectorsWritten::Closed
    );
    m.verify().unwrap();
    m.close().await.unwrap();
}
