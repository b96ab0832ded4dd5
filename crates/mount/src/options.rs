//! What a mount can be told, with defaults and the bounds each setting is
//! checked against before anything is mounted.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{MountError, Result};

/// What happens when a file written through the mount was replaced by
/// someone else (another mount, another client) since this mount read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConflictPolicy {
    /// Upload unconditionally: the last writer to close or fsync wins, as on
    /// a local file system shared by two programs that do not lock. The
    /// default, because it is what programs written for local files expect.
    #[default]
    LastWriterWins,
    /// Upload only if the object is still the version the spool was filled
    /// from (or still absent, for a new file): a writer whose base was
    /// replaced gets `ESTALE` from `close`/`fsync` and its bytes are not
    /// stored.
    FailOnConflict,
}

/// Settings of one mount. [`MountOptions::default`] is a sensible start;
/// [`MountOptions::validate`] (called by [`crate::mount`]) names the first
/// setting outside its bounds.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Largest file the mount will spool or upload; a write, truncate or
    /// open for writing beyond it fails with `EFBIG`. Default 4 GiB, bounds
    /// 1 MiB ..= 1 TiB.
    pub max_object_size_bytes: u64,
    /// Read-ahead window of a sequential reader, and the size up to which a
    /// file is read whole at its first read (so a reader keeps that version
    /// for the life of its handle). A sequential reader's handle holds at
    /// most eight windows (the one it reads and seven fetched ahead).
    /// Default 4 MiB (8 and 16 MiB measured no faster here), bounds
    /// 64 KiB ..= 64 MiB.
    pub read_ahead_bytes: u64,
    /// How long the kernel may cache attributes and names. Short, so that
    /// another mount's closed files show up: default 1 s, at most 60 s;
    /// zero disables caching.
    pub attr_ttl: Duration,
    /// Where write spools (unlinked temporary files) live. Default: the
    /// system's temporary directory.
    pub spool_dir: PathBuf,
    /// Most inodes the mount keeps (names the kernel holds, open files);
    /// a lookup beyond fails with `ENFILE`. Default 1 Mi, bounds 1 Ki ..= 64 Mi.
    pub max_inodes: usize,
    /// Most open file and directory handles at once; an open beyond fails
    /// with `ENFILE`. Default 4096, bounds 16 ..= 1 Mi.
    pub max_open_handles: usize,
    /// Most entries one directory listing may hold; a larger directory
    /// fails `readdir` with `EIO` and a log line naming the limit.
    /// Default 200 000, bounds 1000 ..= 10 000 000.
    pub max_dir_entries: usize,
    /// Most objects one directory rename may move (a rename copies every
    /// object under the directory); a larger one fails with `EXDEV`, which
    /// makes `mv` fall back to copying file by file. Default 10 000, bounds
    /// 1 ..= 1 000 000.
    pub max_rename_objects: usize,
    /// What to do on a write conflict (see [`ConflictPolicy`]).
    pub conflict: ConflictPolicy,
    /// FUSE request threads. Default 2, bounds 1 ..= 64.
    pub fuse_threads: usize,
    /// The runtime that drives the backend's futures. `None`: the mount
    /// starts its own (two worker threads), which is right for in-process
    /// stores; pass the client's runtime when its connections live there.
    pub runtime: Option<tokio::runtime::Handle>,
    /// The source name shown in `/proc/mounts`. Default `quarry`.
    pub fs_name: String,
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            max_object_size_bytes: 4 << 30,
            read_ahead_bytes: 4 << 20,
            attr_ttl: Duration::from_secs(1),
            spool_dir: std::env::temp_dir(),
            max_inodes: 1 << 20,
            max_open_handles: 4096,
            max_dir_entries: 200_000,
            max_rename_objects: 10_000,
            conflict: ConflictPolicy::default(),
            fuse_threads: 2,
            runtime: None,
            fs_name: "quarry".to_string(),
        }
    }
}

fn check<T: PartialOrd + std::fmt::Debug>(
    name: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<()> {
    if value < min || value > max {
        return Err(MountError::InvalidOption {
            name,
            reason: format!("{value:?} is outside {min:?} ..= {max:?}"),
        });
    }
    Ok(())
}

impl MountOptions {
    /// Checks every setting against its bounds (and that the spool
    /// directory is a directory), naming the first one that is not.
    pub fn validate(&self) -> Result<()> {
        check(
            "max_object_size_bytes",
            self.max_object_size_bytes,
            1 << 20,
            1 << 40,
        )?;
        check(
            "read_ahead_bytes",
            self.read_ahead_bytes,
            64 << 10,
            64 << 20,
        )?;
        check(
            "attr_ttl",
            self.attr_ttl,
            Duration::ZERO,
            Duration::from_secs(60),
        )?;
        check("max_inodes", self.max_inodes, 1 << 10, 64 << 20)?;
        check("max_open_handles", self.max_open_handles, 16, 1 << 20)?;
        check("max_dir_entries", self.max_dir_entries, 1000, 10_000_000)?;
        check("max_rename_objects", self.max_rename_objects, 1, 1_000_000)?;
        check("fuse_threads", self.fuse_threads, 1, 64)?;
        if self.fs_name.is_empty() || self.fs_name.contains([',', '\0', ' ']) {
            return Err(MountError::InvalidOption {
                name: "fs_name",
                reason: format!(
                    "{:?} must be non-empty, without ',', ' ' or NUL",
                    self.fs_name
                ),
            });
        }
        if !self.spool_dir.is_dir() {
            return Err(MountError::InvalidOption {
                name: "spool_dir",
                reason: format!("{} is not a directory", self.spool_dir.display()),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_each_bound_is_named() {
        MountOptions::default().validate().unwrap();
        let small = MountOptions {
            read_ahead_bytes: 4096,
            ..MountOptions::default()
        };
        let e = small.validate().unwrap_err().to_string();
        assert!(e.contains("read_ahead_bytes") && e.contains("4096"), "{e}");
        let threads = MountOptions {
            fuse_threads: 0,
            ..MountOptions::default()
        };
        assert!(threads
            .validate()
            .unwrap_err()
            .to_string()
            .contains("fuse_threads"));
        let spool = MountOptions {
            spool_dir: "/nonexistent/quarry-spool".into(),
            ..MountOptions::default()
        };
        assert!(spool
            .validate()
            .unwrap_err()
            .to_string()
            .contains("spool_dir"));
    }
}
