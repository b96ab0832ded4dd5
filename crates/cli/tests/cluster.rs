//! Integration tests: real `quarry node` processes on loopback.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_cli::{LocalCluster, LocalClusterSpec};
use quarry_client::{BlockingClient, ClientError, Status};
use quarry_device::{BackendKind, BlockAddr, Geometry, PageAddr};
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quarry"))
}

fn small_geometry() -> Geometry {
    Geometry { buses: 2, chips_per_bus: 2, blocks_per_chip: 8, pages_per_block: 16, page_size_bytes: 8192, oob_size_bytes: 64 }
}

fn start(dir: &Path, nodes: u16, backend: BackendKind) -> LocalCluster {
    let spec = LocalClusterSpec {
        nodes,
        dir: dir.to_path_buf(),
        backend,
        preset: None,
        geometry: Some(small_geometry()),
        direct_io: true,
    };
    match LocalCluster::start(&spec, &exe()) {
        Ok(cluster) => cluster,
        Err(e) => panic!("cluster did not start: {e:#}"),
    }
}

fn client(cluster: &LocalCluster, node: usize) -> BlockingClient {
    BlockingClient::connect(&cluster.cluster.nodes[node].addr).expect("connect to a live node")
}

fn page(node: u16, bus: u32, chip: u32, block: u32, page: u32) -> GlobalPageAddr {
    GlobalPageAddr { node, page: PageAddr { bus, chip, block, page } }
}

fn block(node: u16, bus: u32, chip: u32, block: u32) -> GlobalBlockAddr {
    GlobalBlockAddr { node, block: BlockAddr { bus, chip, block } }
}

fn pattern(seed: u64, len: usize) -> Bytes {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

fn remote_status(result: Result<impl std::fmt::Debug, ClientError>) -> (Status, String) {
    match result {
        Err(ClientError::Remote { status, message }) => (status, message),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

#[test]
fn four_nodes_program_read_erase_across_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start(dir.path(), 4, BackendKind::File);
    for node in 0..4u16 {
        // Enter at a different node than the owner, so every request is forwarded.
        let entry = client(&cluster, ((node + 1) % 4) as usize);
        entry.erase_block(block(node, 1, 1, 3)).expect("erase");
        for p in 0..4 {
            let data = pattern(u64::from(node) * 100 + u64::from(p), 8192);
            let oob = Bytes::from(vec![node as u8, p as u8, 0xAB]);
            entry.program_page(page(node, 1, 1, 3, p), data, oob).expect("program");
        }
    }
    let reader = client(&cluster, 0);
    for node in 0..4u16 {
        for p in 0..4 {
            let read = reader.read_page(page(node, 1, 1, 3, p)).expect("read");
            assert_eq!(read.data, pattern(u64::from(node) * 100 + u64::from(p), 8192), "node {node} page {p}");
            assert_eq!(&read.oob[..3], &[node as u8, p as u8, 0xAB]);
            assert!(!read.erased);
        }
        let unwritten = reader.read_page(page(node, 1, 1, 3, 4)).expect("read erased page");
        assert!(unwritten.erased);
        assert!(unwritten.data.iter().all(|&b| b == 0xFF));
    }

    // NAND rules hold through forwarding, with errors that say what was wrong.
    let (status, message) = remote_status(reader.program_page(page(2, 1, 1, 3, 0), pattern(1, 8192), Bytes::new()));
    assert_eq!(status, Status::AlreadyProgrammed, "{message}");
    let (status, message) = remote_status(reader.program_page(page(2, 1, 1, 3, 9), pattern(1, 8192), Bytes::new()));
    assert_eq!(status, Status::OutOfOrder, "{message}");
    assert!(message.contains("expects page 4"), "{message}");
    let (status, message) = remote_status(reader.read_page(page(3, 7, 0, 0, 0)));
    assert_eq!(status, Status::AddressOutOfRange, "{message}");
    assert!(message.contains("bus 0..=1"), "the error names the valid range: {message}");
    let (status, message) = remote_status(reader.read_page(page(9, 0, 0, 0, 0)));
    assert_eq!(status, Status::UnknownNode, "{message}");
    assert!(message.contains('9'), "{message}");

    reader.erase_block(block(2, 1, 1, 3)).expect("erase");
    assert!(reader.read_page(page(2, 1, 1, 3, 0)).expect("read").erased);
    assert!(!reader.read_page(page(1, 1, 1, 3, 0)).expect("read").erased, "other nodes keep their pages");
    let info = reader.node_info(2).expect("info");
    assert_eq!(info.device.geometry, small_geometry());
    assert!(info.device.erase_count_max >= 2);
    cluster.stop().expect("stop");
}

#[test]
fn restarted_node_has_its_pages_erase_counts_and_bad_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start(dir.path(), 2, BackendKind::File);
    let c = client(&cluster, 0);
    for round in 0..3 {
        c.erase_block(block(1, 0, 1, 2)).unwrap_or_else(|e| panic!("erase round {round}: {e}"));
    }
    for p in 0..5 {
        c.program_page(page(1, 0, 1, 2, p), pattern(7 + u64::from(p), 8192), Bytes::from_static(b"oob!")).expect("program");
    }
    let before = c.node_info(1).expect("info");
    drop(c);

    let status = cluster.stop_node(1).expect("SIGTERM stops the node");
    assert!(status.success(), "a node stopped by SIGTERM exits cleanly: {status}");
    cluster.restart_node(1, &exe()).expect("restart");
    let c = client(&cluster, 0);
    for p in 0..5 {
        let read = c.read_page(page(1, 0, 1, 2, p)).expect("read after restart");
        assert_eq!(read.data, pattern(7 + u64::from(p), 8192));
        assert_eq!(&read.oob[..4], b"oob!");
    }
    let after = c.node_info(1).expect("info");
    assert_eq!(after.device.erase_count_max, before.device.erase_count_max);
    assert_eq!(after.device.bad_blocks, before.device.bad_blocks);
    assert_eq!(after.device.programmed_pages, before.device.programmed_pages);
    // The write pointer survived too: the next page in order is page 5.
    let (status, _) = remote_status(c.program_page(page(1, 0, 1, 2, 0), pattern(1, 8192), Bytes::new()));
    assert_eq!(status, Status::AlreadyProgrammed);
    c.program_page(page(1, 0, 1, 2, 5), pattern(12, 8192), Bytes::new()).expect("next page in order");

    // A crash (SIGKILL) loses nothing that was acknowledged.
    drop(c);
    cluster.kill_node(1).expect("kill");
    cluster.restart_node(1, &exe()).expect("restart after kill");
    let c = client(&cluster, 0);
    for p in 0..6 {
        let read = c.read_page(page(1, 0, 1, 2, p)).expect("read after crash");
        assert_eq!(read.data, pattern(7 + u64::from(p), 8192), "page {p} after a crash");
    }
    cluster.stop().expect("stop");
}

#[test]
fn dead_node_fails_fast_with_a_clear_error_while_others_serve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start(dir.path(), 4, BackendKind::Mem);
    let c = client(&cluster, 0);
    for node in [1u16, 3] {
        c.erase_block(block(node, 0, 0, 0)).expect("erase");
        c.program_page(page(node, 0, 0, 0, 0), pattern(u64::from(node), 8192), Bytes::new()).expect("program");
    }
    let dead_addr = cluster.cluster.nodes[3].addr.clone();
    cluster.kill_node(3).expect("kill node 3");
    for attempt in 0..3 {
        let started = Instant::now();
        let (status, message) = remote_status(c.read_page(page(3, 0, 0, 0, 0)));
        let waited = started.elapsed();
        assert_eq!(status, Status::NodeUnreachable, "attempt {attempt}: {message}");
        assert!(message.contains("node 3") && message.contains(&dead_addr), "names the node and its address: {message}");
        // Bounded: well under the client's own request timeout.
        assert!(waited < Duration::from_secs(10), "attempt {attempt} took {waited:?}");
        let read = c.read_page(page(1, 0, 0, 0, 0)).expect("node 1 still serves");
        assert_eq!(read.data, pattern(1, 8192));
    }
    cluster.stop().expect("stop");
}
