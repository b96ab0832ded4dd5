//! `scripts/setup.sh`, which both README commands run first, leaves the
//! machine able to build: in particular it finds a regular file where the null
//! device should be and makes the device again.
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

/// Runs `script` under bash in a fresh private mount namespace.
fn in_private_namespace(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "bash", "-c", script])
        .env("SETUP", setup_script())
        .output()
        .expect("unshare runs (checked before)")
}

#[test]
fn setup_makes_the_null_device_again_where_a_regular_file_stands() {
    if let Some(reason) = no_namespace_reason() {
        eprintln!("SKIPPED: {reason}; this test needs a private mount namespace");
        return;
    }
    // The regular file holds what broke CI, so a read of it would show.
    let output = in_private_namespace(
        r#"set -e
        mount -t tmpfs tmpfs /dev
        printf 'error[E0554]: junk\n' > /dev/null
        test -f /dev/null
        source "$SETUP"
        stat -c '%F %t:%T %a' /dev/null
        printf 'written\n' > /dev/null
        printf 'read:%s\n' "$(wc -c < /dev/null)""#,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(
        stdout, "character special file 1:3 666\nread:0\n",
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("/dev/null is not the null device"),
        "setup should say what it mended; stderr: {stderr}"
    );
}

#[test]
fn setup_leaves_a_good_null_device_alone_and_quiet() {
    if let Some(reason) = no_namespace_reason() {
        eprintln!("SKIPPED: {reason}; this test needs a private mount namespace");
        return;
    }
    let output = in_private_namespace(
        r#"set -e
        before=$(stat -c '%i %Z' /dev/null)
        source "$SETUP"
        test "$before" = "$(stat -c '%i %Z' /dev/null)" && echo same"#,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert_eq!(stdout, "same\n", "stderr: {stderr}");
    assert!(!stderr.contains("/dev/null"), "stderr: {stderr}");
}
