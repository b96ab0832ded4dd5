//! `.quarry/`: BlueDBM's virtual files (§5.2). Each kernel a
//! [`KernelRunner`] offers is a directory `.quarry/KERNEL/` holding
//! `input` (its arguments and targets, written by the user), `output`
//! (reading it runs the kernel near the data) and `error` (why the last run
//! failed). None of it is in the store: the nodes have fixed inode numbers
//! below every hashed one, and the state lives in this mount only.
//!
//! The split with the runner: the mount only moves bytes — it keeps each
//! kernel's input, hands it over whole, and serves the answer. Parsing the
//! arguments, resolving the targets and formatting the answer live with
//! the runner (the command line), next to `quarry run`'s parser and
//! `quarry grep`'s GNU formatting, so one place knows each kernel; the
//! mount thus depends on neither the client nor the kernels crate.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, OpenFlags};

use crate::error::FsResult;
use crate::fs::lock;
use crate::inode::{Ino, Kind, ROOT};

/// The name of the virtual directory at the mount's root. Not a valid
/// bucket name (buckets cannot start with a dot), so it never hides one.
pub const QUARRY_DIR: &str = ".quarry";

/// Largest `input` file: arguments and a list of targets, not data.
pub const MAX_INPUT_BYTES: usize = 64 << 10;

/// Largest answer an `output` file serves (the kernels' default result
/// limit); a larger one fails the read with `EIO`.
pub const MAX_OUTPUT_BYTES: usize = 64 << 20;

/// Most kernel directories (the reserved inode numbers hold this many).
pub const MAX_KERNELS: usize = 64;

/// Most `output` handles open at once across the mount: each may hold an
/// answer of up to [`MAX_OUTPUT_BYTES`] until it is closed.
const MAX_OUTPUT_HANDLES: usize = 16;

/// Longest reason kept in an `error` file.
const MAX_ERROR_BYTES: usize = 4096;

/// Inode numbers below this are the virtual nodes'; hashed ones start here.
pub(crate) const FIRST_HASHED_INO: Ino = 1024;
const VIRT_ROOT: Ino = 2;
const FIRST_KERNEL_INO: Ino = 16;
/// Inode numbers per kernel: its directory, `input`, `output`, `error`.
const INOS_PER_KERNEL: Ino = 4;

/// What [`KernelRunner::run`] returns: the formatted answer, or why not.
pub type KernelFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>>;

/// Runs kernels near the data for the `.quarry` files. A trait object
/// (hence the boxed future), so a mount without one needs no type for it.
pub trait KernelRunner: Send + Sync + 'static {
    /// The kernels, one directory each under `.quarry` (names without `/`;
    /// at most [`MAX_KERNELS`], further ones are left out).
    fn kernels(&self) -> Vec<String>;

    /// Runs `kernel` with what was written to its `input` (up to
    /// [`MAX_INPUT_BYTES`]) and returns the bytes `output` reads as (up to
    /// [`MAX_OUTPUT_BYTES`]); an error's text goes to the log and to the
    /// kernel's `error` file, and the read fails with `EIO`.
    fn run<'a>(&'a self, kernel: &'a str, input: &'a [u8]) -> KernelFuture<'a>;
}

/// A virtual node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VNode {
    /// `.quarry` itself.
    Root,
    /// `.quarry/KERNEL`.
    Dir(usize),
    /// `.quarry/KERNEL/input`.
    Input(usize),
    /// `.quarry/KERNEL/output`.
    Output(usize),
    /// `.quarry/KERNEL/error`.
    Error(usize),
}

const FILES: [&str; 3] = ["input", "output", "error"];

/// One kernel's state in this mount.
#[derive(Default)]
struct KernelState {
    /// `None` until `input` is first opened for writing.
    input: Option<Vec<u8>>,
    input_mtime: Option<SystemTime>,
    /// Why the last run failed (empty after a successful one).
    error: String,
    error_mtime: Option<SystemTime>,
}

/// An open `output`: the answer of the run its first read made.
type Answer = Arc<Mutex<Option<Arc<Vec<u8>>>>>;

/// The `.quarry` tree of one mount.
pub(crate) struct KernelFiles {
    runner: Arc<dyn KernelRunner>,
    names: Vec<String>,
    states: Vec<Mutex<KernelState>>,
    outputs: Mutex<(u64, HashMap<u64, Answer>)>,
}

impl KernelFiles {
    pub(crate) fn new(runner: Arc<dyn KernelRunner>) -> Self {
        let mut names: Vec<String> = Vec::new();
        for name in runner.kernels() {
            let usable = !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains('/')
                && !name.contains('\0')
                && !names.contains(&name);
            if !usable {
                tracing::warn!(kernel = %name, "kernel name unusable as a directory; left out of .quarry");
                continue;
            }
            if names.len() == MAX_KERNELS {
                tracing::warn!(
                    max = MAX_KERNELS,
                    "more kernels than .quarry holds; the rest are left out"
                );
                break;
            }
            names.push(name);
        }
        let states = names.iter().map(|_| Mutex::default()).collect();
        Self {
            runner,
            names,
            states,
            outputs: Mutex::new((1, HashMap::new())),
        }
    }

    /// The virtual node `ino` is, if any.
    pub(crate) fn node(&self, ino: Ino) -> Option<VNode> {
        if ino == VIRT_ROOT {
            return Some(VNode::Root);
        }
        let rel = ino.checked_sub(FIRST_KERNEL_INO)?;
        let k = usize::try_from(rel / INOS_PER_KERNEL).ok()?;
        if k >= self.names.len() {
            return None;
        }
        Some(match rel % INOS_PER_KERNEL {
            0 => VNode::Dir(k),
            1 => VNode::Input(k),
            2 => VNode::Output(k),
            _ => VNode::Error(k),
        })
    }

    pub(crate) fn ino(node: VNode) -> Ino {
        let at = |k: usize, i: Ino| FIRST_KERNEL_INO + k as Ino * INOS_PER_KERNEL + i;
        match node {
            VNode::Root => VIRT_ROOT,
            VNode::Dir(k) => at(k, 0),
            VNode::Input(k) => at(k, 1),
            VNode::Output(k) => at(k, 2),
            VNode::Error(k) => at(k, 3),
        }
    }

    /// `name` inside the virtual directory `parent`.
    pub(crate) fn lookup(&self, parent: VNode, name: &str) -> FsResult<VNode> {
        match parent {
            VNode::Root => self
                .names
                .iter()
                .position(|n| n == name)
                .map(VNode::Dir)
                .ok_or(Errno::ENOENT),
            VNode::Dir(k) => match name {
                "input" => Ok(VNode::Input(k)),
                "output" => Ok(VNode::Output(k)),
                "error" => Ok(VNode::Error(k)),
                _ => Err(Errno::ENOENT),
            },
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// The entries of a virtual directory, `.` and `..` first.
    pub(crate) fn list(&self, dir: VNode) -> FsResult<Vec<(Ino, Kind, String)>> {
        let this = Self::ino(dir);
        let mut out = Vec::new();
        match dir {
            VNode::Root => {
                out.push((this, Kind::Dir, ".".to_string()));
                out.push((ROOT, Kind::Dir, "..".to_string()));
                for (k, name) in self.names.iter().enumerate() {
                    out.push((Self::ino(VNode::Dir(k)), Kind::Dir, name.clone()));
                }
            }
            VNode::Dir(_) => {
                out.push((this, Kind::Dir, ".".to_string()));
                out.push((VIRT_ROOT, Kind::Dir, "..".to_string()));
                for name in FILES {
                    let node = self.lookup(dir, name)?;
                    out.push((Self::ino(node), Kind::File, name.to_string()));
                }
            }
            _ => return Err(Errno::ENOTDIR),
        }
        Ok(out)
    }

    /// Attributes: directories read-only, `input` writable, `output` and
    /// `error` read-only. `output`'s size is 0: it is not known until it
    /// is read (direct I/O makes the kernel ask anyway).
    pub(crate) fn attr(&self, node: VNode, uid: u32, gid: u32, started: SystemTime) -> FileAttr {
        let (kind, perm, size, mtime) = match node {
            VNode::Root | VNode::Dir(_) => (FileType::Directory, 0o555, 0, started),
            VNode::Input(k) => {
                let s = lock(&self.states[k]);
                let size = s.input.as_ref().map_or(0, Vec::len) as u64;
                (
                    FileType::RegularFile,
                    0o644,
                    size,
                    s.input_mtime.unwrap_or(started),
                )
            }
            VNode::Output(_) => (FileType::RegularFile, 0o444, 0, SystemTime::now()),
            VNode::Error(k) => {
                let s = lock(&self.states[k]);
                (
                    FileType::RegularFile,
                    0o444,
                    s.error.len() as u64,
                    s.error_mtime.unwrap_or(started),
                )
            }
        };
        FileAttr {
            ino: INodeNo(Self::ino(node)),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Opens a virtual file; returns the handle number. Only `input` may be
    /// written (the kernel's mode checks do not stop root, so this does).
    pub(crate) fn open(&self, node: VNode, flags: OpenFlags) -> FsResult<u64> {
        let writes = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
        match node {
            VNode::Root | VNode::Dir(_) => Err(Errno::EISDIR),
            VNode::Input(k) => {
                if writes {
                    let mut s = lock(&self.states[k]);
                    let input = s.input.get_or_insert_with(Vec::new);
                    if flags.0 & libc::O_TRUNC != 0 {
                        input.clear();
                        s.input_mtime = Some(SystemTime::now());
                    }
                }
                Ok(0)
            }
            VNode::Error(_) if !writes => Ok(0),
            VNode::Output(_) if !writes => {
                let mut outputs = lock(&self.outputs);
                if outputs.1.len() >= MAX_OUTPUT_HANDLES {
                    tracing::warn!(
                        max = MAX_OUTPUT_HANDLES,
                        "too many .quarry output files open"
                    );
                    return Err(Errno::ENFILE);
                }
                let fh = outputs.0;
                outputs.0 += 1;
                outputs.1.insert(fh, Arc::default());
                Ok(fh)
            }
            VNode::Output(_) | VNode::Error(_) => Err(Errno::EACCES),
        }
    }

    pub(crate) fn release(&self, node: VNode, fh: u64) {
        if let VNode::Output(_) = node {
            lock(&self.outputs).1.remove(&fh);
        }
    }

    /// Bytes `offset .. offset + size` of a virtual file. The first read of
    /// an `output` handle runs the kernel (blocking this FUSE thread while
    /// it runs); later reads of that handle serve the same answer.
    pub(crate) fn read(
        &self,
        node: VNode,
        fh: u64,
        offset: u64,
        size: u32,
        block_on: impl FnOnce(KernelFuture<'_>) -> Result<Vec<u8>, String>,
    ) -> FsResult<Vec<u8>> {
        match node {
            VNode::Root | VNode::Dir(_) => Err(Errno::EISDIR),
            VNode::Input(k) => {
                let s = lock(&self.states[k]);
                Ok(slice(s.input.as_deref().unwrap_or_default(), offset, size))
            }
            VNode::Error(k) => Ok(slice(lock(&self.states[k]).error.as_bytes(), offset, size)),
            VNode::Output(k) => {
                let slot = lock(&self.outputs)
                    .1
                    .get(&fh)
                    .cloned()
                    .ok_or(Errno::EBADF)?;
                // Held across the run: concurrent reads of one handle wait
                // for its answer instead of running the kernel twice.
                let mut answer = lock(&slot);
                if answer.is_none() {
                    *answer = Some(Arc::new(self.run(k, block_on)?));
                }
                let data = answer.as_deref().map(Vec::as_slice).unwrap_or_default();
                Ok(slice(data, offset, size))
            }
        }
    }

    /// Runs kernel `k` on its current input; a failure is logged and kept
    /// for its `error` file, and reads as `EIO`.
    fn run(
        &self,
        k: usize,
        block_on: impl FnOnce(KernelFuture<'_>) -> Result<Vec<u8>, String>,
    ) -> FsResult<Vec<u8>> {
        let name = &self.names[k];
        // A copy, so a writer of `input` is not held up by a long run.
        let input = lock(&self.states[k]).input.clone();
        let result = match input {
            None => Err(format!(
                "no input yet: write the arguments to {QUARRY_DIR}/{name}/input first"
            )),
            Some(input) => block_on(self.runner.run(name, &input)).and_then(|out| {
                if out.len() > MAX_OUTPUT_BYTES {
                    Err(format!(
                        "the answer has {} bytes, more than the {MAX_OUTPUT_BYTES} an output file serves; name fewer targets",
                        out.len()
                    ))
                } else {
                    Ok(out)
                }
            }),
        };
        let mut s = lock(&self.states[k]);
        s.error_mtime = Some(SystemTime::now());
        match result {
            Ok(out) => {
                s.error.clear();
                Ok(out)
            }
            Err(reason) => {
                tracing::warn!(kernel = %name, %reason, "kernel run for .quarry output failed");
                let mut text = reason;
                if text.len() > MAX_ERROR_BYTES {
                    let mut cut = MAX_ERROR_BYTES;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                }
                text.push('\n');
                s.error = text;
                Err(Errno::EIO)
            }
        }
    }

    /// Writes into `input` at `offset` (a hole up to it reads as zeros).
    pub(crate) fn write(&self, node: VNode, offset: u64, data: &[u8]) -> FsResult<u32> {
        let VNode::Input(k) = node else {
            return Err(Errno::EACCES);
        };
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_INPUT_BYTES as u64)
            .ok_or(Errno::EFBIG)? as usize;
        let mut s = lock(&self.states[k]);
        let input = s.input.get_or_insert_with(Vec::new);
        if input.len() < end {
            input.resize(end, 0);
        }
        input[offset as usize..end].copy_from_slice(data);
        s.input_mtime = Some(SystemTime::now());
        Ok(data.len() as u32)
    }

    /// A size change (`truncate`, or `O_TRUNC` on kernels that send it
    /// separately): only `input` has one to change.
    pub(crate) fn set_size(&self, node: VNode, size: u64) -> FsResult<()> {
        let VNode::Input(k) = node else {
            return Err(match node {
                VNode::Root | VNode::Dir(_) => Errno::EISDIR,
                _ => Errno::EACCES,
            });
        };
        if size > MAX_INPUT_BYTES as u64 {
            return Err(Errno::EFBIG);
        }
        let mut s = lock(&self.states[k]);
        s.input
            .get_or_insert_with(Vec::new)
            .resize(size as usize, 0);
        s.input_mtime = Some(SystemTime::now());
        Ok(())
    }
}

/// `data[offset .. offset + size]`, cut at its end.
fn slice(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data[start..end].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl KernelRunner for Echo {
        fn kernels(&self) -> Vec<String> {
            vec!["echo".into(), "bad/name".into(), "fail".into()]
        }

        fn run<'a>(&'a self, kernel: &'a str, input: &'a [u8]) -> KernelFuture<'a> {
            Box::pin(async move {
                match kernel {
                    "echo" => Ok(input.to_vec()),
                    _ => Err("bad pattern".to_string()),
                }
            })
        }
    }

    fn block_on(f: KernelFuture<'_>) -> Result<Vec<u8>, String> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(f)
    }

    fn rd(files: &KernelFiles, node: VNode, fh: u64, offset: u64) -> FsResult<Vec<u8>> {
        files.read(node, fh, offset, 4, block_on)
    }

    #[test]
    fn inputs_run_once_per_handle_and_errors_are_kept() {
        let files = KernelFiles::new(Arc::new(Echo));
        assert_eq!(files.names, vec!["echo".to_string(), "fail".to_string()]);
        for k in 0..2 {
            for node in [
                VNode::Dir(k),
                VNode::Input(k),
                VNode::Output(k),
                VNode::Error(k),
            ] {
                assert_eq!(files.node(KernelFiles::ino(node)), Some(node));
                assert!(KernelFiles::ino(node) < FIRST_HASHED_INO);
            }
        }
        assert_eq!(files.node(KernelFiles::ino(VNode::Dir(2))), None);
        let echo = files.lookup(VNode::Root, "echo").unwrap();
        let input = files.lookup(echo, "input").unwrap();
        let output = files.lookup(echo, "output").unwrap();
        let error = files.lookup(echo, "error").unwrap();

        // Nothing written yet: EIO, and the error file says why.
        let fh = files.open(output, OpenFlags(libc::O_RDONLY)).unwrap();
        assert_eq!(rd(&files, output, fh, 0), Err(Errno::EIO));
        let why = files.read(error, 0, 0, 4096, block_on).unwrap();
        assert!(String::from_utf8_lossy(&why).contains("no input yet"));
        files.release(output, fh);

        files
            .open(input, OpenFlags(libc::O_WRONLY | libc::O_TRUNC))
            .unwrap();
        assert_eq!(files.write(input, 0, b"abcdef").unwrap(), 6);
        let fh = files.open(output, OpenFlags(libc::O_RDONLY)).unwrap();
        assert_eq!(rd(&files, output, fh, 0).unwrap(), b"abcd");
        // A new input does not change the answer an open handle has.
        files
            .open(input, OpenFlags(libc::O_WRONLY | libc::O_TRUNC))
            .unwrap();
        files.write(input, 0, b"xyz").unwrap();
        assert_eq!(rd(&files, output, fh, 4).unwrap(), b"ef");
        assert_eq!(rd(&files, output, fh, 6).unwrap(), b"");
        files.release(output, fh);
        assert!(files.read(error, 0, 0, 10, block_on).unwrap().is_empty());
        assert_eq!(rd(&files, input, 0, 0).unwrap(), b"xyz");

        // Read-only files refuse writes (root passes the mode checks).
        assert_eq!(
            files.open(output, OpenFlags(libc::O_WRONLY)),
            Err(Errno::EACCES)
        );
        assert_eq!(files.write(output, 0, b"x"), Err(Errno::EACCES));
        assert_eq!(
            files.write(input, MAX_INPUT_BYTES as u64, b"x"),
            Err(Errno::EFBIG)
        );
        files.set_size(input, 1).unwrap();
        assert_eq!(rd(&files, input, 0, 0).unwrap(), b"x");

        // A failing kernel: EIO, its reason kept.
        let fail = files.lookup(VNode::Root, "fail").unwrap();
        let (fin, fout, ferr) = (
            files.lookup(fail, "input").unwrap(),
            files.lookup(fail, "output").unwrap(),
            files.lookup(fail, "error").unwrap(),
        );
        files.open(fin, OpenFlags(libc::O_WRONLY)).unwrap();
        let fh = files.open(fout, OpenFlags(libc::O_RDONLY)).unwrap();
        assert_eq!(rd(&files, fout, fh, 0), Err(Errno::EIO));
        assert_eq!(
            files.read(ferr, 0, 0, 100, block_on).unwrap(),
            b"bad pattern\n"
        );
    }

    #[test]
    fn output_handles_are_bounded() {
        let files = KernelFiles::new(Arc::new(Echo));
        let output = VNode::Output(0);
        let fhs: Vec<u64> = (0..MAX_OUTPUT_HANDLES)
            .map(|_| files.open(output, OpenFlags(libc::O_RDONLY)).unwrap())
            .collect();
        assert_eq!(
            files.open(output, OpenFlags(libc::O_RDONLY)),
            Err(Errno::ENFILE)
        );
        files.release(output, fhs[0]);
        assert!(files.open(output, OpenFlags(libc::O_RDONLY)).is_ok());
    }
}
