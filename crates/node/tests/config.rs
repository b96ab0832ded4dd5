//! Configuration loading and its error messages.

use std::path::Path;

use quarry_device::BackendKind;
use quarry_node::NodeConfig;

fn load_text(text: &str) -> Result<NodeConfig, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    std::fs::write(&path, text).unwrap();
    NodeConfig::load(&path).map_err(|e| e.to_string())
}

#[test]
fn full_config_loads_with_relative_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.toml");
    std::fs::write(
        &path,
        r#"
            id = 2
            listen = "127.0.0.1:7402"
            data_dir = "data/n2"
            [device]
            backend = "mem"
            seed = 7
            [[peers]]
            id = 0
            addr = "127.0.0.1:7400"
            [[peers]]
            id = 1
            addr = "localhost:7401"
            [limits]
            max_hops = 3
        "#,
    )
    .unwrap();
    let config = NodeConfig::load(&path).unwrap();
    assert_eq!(config.id, 2);
    assert_eq!(config.data_dir, dir.path().join("data/n2"));
    assert_eq!(config.device.backend, BackendKind::Mem);
    assert_eq!(config.peers.len(), 2);
    assert_eq!(config.limits.max_hops, 3);
    assert_eq!(config.limits.max_in_flight, 1024);
    assert_eq!(config.cluster, "quarry", "the default cluster name");
}

#[test]
fn the_cluster_name_is_checked() {
    let base = "id = 0\nlisten = \"127.0.0.1:7400\"\ndata_dir = \"d\"\n";
    let config = load_text(&format!("cluster = \"lab-2.east\"\n{base}")).unwrap();
    assert_eq!(config.cluster, "lab-2.east");
    for bad in ["", "two words", "slash/y"] {
        let err = load_text(&format!("cluster = \"{bad}\"\n{base}")).unwrap_err();
        assert!(
            err.contains("node.toml") && err.contains("cluster name"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn missing_file_is_named() {
    let err = NodeConfig::load(Path::new("/nonexistent/quarry.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("config /nonexistent/quarry.toml: cannot read"),
        "{err}"
    );
}

#[test]
fn toml_errors_carry_the_location() {
    let err =
        load_text("id = 0\nlisten = \"127.0.0.1:1\"\ndata_dir = \"d\"\nbogus = 1\n").unwrap_err();
    assert!(
        err.contains("node.toml") && err.contains("line 4") && err.contains("bogus"),
        "{err}"
    );
    let err = load_text("id = \"zero\"\n").unwrap_err();
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn bad_peers_and_addresses_are_refused() {
    let base = "id = 0\nlisten = \"127.0.0.1:7400\"\ndata_dir = \"d\"\n";
    let err = load_text(&format!(
        "{base}[[peers]]\nid = 1\naddr = \"a:1\"\n[[peers]]\nid = 1\naddr = \"b:1\"\n"
    ))
    .unwrap_err();
    assert!(err.ends_with("duplicate peer id 1"), "{err}");
    let err = load_text(&format!("{base}[[peers]]\nid = 0\naddr = \"a:1\"\n")).unwrap_err();
    assert!(err.contains("has this node's own id"), "{err}");
    let err = load_text(&format!("{base}[[peers]]\nid = 3\naddr = \"nohost\"\n")).unwrap_err();
    assert!(
        err.contains("peer 3 address \"nohost\" is not host:port"),
        "{err}"
    );
    let err = load_text("id = 0\nlisten = \"127.0.0.1:99999\"\ndata_dir = \"d\"\n").unwrap_err();
    assert!(err.contains("port \"99999\""), "{err}");
    let err = load_text(&format!("{base}[limits]\nmax_in_flight = 0\n")).unwrap_err();
    assert!(err.contains("max_in_flight"), "{err}");
}

const BASE: &str = "id = 1\nlisten = \"127.0.0.1:7401\"\ndata_dir = \"n1\"\n";

#[test]
fn compute_section_pins_the_read_setting() {
    let config = load_text(&format!(
        "{BASE}[compute]\nread_depth = 4\nread_ahead = 8\n"
    ))
    .unwrap();
    let setting = config.compute.read_setting().unwrap().unwrap();
    assert_eq!((setting.depth, setting.read_ahead), (4, 8));
    let tuner = config.compute.tuner().unwrap();
    assert_eq!(tuner.current(), setting);
    // Pinned: observing never moves it.
    let next = tuner.observe(setting, 1, 1e-9);
    assert_eq!(next, setting);
}

#[test]
fn no_compute_section_means_adaptive() {
    let config = load_text(BASE).unwrap();
    assert_eq!(config.compute.read_setting().unwrap(), None);
    assert_eq!(
        config.compute.tuner().unwrap().current(),
        quarry_kernels::ReadTuner::new().current()
    );
}

#[test]
fn compute_values_off_the_grid_are_refused_naming_the_allowed_ones() {
    let err = load_text(&format!(
        "{BASE}[compute]\nread_depth = 5\nread_ahead = 1\n"
    ))
    .unwrap_err();
    assert!(err.contains("compute.read_depth = 5"), "{err}");
    assert!(err.contains("1, 2, 3, 4, 8"), "{err}");
    let err = load_text(&format!(
        "{BASE}[compute]\nread_depth = 2\nread_ahead = 3\n"
    ))
    .unwrap_err();
    assert!(err.contains("compute.read_ahead = 3"), "{err}");
    assert!(err.contains("1, 2, 4, 8"), "{err}");
}

#[test]
fn compute_needs_both_values_or_neither() {
    let err = load_text(&format!("{BASE}[compute]\nread_depth = 32\n")).unwrap_err();
    assert!(err.contains("go together"), "{err}");
    let err = load_text(&format!("{BASE}[compute]\nread_ahead = 2\n")).unwrap_err();
    assert!(err.contains("go together"), "{err}");
    let err = load_text(&format!("{BASE}[compute]\nread_dept = 32\n")).unwrap_err();
    assert!(err.contains("read_dept"), "{err}");
}
