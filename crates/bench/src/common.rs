//! What the benchmarks share besides arithmetic: where they work, the data
//! they store, and running fio, the peer most of them are measured against.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A temporary directory removed on drop (the benchmarks have no tempfile
/// dependency outside their tests).
pub(crate) struct TempDir {
    pub(crate) path: PathBuf,
}

/// `size_bytes` of seeded pseudo-random bytes, 1 MiB at a time: the data
/// the storage benchmarks put (the same on every run, and incompressible).
pub(crate) struct RandomBytes {
    rng: rand::rngs::StdRng,
    block: Vec<u8>,
    left: u64,
}

impl RandomBytes {
    pub(crate) fn new(size_bytes: u64) -> RandomBytes {
        use rand::SeedableRng;
        RandomBytes {
            rng: rand::rngs::StdRng::seed_from_u64(0x9e37_79b9_7f4a_7c15),
            block: vec![0u8; 1 << 20],
            left: size_bytes,
        }
    }

    /// The next block, `None` once `size_bytes` have been given.
    pub(crate) fn next_block(&mut self) -> Option<&[u8]> {
        use rand::RngCore;
        if self.left == 0 {
            return None;
        }
        let n = self.left.min(self.block.len() as u64) as usize;
        self.rng.fill_bytes(&mut self.block[..n]);
        self.left -= n as u64;
        Some(&self.block[..n])
    }
}

/// The directory a benchmark works in: `dir` when given (created), else a
/// temporary one removed when the returned guard drops.
pub(crate) fn work_dir(
    dir: Option<&std::path::Path>,
    prefix: &str,
) -> Result<(PathBuf, Option<TempDir>)> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            Ok((d.to_path_buf(), None))
        }
        None => {
            let t = TempDir::new(prefix)?;
            Ok((t.path.clone(), Some(t)))
        }
    }
}

impl TempDir {
    /// `$TMPDIR/{prefix}-{pid}`, created.
    pub(crate) fn new(prefix: &str) -> Result<TempDir> {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Runs fio with `args` and JSON output; fails with what fio said when it
/// fails, and with how to install it when it is missing.
pub(crate) fn fio_json(args: &[String]) -> Result<serde_json::Value> {
    let output = Command::new("fio")
        .args(args)
        .arg("--output-format=json")
        .output()
        .context("cannot run fio (install it: apt-get install fio)")?;
    if !output.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("fio printed no JSON")
}

/// Counts and drops what is written to it: the sink of a timed get.
#[derive(Default)]
pub(crate) struct CountingSink {
    /// Bytes written so far.
    pub bytes: u64,
}

impl tokio::io::AsyncWrite for CountingSink {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.bytes += buf.len() as u64;
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// CPU time of a process in clock ticks (0 if it cannot be read): its
/// user and system time and that of the children it has waited for, so
/// work a server forks off (Redis rewrites its append-only file in a child)
/// is counted once the child is done.
pub(crate) fn process_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the parenthesised name: state is the first, then utime,
    // stime, cutime and cstime are the 12th to the 15th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12) + field(13) + field(14)
}

/// Clock ticks a second, the unit of [`process_ticks`].
pub(crate) fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    hz.max(1) as f64
}
