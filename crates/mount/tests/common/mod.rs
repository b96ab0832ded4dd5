//! Helpers shared by the mount tests: a store, a mount in a temporary
//! directory, and the check that FUSE can be used here (a test fails
//! where it cannot).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quarry_mount::{mount, MountHandle, MountOptions};
use quarry_store::{mem_object_store, MemObjectStore};

/// Whether the test may go on: `/dev/fuse` opens, or the test fails
/// saying it does not (quarry_testkit; false only where a developer opted
/// out locally).
pub fn fuse_available() -> bool {
    quarry_testkit::require_fuse()
}

/// Logs to the test's output with `RUST_LOG` (e.g. `RUST_LOG=quarry_mount=debug`).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// An in-memory store over nodes 1-4, and the runtime it was made on
/// (kept alive for the test's length).
pub fn mem_store() -> (tokio::runtime::Runtime, Arc<MemObjectStore>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = rt
        .block_on(mem_object_store([1, 2, 3, 4]))
        .expect("in-memory store");
    (rt, Arc::new(store))
}

/// Options for tests: defaults with the spool in `spool`.
pub fn options(spool: &Path) -> MountOptions {
    MountOptions {
        spool_dir: spool.to_path_buf(),
        ..MountOptions::default()
    }
}

/// A mount point and spool directory under one temporary directory.
pub struct Dirs {
    pub root: tempfile::TempDir,
    pub mnt: PathBuf,
    pub spool: PathBuf,
}

pub fn dirs(mount_points: &[&str]) -> Dirs {
    let root = tempfile::tempdir().expect("tempdir");
    let spool = root.path().join("spool");
    std::fs::create_dir(&spool).expect("spool dir");
    for m in mount_points {
        std::fs::create_dir(root.path().join(m)).expect("mount point");
    }
    let mnt = root
        .path()
        .join(mount_points.first().copied().unwrap_or("mnt"));
    Dirs { root, mnt, spool }
}

pub fn mount_with(store: &Arc<MemObjectStore>, dir: &Path, options: MountOptions) -> MountHandle {
    mount(Arc::clone(store), None, dir, options).expect("mount")
}

/// Runs a shell command, panicking with its output if it fails.
pub fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `len` pseudo-random bytes from `seed` (splitmix64).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut z = seed;
    while out.len() < len {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(x ^ (x >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Waits out the attribute TTL of another mount.
pub fn wait_ttl(options: &MountOptions) {
    std::thread::sleep(options.attr_ttl + Duration::from_millis(100));
}
