//! The client links the wire formats and nothing of a node's internals
//! (DESIGN.md, "faces"): a program that only talks to a cluster, and the
//! Python package that links this crate, must not compile the device,
//! the space manager, the node's store, the kernels or their regex engines.

use std::collections::BTreeSet;
use std::process::Command;

/// Crates a client must never link, with why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("quarry-device", "the page store and its NAND emulator"),
    ("quarry-fabric", "the node-to-node links"),
    ("quarry-volume", "the space manager"),
    ("quarry-store", "a node's tables and chunk stores"),
    ("quarry-kv", "a node's key-value tables"),
    ("quarry-kernels", "the kernels"),
    ("quarry-node", "the daemon"),
    ("io-uring", "the device's I/O engine"),
    ("fuser", "the FUSE mount"),
    ("regex", "the kernels' regex engine"),
    ("regex-automata", "the kernels' regex engine"),
    ("regex-syntax", "the kernels' regex engine"),
    ("grep-regex", "the kernels' grep"),
    ("grep-searcher", "the kernels' grep"),
    ("grep-matcher", "the kernels' grep"),
];

/// The names of every package `package` links (normal dependencies, the
/// ones a program using it compiles).
fn dependencies(package: &str) -> BTreeSet<String> {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--manifest-path",
            manifest,
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} tree: {e}", env!("CARGO")));
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Fails naming every crate of [`FORBIDDEN`] that `package` links.
fn assert_no_node_internals(package: &str, linked: &BTreeSet<String>) {
    let heavy: Vec<String> = FORBIDDEN
        .iter()
        .filter(|(name, _)| linked.contains(*name))
        .map(|(name, what)| format!("{name} ({what})"))
        .collect();
    assert!(
        heavy.is_empty(),
        "{package} links node internals: {}; move what the client shares \
         with the nodes into the -api crates (docs/architecture.md)",
        heavy.join(", ")
    );
}

#[test]
fn the_python_package_links_only_the_client_and_the_wire_formats() {
    let linked = dependencies("quarry-python");
    for needed in ["quarry-python", "quarry-client", "quarry-jobs", "pyo3"] {
        assert!(
            linked.contains(needed),
            "{needed} missing from the Python package's dependencies: {linked:?}"
        );
    }
    assert_no_node_internals("quarry-python", &linked);
}

#[test]
fn the_client_links_only_the_wire_formats() {
    let linked = dependencies("quarry-client");
    // The tree is read right: the client and the crates it must link are in it.
    for needed in [
        "quarry-client",
        "quarry-proto",
        "quarry-geometry",
        "quarry-store-api",
        "quarry-volume-api",
        "quarry-kernels-api",
    ] {
        assert!(
            linked.contains(needed),
            "{needed} missing from the client's dependencies: {linked:?}"
        );
    }
    assert_no_node_internals("quarry-client", &linked);
}
