//! How a test says "I need X": a tool on `PATH`, `/dev/fuse`, root, a
//! network namespace. When X is missing the test fails, naming X and what
//! provides it (`scripts/setup.sh` installs or makes everything the suite
//! needs), so a missing tool can never pass as a green test.
//!
//! A developer may opt out on their own machine with
//! [`ALLOW_MISSING_VAR`]`=1`: then a test whose need is missing prints that
//! it was skipped by that choice and returns. Wherever `CI` is set (to
//! anything) the opt-out is ignored: in CI a missing need always fails.
//! It also holds [`LargestAlloc`], the allocator the decoder property tests
//! watch allocations with, and [`run_then_kill`], how the crash tests run a
//! writer process to a point and kill it.
//!
//! ```
//! use std::ffi::OsStr;
//! use quarry_testkit::{decide, Missing};
//!
//! // Nobody opted out: a missing need fails the test.
//! assert_eq!(decide(None, None), Missing::Fail);
//! // A developer opted out on their own machine: the test returns.
//! assert_eq!(decide(None, Some(OsStr::new("1"))), Missing::SkipByChoice);
//! // In CI the opt-out is ignored.
//! assert_eq!(
//!     decide(Some(OsStr::new("true")), Some(OsStr::new("1"))),
//!     Missing::FailOptOutIgnoredInCi
//! );
//! ```

#![deny(missing_docs)]

mod alloc;
mod killed;

pub use alloc::{allocated_bytes, largest_alloc_bytes, LargestAlloc};
pub use killed::run_then_kill;

use std::ffi::OsStr;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The variable by which a developer opts out locally (only the value `1`).
pub const ALLOW_MISSING_VAR: &str = "QUARRY_ALLOW_MISSING";
/// Set (to anything) by CI; `.ci/run` sets it too.
pub const CI_VAR: &str = "CI";

/// What a test does when something it needs is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Fail the test, naming what is missing.
    Fail,
    /// Fail, and say that the opt-out was seen but `CI` overrides it.
    FailOptOutIgnoredInCi,
    /// Return early: the developer opted out on a machine that is not CI.
    SkipByChoice,
}

/// The decision, from the two variables' values (`None` = unset).
pub fn decide(ci: Option<&OsStr>, allow_missing: Option<&OsStr>) -> Missing {
    let opted_out = allow_missing.is_some_and(|v| v == "1");
    match (ci.is_some(), opted_out) {
        (_, false) => Missing::Fail,
        (true, true) => Missing::FailOptOutIgnoredInCi,
        (false, true) => Missing::SkipByChoice,
    }
}

/// The decision for this process's environment.
pub fn decide_from_env() -> Missing {
    decide(
        std::env::var_os(CI_VAR).as_deref(),
        std::env::var_os(ALLOW_MISSING_VAR).as_deref(),
    )
}

/// The failure message for a missing `what`.
pub fn failure_message(what: &str, why: &str, provided_by: &str, decision: Missing) -> String {
    let mut message = format!(
        "this test needs {what}, which is missing here: {why}. {provided_by}. \
         (On a development machine, {ALLOW_MISSING_VAR}=1 skips such tests; CI never does.)"
    );
    if decision == Missing::FailOptOutIgnoredInCi {
        message.push_str(&format!(
            " {ALLOW_MISSING_VAR}=1 is set but ignored because {CI_VAR} is set."
        ));
    }
    message
}

/// `Some(value)` when `found` is `Ok`. Otherwise the test fails naming
/// `what`, why it is missing and `provided_by` (how setup provides it),
/// unless the developer opted out: then it says so and gives `None`, and
/// the test returns.
pub fn need<T, E: Display>(what: &str, provided_by: &str, found: Result<T, E>) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(why) => {
            let why = why.to_string();
            match decide_from_env() {
                Missing::SkipByChoice => {
                    eprintln!(
                        "SKIPPED by the developer's choice ({ALLOW_MISSING_VAR}=1): \
                         this test needs {what}, which is missing here: {why}"
                    );
                    None
                }
                decision => panic!("{}", failure_message(what, &why, provided_by, decision)),
            }
        }
    }
}

/// [`need`] without a value: whether the test may go on.
pub fn require<E: Display>(what: &str, provided_by: &str, found: Result<(), E>) -> bool {
    need(what, provided_by, found).is_some()
}

/// The Debian package that provides `program`, for the failure message.
fn package_of(program: &str) -> Option<&'static str> {
    Some(match program {
        "rg" => "ripgrep",
        "ip" | "tc" => "iproute2",
        "sqlite3" => "sqlite3",
        "python3" => "python3",
        "fio" => "fio",
        "fusermount3" => "fuse3",
        "grep" => "grep",
        "wc" | "sha256sum" | "cmp" | "head" | "od" => "coreutils",
        "unshare" | "mount" => "util-linux",
        "diff" => "diffutils",
        "memcached" => "memcached",
        "memccapable" | "memcslap" => "libmemcached-tools",
        "redis-server" | "redis-cli" => "redis-server",
        _ => return None,
    })
}

/// The executable file named `program` in `path` (a `PATH` value).
pub fn find_in_path(program: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn provided_by_setup(program: &str) -> String {
    match package_of(program) {
        Some(package) => format!("scripts/setup.sh installs it (apt package {package})"),
        None => format!("install `{program}` (and add it to scripts/setup.sh)"),
    }
}

/// The program `program` is on `PATH`.
pub fn require_tool(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = find_in_path(program, &path)
        .map(drop)
        .ok_or_else(|| format!("no executable `{program}` on PATH"));
    require(
        &format!("the program `{program}`"),
        &provided_by_setup(program),
        found,
    )
}

/// The GNU build of `program` is on `PATH` (its `--version` says GNU): the
/// tests compare against GNU's output, which other builds do not match.
pub fn require_gnu_tool(program: &str) -> bool {
    let found = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{program} --version` cannot run: {e}"))
        .and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains("GNU") {
                Ok(())
            } else {
                let first = text.lines().next().unwrap_or("").to_string();
                Err(format!(
                    "`{program}` is not GNU's (its --version: {first:?})"
                ))
            }
        });
    require(
        &format!("GNU `{program}`"),
        &provided_by_setup(program),
        found,
    )
}

/// `/dev/fuse` opens for reading and writing.
pub fn require_fuse() -> bool {
    let found = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("/dev/fuse cannot be opened: {e}"));
    require(
        "FUSE (/dev/fuse)",
        "scripts/setup.sh installs fuse3 and makes /dev/fuse where the kernel has FUSE \
         (grep fuse /proc/filesystems); a container needs --device /dev/fuse",
        found,
    )
}

/// The effective user is root; `purpose` says what for.
pub fn require_root(purpose: &str) -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    let found = if euid == 0 {
        Ok(())
    } else {
        Err(format!("running as uid {euid}"))
    };
    require(
        &format!("root (to {purpose})"),
        "run the test command as root, as CI does",
        found,
    )
}

/// Copies the files under `from` into `to` (made as needed), leaving out
/// directories named in `skip`; how many files it copied. A copy of a
/// process's files while it waits is what a crash at that moment leaves.
pub fn copy_tree(
    from: &std::path::Path,
    to: &std::path::Path,
    skip: &[&str],
) -> std::io::Result<usize> {
    std::fs::create_dir_all(to)?;
    let mut files = 0;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let kind = e.file_type()?;
        let dst = to.join(e.file_name());
        if kind.is_dir() {
            if !skip.iter().any(|s| e.file_name() == *s) {
                files += copy_tree(&e.path(), &dst, skip)?;
            }
        } else if kind.is_file() {
            std::fs::copy(e.path(), &dst)?;
            files += 1;
        }
    }
    Ok(files)
}

/// `len` pseudo-random bytes from `seed` (xorshift64): the same bytes for
/// the same seed, so a test that fails on them fails again.
pub fn noise_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Decodes `bytes` with `decode` while watching its largest allocation,
/// which must stay within `limit_bytes` (the test binary's global
/// allocator must be [`LargestAlloc`]). A value must come back unchanged
/// through `encode` and `decode`; an error must name `what`. Returns
/// whether `bytes` decoded.
pub fn decode_checked<T, E>(
    what: &str,
    bytes: &[u8],
    limit_bytes: usize,
    decode: impl Fn(&[u8]) -> Result<T, E>,
    encode: impl Fn(&T) -> Vec<u8>,
) -> bool
where
    T: PartialEq + std::fmt::Debug,
    E: Display,
{
    let (got, largest) = largest_alloc_bytes(|| decode(bytes));
    assert!(
        largest <= limit_bytes,
        "{what} of {} bytes made an allocation of {largest} bytes",
        bytes.len()
    );
    match got {
        Ok(value) => {
            let back = decode(&encode(&value))
                .unwrap_or_else(|e| panic!("{what} did not decode once re-encoded: {e}"));
            assert_eq!(back, value);
            true
        }
        Err(e) => {
            assert!(e.to_string().contains(what), "{e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn a_missing_need_fails_unless_the_developer_opted_out() {
        assert_eq!(decide(None, None), Missing::Fail);
        assert_eq!(decide(None, os("1")), Missing::SkipByChoice);
    }

    #[test]
    fn only_the_value_1_opts_out() {
        for value in ["0", "", "yes", "true", " 1", "11"] {
            assert_eq!(decide(None, os(value)), Missing::Fail, "{value:?}");
        }
    }

    #[test]
    fn ci_ignores_the_opt_out_whatever_its_value() {
        for ci in ["true", "1", "", "false"] {
            assert_eq!(
                decide(os(ci), os("1")),
                Missing::FailOptOutIgnoredInCi,
                "CI={ci:?}"
            );
            assert_eq!(decide(os(ci), None), Missing::Fail, "CI={ci:?}");
        }
    }

    #[test]
    fn the_failure_names_what_is_missing_and_how_setup_provides_it() {
        let message = failure_message(
            "the program `rg`",
            "no executable `rg` on PATH",
            &provided_by_setup("rg"),
            Missing::Fail,
        );
        assert!(message.contains("the program `rg`"), "{message}");
        assert!(message.contains("no executable `rg` on PATH"), "{message}");
        assert!(message.contains("apt package ripgrep"), "{message}");
        assert!(message.contains("QUARRY_ALLOW_MISSING=1"), "{message}");
        assert!(!message.contains("ignored because CI"), "{message}");
        let in_ci = failure_message("x", "y", "z", Missing::FailOptOutIgnoredInCi);
        assert!(in_ci.contains("ignored because CI is set"), "{in_ci}");
    }

    #[test]
    fn a_program_is_found_only_as_an_executable_file_on_the_path() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("quarry-testkit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let tool = dir.join("sub/tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = std::env::join_paths([dir.join("nowhere"), dir.join("sub")]).unwrap();
        assert_eq!(find_in_path("tool", &path), None, "not executable");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_in_path("tool", &path), Some(tool));
        assert_eq!(find_in_path("sub", &path), None, "a directory");
        std::fs::create_dir_all(dir.join("sub/dir")).unwrap();
        std::fs::set_permissions(dir.join("sub/dir"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert_eq!(find_in_path("dir", &path), None, "a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_present_need_gives_its_value_whatever_the_environment() {
        assert_eq!(need("x", "y", Ok::<_, String>(7)), Some(7));
    }
}
