//! The client links the wire formats and nothing of a node's internals
//! (DESIGN.md, "faces"): a program that only talks to a cluster, and the
//! Python package that will link this crate, must not compile the device,
//! the space manager, the node's store, the kernels or their regex engines.

use std::collections::BTreeSet;
use std::process::Command;

/// Crates a client must never link, with why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("quarry-device", "the page store and its NAND emulator"),
    ("quarry-fabric", "the node-to-node links"),
    ("quarry-volume", "the space manager"),
    ("quarry-store", "a node's tables and chunk stores"),
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

/// The names of every package `quarry-client` links (normal dependencies,
/// the ones a program using the client compiles).
fn client_dependencies() -> BTreeSet<String> {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--manifest-path",
            manifest,
            "-p",
            "quarry-client",
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

#[test]
fn the_client_links_only_the_wire_formats() {
    let linked = client_dependencies();
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
    let heavy: Vec<String> = FORBIDDEN
        .iter()
        .filter(|(name, _)| linked.contains(*name))
        .map(|(name, what)| format!("{name} ({what})"))
        .collect();
    assert!(
        heavy.is_empty(),
        "quarry-client links node internals: {}; move what the client shares \
         with the nodes into the -api crates (docs/architecture.md)",
        heavy.join(", ")
    );
}
