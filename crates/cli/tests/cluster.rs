//! Integration tests: real `quarry node` processes on loopback.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_client::{BlockingClient, ClientError, Status};
use quarry_device::{BackendKind, BlockAddr, Geometry, PageAddr};
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quarry"))
}

fn small_geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 8,
        pages_per_block: 16,
        page_size_bytes: 8192,
        oob_size_bytes: 64,
    }
}

fn start(dir: &Path, nodes: u16, backend: BackendKind) -> LocalCluster {
    let spec = LocalClusterSpec {
        nodes,
        dir: dir.to_path_buf(),
        backend,
        preset: None,
        geometry: Some(small_geometry()),
        capacity_bytes: None,
        direct_io: true,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: false,
        ecc: quarry_device::EccMode::Rs,
        kv_toml: None,
        device_toml: None,
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
    GlobalPageAddr {
        node,
        page: PageAddr {
            bus,
            chip,
            block,
            page,
        },
    }
}

fn block(node: u16, bus: u32, chip: u32, block: u32) -> GlobalBlockAddr {
    GlobalBlockAddr {
        node,
        block: BlockAddr { bus, chip, block },
    }
}

fn pattern(seed: u64, len: usize) -> Bytes {
    Bytes::from(quarry_testkit::noise_bytes(len, seed))
}

fn remote_status(result: Result<impl std::fmt::Debug, ClientError>) -> (Status, String) {
    match result {
        Err(ClientError::Remote { status, message }) => (status, message),
        // A page's Debug runs to kilobytes; its head is what tells it apart.
        other => {
            let shown = format!("{other:?}");
            let head: String = shown.chars().take(300).collect();
            panic!("expected an error answer, got {head}")
        }
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
            entry
                .program_page(page(node, 1, 1, 3, p), data, oob)
                .expect("program");
        }
    }
    let reader = client(&cluster, 0);
    for node in 0..4u16 {
        for p in 0..4 {
            let read = reader.read_page(page(node, 1, 1, 3, p)).expect("read");
            assert_eq!(
                read.data,
                pattern(u64::from(node) * 100 + u64::from(p), 8192),
                "node {node} page {p}"
            );
            assert_eq!(&read.oob[..3], &[node as u8, p as u8, 0xAB]);
            assert!(!read.erased);
        }
        let unwritten = reader
            .read_page(page(node, 1, 1, 3, 4))
            .expect("read erased page");
        assert!(unwritten.erased);
        assert!(unwritten.data.iter().all(|&b| b == 0xFF));
    }

    // NAND rules hold through forwarding, with errors that say what was wrong.
    let (status, message) =
        remote_status(reader.program_page(page(2, 1, 1, 3, 0), pattern(1, 8192), Bytes::new()));
    assert_eq!(status, Status::AlreadyProgrammed, "{message}");
    let (status, message) =
        remote_status(reader.program_page(page(2, 1, 1, 3, 9), pattern(1, 8192), Bytes::new()));
    assert_eq!(status, Status::OutOfOrder, "{message}");
    assert!(message.contains("expects page 4"), "{message}");
    let (status, message) = remote_status(reader.read_page(page(3, 7, 0, 0, 0)));
    assert_eq!(status, Status::AddressOutOfRange, "{message}");
    assert!(
        message.contains("bus 0..=1"),
        "the error names the valid range: {message}"
    );
    let (status, message) = remote_status(reader.read_page(page(9, 0, 0, 0, 0)));
    assert_eq!(status, Status::UnknownNode, "{message}");
    assert!(message.contains('9'), "{message}");

    reader.erase_block(block(2, 1, 1, 3)).expect("erase");
    assert!(reader.read_page(page(2, 1, 1, 3, 0)).expect("read").erased);
    assert!(
        !reader.read_page(page(1, 1, 1, 3, 0)).expect("read").erased,
        "other nodes keep their pages"
    );
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
        c.erase_block(block(1, 0, 1, 2))
            .unwrap_or_else(|e| panic!("erase round {round}: {e}"));
    }
    for p in 0..5 {
        c.program_page(
            page(1, 0, 1, 2, p),
            pattern(7 + u64::from(p), 8192),
            Bytes::from_static(b"oob!"),
        )
        .expect("program");
    }
    let before = c.node_info(1).expect("info");
    drop(c);

    let status = cluster.stop_node(1).expect("SIGTERM stops the node");
    assert!(
        status.success(),
        "a node stopped by SIGTERM exits cleanly: {status}"
    );
    cluster.restart_node(1, &exe()).expect("restart");
    let c = client(&cluster, 0);
    for p in 0..5 {
        let read = c
            .read_page(page(1, 0, 1, 2, p))
            .expect("read after restart");
        assert_eq!(read.data, pattern(7 + u64::from(p), 8192));
        assert_eq!(&read.oob[..4], b"oob!");
    }
    let after = c.node_info(1).expect("info");
    assert_eq!(after.device.erase_count_max, before.device.erase_count_max);
    assert_eq!(after.device.bad_blocks, before.device.bad_blocks);
    assert_eq!(
        after.device.programmed_pages,
        before.device.programmed_pages
    );
    // The write pointer survived too: the next page in order is page 5.
    let (status, _) =
        remote_status(c.program_page(page(1, 0, 1, 2, 0), pattern(1, 8192), Bytes::new()));
    assert_eq!(status, Status::AlreadyProgrammed);
    c.program_page(page(1, 0, 1, 2, 5), pattern(12, 8192), Bytes::new())
        .expect("next page in order");

    // A crash (SIGKILL) loses nothing that was acknowledged.
    drop(c);
    cluster.kill_node(1).expect("kill");
    cluster.restart_node(1, &exe()).expect("restart after kill");
    let c = client(&cluster, 0);
    for p in 0..6 {
        let read = c.read_page(page(1, 0, 1, 2, p)).expect("read after crash");
        assert_eq!(
            read.data,
            pattern(7 + u64::from(p), 8192),
            "page {p} after a crash"
        );
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
        c.program_page(
            page(node, 0, 0, 0, 0),
            pattern(u64::from(node), 8192),
            Bytes::new(),
        )
        .expect("program");
    }
    let dead_addr = cluster.cluster.nodes[3].addr.clone();
    cluster.kill_node(3).expect("kill node 3");
    for attempt in 0..3 {
        let started = Instant::now();
        let (status, message) = remote_status(c.read_page(page(3, 0, 0, 0, 0)));
        let waited = started.elapsed();
        assert_eq!(
            status,
            Status::NodeUnreachable,
            "attempt {attempt}: {message}"
        );
        assert!(
            message.contains("node 3") && message.contains(&dead_addr),
            "names the node and its address: {message}"
        );
        // Bounded: well under the client's own request timeout.
        assert!(
            waited < Duration::from_secs(10),
            "attempt {attempt} took {waited:?}"
        );
        let read = c
            .read_page(page(1, 0, 0, 0, 0))
            .expect("node 1 still serves");
        assert_eq!(read.data, pattern(1, 8192));
    }
    cluster.stop().expect("stop");
}

/// Flips bytes of one page in a stopped node's backing file.
fn corrupt(node_dir: &Path, addr: PageAddr, offsets_in_page: &[usize]) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let layout = quarry_device::SlotLayout::new(&small_geometry()).expect("layout");
    let base = layout.slot_offset(small_geometry().page_index(addr));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(node_dir.join("pages.bin"))
        .expect("open backing file");
    for &offset in offsets_in_page {
        let mut byte = [0u8; 1];
        file.seek(SeekFrom::Start(base + offset as u64))
            .expect("seek");
        file.read_exact(&mut byte).expect("read");
        byte[0] ^= 0x5A;
        file.seek(SeekFrom::Start(base + offset as u64))
            .expect("seek");
        file.write_all(&byte).expect("write");
    }
    file.sync_all().expect("sync");
}

#[test]
fn damaged_pages_are_corrected_or_reported_uncorrectable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = start(dir.path(), 2, BackendKind::File);
    let c = client(&cluster, 0);
    c.erase_block(block(1, 1, 0, 5)).expect("erase");
    for p in 0..3 {
        c.program_page(
            page(1, 1, 0, 5, p),
            pattern(40 + u64::from(p), 8192),
            Bytes::from_static(b"keep"),
        )
        .expect("program");
    }
    drop(c);
    cluster.stop_node(1).expect("stop");
    let node_dir = cluster.cluster.nodes[1]
        .config
        .as_ref()
        .and_then(|c| c.parent())
        .expect("node dir")
        .to_path_buf();
    let addr = |p| PageAddr {
        bus: 1,
        chip: 0,
        block: 5,
        page: p,
    };
    // Page 0: scattered bytes and a 20-byte burst, within the code's strength.
    let mut offsets = vec![10, 500, 2049, 7000];
    offsets.extend(3000..3020);
    corrupt(&node_dir, addr(0), &offsets);
    // Page 1: a whole 600-byte run wiped, far beyond it.
    corrupt(&node_dir, addr(1), &(1024..1624).collect::<Vec<_>>());
    cluster.restart_node(1, &exe()).expect("restart");

    let c = client(&cluster, 0);
    let read = c
        .read_page(page(1, 1, 0, 5, 0))
        .expect("a correctable page reads");
    assert_eq!(
        read.data,
        pattern(40, 8192),
        "corrected data equals what was written"
    );
    assert_eq!(read.corrected_bytes as usize, offsets.len());
    let (status, message) = remote_status(c.read_page(page(1, 1, 0, 5, 1)));
    assert_eq!(status, Status::Uncorrectable, "{message}");
    assert!(
        message.contains("1:0:5:1"),
        "the error names the page: {message}"
    );
    // The damage stays confined to its page.
    let read = c.read_page(page(1, 1, 0, 5, 2)).expect("a neighbour reads");
    assert_eq!(read.data, pattern(42, 8192));
    assert_eq!(read.corrected_bytes, 0);
    cluster.stop().expect("stop");
}

#[test]
fn malformed_frames_never_take_a_node_down() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start(dir.path(), 2, BackendKind::Mem);
    let addr = cluster.cluster.nodes[0].addr.clone();
    let mut header = vec![
        b'Q',
        b'R',
        quarry_proto::PROTOCOL_VERSION,
        0x01,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        7,
    ];
    let garbage: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        // A valid magic and version announcing a 4 GiB body: must be refused, not allocated.
        {
            let mut h = header.clone();
            h.extend_from_slice(&u32::MAX.to_be_bytes());
            h
        },
        // A truncated header, then the connection closes.
        header[..9].to_vec(),
        // A valid header with a body too short for its opcode.
        {
            header.extend_from_slice(&3u32.to_be_bytes());
            header.extend_from_slice(&[1, 2, 3]);
            header
        },
    ];
    for bytes in garbage {
        let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream.write_all(&bytes).expect("write");
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        // Either an error frame or a closed connection; never a hang (bounded by the timeout).
        let _ = stream.read_to_end(&mut answer);
        assert!(answer.len() < 4096, "no unbounded answer to garbage");
    }
    let c = client(&cluster, 0);
    c.ping().expect("the node still serves");
    c.erase_block(block(1, 0, 0, 0)).expect("and forwards");
    cluster.stop().expect("stop");
}
