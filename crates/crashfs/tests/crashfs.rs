//! The harness must itself be right before a durability test can trust it:
//! what was synced survives every power loss, what was not is gone after
//! `DropAll`, `KeepSome` keeps a part, and a handle of the dead process
//! cannot write after the crash.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use quarry_crashfs::{CrashFs, PowerLoss};

struct Mounted {
    _backing: tempfile::TempDir,
    _mountpoint: tempfile::TempDir,
    fs: CrashFs,
}

fn mounted() -> Option<Mounted> {
    if !quarry_testkit::require_fuse() {
        return None;
    }
    let backing = tempfile::tempdir().unwrap();
    let mountpoint = tempfile::tempdir().unwrap();
    let fs = CrashFs::mount(backing.path(), mountpoint.path()).expect("mount crashfs");
    Some(Mounted {
        _backing: backing,
        _mountpoint: mountpoint,
        fs,
    })
}

/// A 4 KiB-aligned buffer for O_DIRECT.
struct Aligned(Vec<u8>, usize);

impl Aligned {
    fn filled(len: usize, byte: u8) -> Aligned {
        let mut v = vec![byte; len + 4096];
        let skip = v.as_ptr().align_offset(4096);
        v.truncate(skip + len);
        Aligned(v, skip)
    }
    fn bytes(&self) -> &[u8] {
        &self.0[self.1..]
    }
}

#[test]
fn synced_data_survives_and_unsynced_data_is_dropped() {
    let Some(m) = mounted() else { return };
    let dir = m.fs.mountpoint().to_path_buf();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let path = dir.join("sub/data");
    let mut f = File::create(&path).unwrap();
    f.write_all(&[1u8; 10_000]).unwrap();
    f.sync_data().unwrap();
    // Overwrite part, grow, and do not sync.
    f.write_all_at(&[2u8; 100], 5000).unwrap();
    f.write_all_at(&[3u8; 100], 20_000).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 20_100);
    assert!(m.fs.unsynced_bytes() > 0);
    drop(f);
    let report = m.fs.power_loss(PowerLoss::DropAll).unwrap();
    assert_eq!(report.files, 1);
    assert_eq!(report.pages_kept, 0);
    assert_eq!(report.sizes_reverted, 1);
    assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 10_000]);
    assert_eq!(m.fs.unsynced_bytes(), 0);
}

#[test]
fn o_direct_writes_work_and_need_a_sync_like_any_other() {
    let Some(m) = mounted() else { return };
    let path = m.fs.mountpoint().join("direct");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("O_DIRECT open on crashfs");
    f.set_len(64 * 1024).unwrap();
    let page = Aligned::filled(8192, 7);
    f.write_all_at(page.bytes(), 8192).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(Aligned::filled(8192, 9).bytes(), 16_384)
        .unwrap();
    drop(f);
    m.fs.power_loss(PowerLoss::DropAll).unwrap();
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got.len(), 64 * 1024, "the size was synced with the data");
    assert!(got[8192..16_384].iter().all(|&b| b == 7));
    assert!(
        got[16_384..24_576].iter().all(|&b| b == 0),
        "the unsynced page is gone"
    );
}

#[test]
fn keep_some_keeps_a_seeded_part_page_by_page() {
    let Some(m) = mounted() else { return };
    let path = m.fs.mountpoint().join("torn");
    let f = File::create(&path).unwrap();
    f.set_len(256 * 4096).unwrap();
    f.sync_all().unwrap();
    f.write_all_at(&vec![5u8; 256 * 4096], 0).unwrap();
    drop(f);
    let report =
        m.fs.power_loss(PowerLoss::KeepSome {
            seed: 11,
            keep_per_mille: 500,
        })
        .unwrap();
    assert_eq!(report.pages_kept + report.pages_dropped, 256);
    let got = std::fs::read(&path).unwrap();
    let kept = got
        .chunks(4096)
        .filter(|p| p.iter().all(|&b| b == 5))
        .count();
    let dropped = got
        .chunks(4096)
        .filter(|p| p.iter().all(|&b| b == 0))
        .count();
    assert_eq!(kept as u64, report.pages_kept);
    assert_eq!(kept + dropped, 256, "every page is whole: old or new");
    assert!(kept > 64 && dropped > 64, "about half of each: {kept} kept");
}

#[test]
fn a_handle_from_before_the_power_loss_cannot_write_after_it() {
    let Some(m) = mounted() else { return };
    let path = m.fs.mountpoint().join("stale");
    let f = File::create(&path).unwrap();
    m.fs.power_loss(PowerLoss::DropAll).unwrap();
    let err = f.write_all_at(b"late", 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"");
}

#[test]
fn an_atomic_replace_keeps_old_or_new_and_renames_follow_the_inode() {
    let Some(m) = mounted() else { return };
    let dir = m.fs.mountpoint().to_path_buf();
    std::fs::write(dir.join("meta"), b"old").unwrap();
    File::open(dir.join("meta")).unwrap().sync_all().unwrap();
    // The right way: write, fsync, rename.
    let mut tmp = File::create(dir.join("meta.tmp")).unwrap();
    tmp.write_all(b"new").unwrap();
    tmp.sync_all().unwrap();
    drop(tmp);
    std::fs::rename(dir.join("meta.tmp"), dir.join("meta")).unwrap();
    // The wrong way: rename without the fsync loses the bytes.
    std::fs::write(dir.join("other.tmp"), b"unsynced").unwrap();
    std::fs::rename(dir.join("other.tmp"), dir.join("other")).unwrap();
    assert_eq!(std::fs::read(dir.join("other")).unwrap(), b"unsynced");
    m.fs.power_loss(PowerLoss::DropAll).unwrap();
    assert_eq!(std::fs::read(dir.join("meta")).unwrap(), b"new");
    assert_eq!(std::fs::read(dir.join("other")).unwrap(), b"");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.contains(&"meta".to_string()) && !names.contains(&"meta.tmp".to_string()));
}

#[test]
fn punched_holes_and_truncates_are_volatile_too() {
    let Some(m) = mounted() else { return };
    let path = m.fs.mountpoint().join("holes");
    let f = File::create(&path).unwrap();
    f.write_all_at(&[4u8; 3 * 4096], 0).unwrap();
    f.sync_all().unwrap();
    // SAFETY: fallocate(2) on an open descriptor we own; no memory passed.
    let rc = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            4096,
            4096,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let now = std::fs::read(&path).unwrap();
    assert!(now[4096..8192].iter().all(|&b| b == 0));
    f.set_len(100).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    drop(f);
    m.fs.power_loss(PowerLoss::DropAll).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), vec![4u8; 3 * 4096]);
}

#[test]
fn a_write_past_the_memory_bound_is_refused_whole() {
    if !quarry_testkit::require_fuse() {
        return;
    }
    let backing = tempfile::tempdir().unwrap();
    let mountpoint = tempfile::tempdir().unwrap();
    let fs = CrashFs::mount_with_limit(backing.path(), mountpoint.path(), 64 * 1024).unwrap();
    let path = fs.mountpoint().join("big");
    let f = File::create(&path).unwrap();
    f.write_all_at(&[1u8; 16 * 1024], 0).unwrap();
    let err = f.write_all_at(&[2u8; 128 * 1024], 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    // Nothing of the refused write is visible; a sync makes room again.
    assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 16 * 1024]);
    f.sync_all().unwrap();
    assert_eq!(fs.unsynced_bytes(), 0);
    drop(f);
    fs.unmount().unwrap();
}
