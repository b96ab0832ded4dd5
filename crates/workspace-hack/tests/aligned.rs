//! The Python package's build (`maturin develop`, which builds
//! quarry-python alone) resolves every dependency with the features the
//! whole workspace's test build does, so the two share their builds.

use std::process::Command;

/// `cargo tree` lines, one per package and feature set, for `args`.
fn tree(args: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--prefix", "none", "--no-dedupe"])
        .args(["-f", "{p} {f}"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            // "name vX (/path) features" or "name vX features (*)": keep
            // name, version and features.
            let l = l.trim_end_matches(" (*)");
            match (l.find(" ("), l.find(')')) {
                (Some(a), Some(b)) if b > a => format!("{}{}", &l[..a], &l[b + 1..]),
                _ => l.to_string(),
            }
        })
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

/// `lines` less `minus` (both sorted).
fn without(lines: &[String], minus: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| minus.binary_search(l).is_err())
        .cloned()
        .collect()
}

fn assert_within(python: &[String], workspace: &[String], side: &str) {
    let drifted = without(python, workspace);
    assert!(
        drifted.is_empty(),
        "built alone, quarry-python resolves these {side} packages with features the workspace \
         build does not (package, version, features), so maturin builds them and everything \
         above them a second time; add the workspace's features of each to \
         crates/workspace-hack/Cargo.toml:\n{}",
        drifted.join("\n")
    );
}

#[test]
fn the_python_build_resolves_features_as_the_workspace_does() {
    // What is built for the target (no build scripts or proc-macros), and
    // everything; the difference is what is built for the host. A package
    // built for both shows once per side, so the sides are compared apart.
    let python_target = tree(&["-p", "quarry-python", "-e", "normal,no-proc-macro"]);
    let workspace_target = tree(&["--workspace", "-e", "normal,dev,no-proc-macro"]);
    let python_all = tree(&["-p", "quarry-python", "-e", "normal,build"]);
    let workspace_all = tree(&["--workspace", "-e", "normal,build,dev"]);
    assert!(
        python_target.len() > 50,
        "cargo tree listed only {} packages for quarry-python",
        python_target.len()
    );
    assert_within(&python_target, &workspace_target, "target");
    assert_within(
        &without(&python_all, &python_target),
        &without(&workspace_all, &workspace_target),
        "host",
    );
}
