//! `scripts/setup.sh`, which both README commands run first, leaves the
//! machine able to build: in particular it finds a regular file where the null
//! device (or another device the build and tests use) should be and makes the
//! device again.
//!
//! Why this matters: a CI run once failed at `cargo test`'s first step with
//! "failed to run `rustc` to learn about target-specific information". The
//! machine's /dev/null was a regular file; build scripts had written their
//! probes' errors into it, and cargo's `rustc -` (stdin from /dev/null) read
//! them back as source.
//!
//! The broken /dev/null is made in a private mount namespace (a tmpfs over
//! /dev), so the machine's own device is never touched. Without root or
//! `unshare` the test fails, saying which is missing.

use std::path::PathBuf;
use std::process::Command;

fn setup_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup.sh")
}

/// Whether a private mount namespace can be had here; why not, if not.
fn private_namespace() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(format!("running as uid {euid}, not root"));
    }
    match Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .status()
    {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("unshare --mount exited {status}")),
        Err(e) => Err(format!("unshare cannot run: {e}")),
    }
}

/// Runs `script` under bash (with `$SETUP` naming the script under test) in
/// a fresh private mount namespace; its stdout and stderr once it succeeded.
/// Where no such namespace can be had the test fails, saying why; `None`
/// only where a developer opted out locally (quarry_testkit).
fn in_private_namespace(script: &str) -> Option<(String, String)> {
    if !quarry_testkit::require(
        "a private mount namespace (root and unshare)",
        "the test command runs as root, as CI does; unshare is in util-linux",
        private_namespace(),
    ) {
        return None;
    }
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c", script])
        .env("SETUP", setup_script())
        // Devices only: not the Python package (setup.sh says why).
        .env("QUARRY_SETUP_DEVICES_ONLY", "1")
        .output()
        .expect("unshare runs (checked before)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    Some((stdout, stderr))
}

#[test]
fn setup_makes_the_devices_again_where_regular_files_stand() {
    // /dev/null holds what broke CI, so a read of it would show.
    let Some((stdout, stderr)) = in_private_namespace(
        r#"set -e
        mount -t tmpfs tmpfs /dev
        printf 'error[E0554]: junk\n' > /dev/null
        touch /dev/zero /dev/urandom /dev/fuse
        test -f /dev/null
        source "$SETUP"
        stat -c '%n %F %t:%T %a' /dev/null /dev/zero /dev/urandom /dev/fuse
        printf 'written\n' > /dev/null
        printf 'read:%s\n' "$(wc -c < /dev/null)"
        printf 'zero:%s\n' "$(head -c 4 /dev/zero | od -An -tx1 | tr -d ' ')""#,
    ) else {
        return;
    };
    assert_eq!(
        stdout,
        "/dev/null character special file 1:3 666\n\
         /dev/zero character special file 1:5 666\n\
         /dev/urandom character special file 1:9 666\n\
         /dev/fuse character special file a:e5 666\n\
         read:0\n\
         zero:00000000\n",
        "stderr: {stderr}"
    );
    for device in ["null", "zero", "urandom", "fuse"] {
        assert!(
            stderr.contains(&format!("/dev/{device} is not the device it should be")),
            "setup should say what it mended; stderr: {stderr}"
        );
    }
}

/// A machine whose /dev lacks the FUSE device while its kernel has FUSE
/// gets the device made, so the mount tests can run instead of failing.
#[test]
fn setup_makes_the_fuse_device_where_the_kernel_has_fuse() {
    let filesystems = std::fs::read_to_string("/proc/filesystems")
        .map_err(|e| format!("/proc/filesystems: {e}"))
        .and_then(|list| {
            if list
                .lines()
                .any(|l| l.split_whitespace().last() == Some("fuse"))
            {
                Ok(())
            } else {
                Err("/proc/filesystems lists no fuse".to_string())
            }
        });
    if !quarry_testkit::require(
        "a kernel with FUSE",
        "the kernel needs CONFIG_FUSE_FS (setup runs `modprobe fuse`)",
        filesystems,
    ) {
        return;
    }
    let Some((stdout, stderr)) = in_private_namespace(
        r#"set -e
        mount -t tmpfs tmpfs /dev
        mknod -m 666 /dev/null c 1 3
        mknod -m 666 /dev/zero c 1 5
        mknod -m 666 /dev/urandom c 1 9
        source "$SETUP"
        stat -c '%n %F %t:%T %a' /dev/fuse"#,
    ) else {
        return;
    };
    assert_eq!(
        stdout, "/dev/fuse character special file a:e5 666\n",
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("/dev/fuse is missing but the kernel has FUSE; making it"),
        "setup should say what it made; stderr: {stderr}"
    );
}

#[test]
fn setup_leaves_good_devices_alone_and_quiet() {
    let Some((stdout, stderr)) = in_private_namespace(
        r#"set -e
        devices="/dev/null /dev/zero /dev/urandom"
        [ -e /dev/fuse ] && devices="$devices /dev/fuse"
        before=$(stat -c '%i %Z' $devices)
        source "$SETUP"
        test "$before" = "$(stat -c '%i %Z' $devices)" && echo same"#,
    ) else {
        return;
    };
    assert_eq!(stdout, "same\n", "stderr: {stderr}");
    assert!(!stderr.contains("/dev/"), "stderr: {stderr}");
}
