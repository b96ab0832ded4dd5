//! Mounting: a background FUSE session whose handle unmounts when dropped,
//! and a blocking variant that runs until SIGINT or SIGTERM.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{BackgroundSession, MountOption};
use tokio::signal::unix::{signal, SignalKind};

use crate::backend::ObjectBackend;
use crate::error::{MountError, Result};
use crate::fs::Mount;
use crate::kernel_files::KernelRunner;
use crate::options::MountOptions;

/// A mounted file system. Dropping it unmounts (as [`MountHandle::unmount`]
/// does, logging a failure instead of returning it).
#[derive(Debug)]
pub struct MountHandle {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
}

/// Mounts `backend` at `dir` and serves it from background threads until
/// the returned handle is dropped or [`MountHandle::unmount`] is called.
/// With a `kernels` runner, `dir/.quarry` holds its kernel files.
///
/// Needs `/dev/fuse` (and, for a user other than root, `fusermount3`).
/// Call it from a plain thread, not from inside an async task: it waits
/// for the kernel's handshake.
pub fn mount<B: ObjectBackend>(
    backend: Arc<B>,
    kernels: Option<Arc<dyn KernelRunner>>,
    dir: impl AsRef<Path>,
    options: MountOptions,
) -> Result<MountHandle> {
    let dir = dir.as_ref();
    let mountpoint = dir.canonicalize().map_err(|e| MountError::MountPoint {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    if !mountpoint.is_dir() {
        return Err(MountError::MountPoint {
            path: mountpoint,
            reason: "not a directory".to_string(),
        });
    }
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(options.fs_name.clone()),
        MountOption::Subtype("quarry".to_string()),
        // The kernel checks modes itself, so `access` needs no round trip.
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    config.n_threads = Some(options.fuse_threads);
    let fs = Mount::new(backend, options)?.with_kernels(kernels);
    let notifier = Arc::clone(&fs.notifier);
    let session =
        fuser::Session::new(fs, &mountpoint, &config).map_err(|source| MountError::Mount {
            path: mountpoint.clone(),
            source,
        })?;
    // The slot is fresh, so this cannot find it set.
    let _ = notifier.set(session.notifier());
    let session = session.spawn().map_err(|source| MountError::Mount {
        path: mountpoint.clone(),
        source,
    })?;
    tracing::info!(mountpoint = %mountpoint.display(), "mounted");
    Ok(MountHandle {
        session: Some(session),
        mountpoint,
    })
}

impl MountHandle {
    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the session still serves requests (it ends when the file
    /// system is unmounted, from here or from outside).
    pub fn is_running(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| !s.guard.is_finished())
    }

    /// Unmounts and waits for the session to end (after it has uploaded
    /// whatever an open file still had dirty). A busy mount point (a file
    /// open, a shell inside) is detached lazily instead and the error
    /// says so.
    pub fn unmount(mut self) -> Result<()> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        // fuser unmounts (directly as root, else through `fusermount3 -u`)
        // and joins the session thread, exactly once.
        let Err(err) = session.umount_and_join() else {
            tracing::info!(mountpoint = %self.mountpoint.display(), "unmounted");
            return Ok(());
        };
        match err.raw_os_error() {
            // Unmounted from outside already; the session thread has ended
            // or is ending by itself.
            Some(libc::EINVAL) => Ok(()),
            Some(libc::EBUSY) => {
                self.detach_lazily();
                Err(MountError::Unmount {
                    path: self.mountpoint.clone(),
                    source: err,
                })
            }
            _ => Err(MountError::Session {
                path: self.mountpoint.clone(),
                source: err,
            }),
        }
    }

    /// Detaches a busy mount (`MNT_DETACH`): gone from the namespace now,
    /// and its session ends when the last file under it is closed.
    fn detach_lazily(&self) {
        let detached = CString::new(self.mountpoint.as_os_str().as_bytes())
            .ok()
            // SAFETY: a valid NUL-terminated path that outlives the call.
            .is_some_and(|path| unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0);
        if !detached {
            // Not root: the setuid helper can do it.
            let status = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.mountpoint)
                .status();
            if !status.is_ok_and(|s| s.success()) {
                tracing::warn!(mountpoint = %self.mountpoint.display(), "could not detach a busy mount");
            }
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::warn!(error = %e, "unmount on drop");
        }
    }
}

/// Mounts `backend` at `dir` and blocks until SIGINT or SIGTERM arrives,
/// or until the file system is unmounted from outside; then unmounts.
/// For command-line tools.
pub fn run_until_signal<B: ObjectBackend>(
    backend: Arc<B>,
    kernels: Option<Arc<dyn KernelRunner>>,
    dir: impl AsRef<Path>,
    options: MountOptions,
) -> Result<()> {
    let handle = mount(backend, kernels, dir, options)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(MountError::Runtime)?;
    let outside = rt
        .block_on(async {
            let mut term = signal(SignalKind::terminate())?;
            let mut int = signal(SignalKind::interrupt())?;
            // Polled: the session thread has no async way to say it ended.
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tokio::select! {
                    _ = term.recv() => return Ok::<_, std::io::Error>(false),
                    _ = int.recv() => return Ok(false),
                    _ = tick.tick() => if !handle.is_running() { return Ok(true) },
                }
            }
        })
        .map_err(MountError::Runtime)?;
    if outside {
        tracing::info!(mountpoint = %handle.mountpoint().display(), "unmounted from outside");
    } else {
        tracing::info!(mountpoint = %handle.mountpoint().display(), "signal received, unmounting");
    }
    handle.unmount()
}
