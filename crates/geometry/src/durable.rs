//! Replacing a small file so that a crash or a power loss leaves the old
//! file or the new one, never a mix and never nothing: every layer keeps
//! some (device metadata, volume checkpoints and registries, node and
//! cluster configurations), and one way of writing them is the one that is
//! tested across power loss.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Which step of a durable write failed, on which file.
#[derive(Debug, thiserror::Error)]
#[error("{step} {}: {source}", path.display())]
pub struct DurableWriteError {
    /// What was being done: "creating", "writing", "syncing", "renaming".
    pub step: &'static str,
    /// The file it was done to (the temporary file, or the target).
    pub path: PathBuf,
    /// The system's error (its `raw_os_error` tells a full disk).
    #[source]
    pub source: io::Error,
}

/// Writes `bytes` to `path` durably: a temporary file beside it
/// (`NAME.tmp`), written and fsynced, renamed over `path`, then the
/// directory fsynced so the rename itself survives a power loss.
pub fn write_file_durably(path: &Path, bytes: &[u8]) -> Result<(), DurableWriteError> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let failed = |step, path: &Path| {
        let path = path.to_path_buf();
        move |source| DurableWriteError { step, path, source }
    };
    let mut f = File::create(&tmp).map_err(failed("creating", &tmp))?;
    f.write_all(bytes).map_err(failed("writing", &tmp))?;
    f.sync_all().map_err(failed("syncing", &tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(failed("renaming into", path))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match File::open(dir).and_then(|d| d.sync_all()) {
        // A file system that cannot sync a directory (EINVAL) orders
        // renames by itself or not at all; nothing more can be done.
        Err(e) if e.raw_os_error() != Some(libc_einval()) => {
            Err(failed("syncing the directory of", path)(e))
        }
        _ => Ok(()),
    }
}

/// EINVAL, without a libc dependency for one number (the same on every
/// Linux architecture).
const fn libc_einval() -> i32 {
    22
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("quarry-durable-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.toml");
        write_file_durably(&path, b"one").unwrap();
        write_file_durably(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert!(!dir.join("node.toml.tmp").exists());
        let err = write_file_durably(&dir.join("missing/x"), b"").unwrap_err();
        assert_eq!(err.step, "creating");
        assert!(err.to_string().contains("missing/x.tmp"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
