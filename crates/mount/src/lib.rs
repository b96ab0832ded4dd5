//! `quarry-mount` — the FUSE face of the object store.
//!
//! This crate owns the file-system view of objects: buckets are the
//! top-level directories, objects are files, and keys read as
//! `/`-separated paths (`photos/2024/cat.jpg` is file `cat.jpg` in
//! directory `2024` of bucket directory `photos`). It owns the inode
//! numbers, the per-open-file read-ahead pinned to the version seen at
//! open, the local write spool that becomes a new object version on close
//! or fsync, directories (implicit in keys, or kept by a hidden
//! [`DIR_MARKER`] object when made empty by `mkdir`), renames (copy, then
//! delete), and the errno each store error becomes. It does not own the
//! store: it talks to it through [`ObjectBackend`], implemented here for
//! `quarry_store_api::ObjectStore`. Given a [`KernelRunner`], it also shows
//! BlueDBM's virtual files: `.quarry/KERNEL/input` takes a kernel's
//! arguments and reading `.quarry/KERNEL/output` runs it near the data.
//! `docs/mount.md` has the semantics and limits.
//!
//! ```no_run
//! use std::sync::Arc;
//! use quarry_mount::{mount, MountOptions};
//! use quarry_store::mem_object_store;
//!
//! let rt = tokio::runtime::Runtime::new()?;
//! let store = Arc::new(rt.block_on(mem_object_store([1, 2, 3, 4]))?);
//! let handle = mount(store, None, "/mnt/quarry", MountOptions::default())?;
//!
//! std::fs::create_dir("/mnt/quarry/photos")?; // a new bucket
//! std::fs::create_dir_all("/mnt/quarry/photos/2024")?; // kept by a marker object
//! std::fs::write("/mnt/quarry/photos/2024/cat.jpg", b"meow")?; // object photos/2024/cat.jpg
//! assert_eq!(std::fs::read("/mnt/quarry/photos/2024/cat.jpg")?, b"meow");
//!
//! handle.unmount()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod backend;
mod dirs;
mod error;
mod files;
mod fs;
mod inode;
mod kernel_files;
mod options;
mod session;
mod stream;

pub use backend::{ObjectBackend, ObjectMeta};
pub use error::{MountError, Result};
pub use fs::{Mount, DIR_MARKER};
pub use kernel_files::{
    KernelFuture, KernelRunner, MAX_INPUT_BYTES, MAX_KERNELS, MAX_OUTPUT_BYTES, QUARRY_DIR,
};
pub use options::{ConflictPolicy, MountOptions};
pub use session::{mount, run_until_signal, MountHandle};
