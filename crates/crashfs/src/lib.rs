//! `quarry-crashfs` — test-only: a file system that forgets what was not
//! synced, so a test can pull the power on a real process.
//!
//! A killed process loses nothing it wrote: its writes sit in the host's
//! page cache, which outlives it. A power loss loses every write the
//! program did not make durable, and that is the failure a storage system
//! must survive. This crate mounts a FUSE file system over a backing
//! directory that behaves like a disk behind a volatile cache (the idea of
//! LazyFS):
//!
//! - **File data and sizes** go to memory. `fsync`/`fdatasync` (also through
//!   io_uring) moves a file's unsynced pages and size into the backing file,
//!   which stands for the durable medium. `close` makes nothing durable.
//! - **Names** (create, mkdir, rename, unlink) go to the backing directory at
//!   once, as on a file system that journals them in order; `fsyncdir` is
//!   accepted. So this harness tests file data, not directory ordering.
//! - [`CrashFs::power_loss`] drops everything unsynced
//!   ([`PowerLoss::DropAll`]) or lets a seeded random part of it reach the
//!   backing file page by page, 4 KiB at a time ([`PowerLoss::KeepSome`]):
//!   writeback that ran in any order, tearing any write larger than a page.
//!   Handles opened before it fail from then on with `EIO`, so a request of
//!   the killed process still in the kernel cannot land after the crash.
//! - Every open is direct I/O (`O_DIRECT` works; the kernel caches no data),
//!   and attributes are never cached, so the restarted process sees exactly
//!   the durable state.
//!
//! Mount it, run the program under test with its data directory inside,
//! kill it with SIGKILL, call `power_loss`, start it again on the same
//! directory and check that everything it acknowledged is there.
//!
//! ```
//! # if !quarry_testkit::require_fuse() { return; }
//! use std::io::Write;
//! use quarry_crashfs::{CrashFs, PowerLoss};
//!
//! let backing = tempfile::tempdir().unwrap();
//! let mountpoint = tempfile::tempdir().unwrap();
//! let fs = CrashFs::mount(backing.path(), mountpoint.path()).unwrap();
//!
//! let mut synced = std::fs::File::create(mountpoint.path().join("synced")).unwrap();
//! synced.write_all(b"kept").unwrap();
//! synced.sync_data().unwrap();
//! drop(synced);
//! std::fs::write(mountpoint.path().join("unsynced"), b"lost").unwrap();
//!
//! let report = fs.power_loss(PowerLoss::DropAll).unwrap();
//! assert_eq!(report.files, 1);
//! assert_eq!(std::fs::read(mountpoint.path().join("synced")).unwrap(), b"kept");
//! // The name was made at once; its bytes were never synced.
//! assert_eq!(std::fs::read(mountpoint.path().join("unsynced")).unwrap(), b"");
//! fs.unmount().unwrap();
//! ```
#![deny(missing_docs)]

mod fs;
mod overlay;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{BackgroundSession, MountOption};

/// Unsynced bytes the file system holds at most by default; a write beyond
/// it fails with `ENOSPC` (the test's load outgrew the harness).
pub const DEFAULT_MAX_UNSYNCED_BYTES: u64 = 2 << 30;

/// What survives a power loss of the unsynced state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerLoss {
    /// Nothing unsynced reaches the medium.
    DropAll,
    /// Each unsynced 4 KiB page (and each file's size change) reaches the
    /// medium with probability `keep_per_mille`/1000, drawn from `seed`.
    KeepSome {
        /// Seeds the draw, so a failing round can be replayed.
        seed: u64,
        /// Out of 1000.
        keep_per_mille: u32,
    },
}

impl PowerLoss {
    /// The crash tests' schedule: round 0, 2, 4, ... lose everything
    /// unsynced; the odd rounds keep a half of it, seeded by the round (the
    /// torn, reordered writeback that a "lose it all" never shows).
    pub fn alternating(round: u64) -> PowerLoss {
        if round.is_multiple_of(2) {
            PowerLoss::DropAll
        } else {
            PowerLoss::KeepSome {
                seed: round,
                keep_per_mille: 500,
            }
        }
    }
}

/// What a power loss dropped and kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossReport {
    /// Files that held unsynced state.
    pub files: u64,
    /// Unsynced pages that never reached the medium.
    pub pages_dropped: u64,
    /// Unsynced pages that reached it anyway.
    pub pages_kept: u64,
    /// Files whose unsynced size change was lost.
    pub sizes_reverted: u64,
}

/// Why mounting or a power loss failed.
#[derive(Debug, thiserror::Error)]
pub enum CrashFsError {
    /// The backing directory or the mount point is not usable.
    #[error("{what} {path}: {source}")]
    Path {
        /// Which of the two.
        what: &'static str,
        /// The path given.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// FUSE refused the mount (is `/dev/fuse` there, and are we root?).
    #[error("mounting crashfs at {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// What fuser said.
        #[source]
        source: io::Error,
    },
    /// Unmounting failed (something still has a file open under it?).
    #[error("unmounting crashfs at {path}: {source}")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// What fuser said.
        #[source]
        source: io::Error,
    },
    /// Writing the surviving pages into the backing directory failed.
    #[error("applying a power loss under {path}: {source}")]
    PowerLoss {
        /// The backing directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// A mounted crash file system; dropping it unmounts.
pub struct CrashFs {
    session: Option<BackgroundSession>,
    shared: Arc<fs::Shared>,
    mountpoint: PathBuf,
    /// The backing directory and the mount point when this file system
    /// made them ([`CrashFs::mount_temporary`]); removed after unmounting.
    scratch: Option<[tempfile::TempDir; 2]>,
}

impl std::fmt::Debug for CrashFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashFs")
            .field("backing", &self.shared.backing)
            .field("mountpoint", &self.mountpoint)
            .finish_non_exhaustive()
    }
}

impl CrashFs {
    /// Mounts a crash file system over `backing` at `mountpoint` (both
    /// existing directories), holding at most
    /// [`DEFAULT_MAX_UNSYNCED_BYTES`] unsynced.
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<CrashFs, CrashFsError> {
        CrashFs::mount_with_limit(backing, mountpoint, DEFAULT_MAX_UNSYNCED_BYTES)
    }

    /// Mounts a crash file system over a new temporary directory at
    /// another; both are removed when it is unmounted or dropped.
    pub fn mount_temporary() -> Result<CrashFs, CrashFsError> {
        let temp = |what| {
            tempfile::tempdir().map_err(|source| CrashFsError::Path {
                what,
                path: std::env::temp_dir(),
                source,
            })
        };
        let (backing, mountpoint) = (temp("backing directory")?, temp("mount point")?);
        let mut fs = CrashFs::mount(backing.path(), mountpoint.path())?;
        fs.scratch = Some([backing, mountpoint]);
        Ok(fs)
    }

    /// [`CrashFs::mount`] with another bound on unsynced bytes.
    pub fn mount_with_limit(
        backing: &Path,
        mountpoint: &Path,
        max_unsynced_bytes: u64,
    ) -> Result<CrashFs, CrashFsError> {
        let canonical = |what, path: &Path| {
            path.canonicalize().map_err(|source| CrashFsError::Path {
                what,
                path: path.to_path_buf(),
                source,
            })
        };
        let backing = canonical("backing directory", backing)?;
        let mountpoint = canonical("mount point", mountpoint)?;
        let shared = Arc::new(fs::Shared::new(backing, max_unsynced_bytes));
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName("crashfs".to_string()),
            MountOption::DefaultPermissions,
            MountOption::NoAtime,
        ];
        config.n_threads = Some(2);
        let fs = fs::CrashFs {
            shared: Arc::clone(&shared),
        };
        let mount_error = |source| CrashFsError::Mount {
            path: mountpoint.clone(),
            source,
        };
        let session = fuser::Session::new(fs, &mountpoint, &config).map_err(mount_error)?;
        let session = session.spawn().map_err(mount_error)?;
        Ok(CrashFs {
            session: Some(session),
            shared,
            mountpoint,
            scratch: None,
        })
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The power goes out: what was not synced is lost as `loss` says, and
    /// handles opened before now fail with `EIO`. Call it once the
    /// processes using the mount are dead (reaped); the mount then serves
    /// the durable state, as a machine that booted again would.
    pub fn power_loss(&self, loss: PowerLoss) -> Result<LossReport, CrashFsError> {
        self.shared
            .power_loss(loss)
            .map_err(|source| CrashFsError::PowerLoss {
                path: self.shared.backing.clone(),
                source,
            })
    }

    /// Bytes written and not yet synced, held in memory.
    pub fn unsynced_bytes(&self) -> u64 {
        self.shared.unsynced_bytes()
    }

    /// `fsync`, `fdatasync` and `fsyncdir` calls seen so far.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs()
    }

    /// Unmounts and waits for the session to end.
    pub fn unmount(mut self) -> Result<(), CrashFsError> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<(), CrashFsError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let unmounted = session
            .umount_and_join()
            .map_err(|source| CrashFsError::Unmount {
                path: self.mountpoint.clone(),
                source,
            });
        if unmounted.is_ok() {
            // The temporary directories go only once nothing is mounted
            // on them (a busy mount keeps them for the test to see).
            self.scratch = None;
        } else if let Some(dirs) = self.scratch.take() {
            for dir in dirs {
                let _ = dir.keep();
            }
        }
        unmounted
    }
}

impl Drop for CrashFs {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            eprintln!("crashfs: {e}");
        }
    }
}
