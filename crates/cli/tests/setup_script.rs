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
//! `unshare` the test says why on stderr and passes.

use std::path::PathBuf;
use std::process::Command;

fn setup_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup.sh")
}

/// Why a private mount namespace cannot be had here, if it cannot.
fn no_namespace_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    match Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .status()
    {
        Ok(status) if status.success() => None,
        Ok(status) => Some(format!("unshare --mount exited {status}")),
        Err(e) => Some(format!("unshare cannot run: {e}")),
    }
}

/// Runs `script` under bash (with `$SETUP` naming the script under test) in
/// a fresh private mount namespace; its stdout and stderr once it succeeded,
/// or None (said on stderr) where no such namespace can be had.
fn in_private_namespace(script: &str) -> Option<(String, String)> {
    if let Some(reason) = no_namespace_reason() {
        eprintln!("SKIPPED: {reason}; this test needs a private mount namespace");
        return None;
    }
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c", script])
        .env("SETUP", setup_script())
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

#[test]
fn setup_makes_no_fuse_device_where_there_is_none() {
    let Some((stdout, stderr)) = in_private_namespace(
        r#"set -e
        mount -t tmpfs tmpfs /dev
        mknod -m 666 /dev/null c 1 3
        mknod -m 666 /dev/zero c 1 5
        mknod -m 666 /dev/urandom c 1 9
        source "$SETUP"
        test ! -e /dev/fuse && echo none"#,
    ) else {
        return;
    };
    assert_eq!(stdout, "none\n", "stderr: {stderr}");
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
