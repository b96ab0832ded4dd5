//! The key-value store through its memcached ports on real `quarry node`
//! processes: libmemcached's memcapable, a third-party Rust client,
//! tenants, bad input, a full tenant and a device, kill -9 of durable
//! nodes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use quarry_device::{BackendKind, Geometry};
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quarry"))
}

fn geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 32,
        pages_per_block: 32,
        page_size_bytes: 8192,
        oob_size_bytes: 64,
    }
}

fn start(dir: &Path, nodes: u16, backend: BackendKind, kv_toml: Option<&str>) -> LocalCluster {
    let spec = LocalClusterSpec {
        nodes,
        dir: dir.to_path_buf(),
        backend,
        preset: None,
        geometry: Some(geometry()),
        capacity_bytes: None,
        direct_io: false,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: quarry_device::EccMode::Crc,
        kv_toml: kv_toml.map(str::to_string),
        device_toml: None,
    };
    LocalCluster::start(&spec, &exe()).unwrap_or_else(|e| panic!("cluster did not start: {e:#}"))
}

fn port(cluster: &LocalCluster, node: usize) -> String {
    cluster.cluster.nodes[node]
        .memcached
        .clone()
        .expect("a managed node of quarry up has a memcached port")
}

/// A plain text-protocol connection: send bytes, read until the answer
/// ends the way the caller says.
struct Conn(TcpStream);

impl Conn {
    fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn(s)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).unwrap();
    }

    /// Reads until the answer ends with `end`.
    fn until(&mut self, end: &[u8]) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while !got.ends_with(end) {
            let n = self.0.read(&mut buf).expect("an answer before the timeout");
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    fn ask(&mut self, bytes: &[u8], end: &[u8]) -> String {
        self.send(bytes);
        self.until(end)
    }

    /// Whether the server closes the connection (after any last answer).
    fn closed(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                // A reset is a close too (the server dropped unread bytes).
                Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        }
    }
}

#[test]
fn memcapable_passes_against_a_node() {
    if !quarry_testkit::require_tool("memccapable") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 3, BackendKind::Mem, None);
    let addr = port(&cluster, 1);
    let (host, p) = addr.rsplit_once(':').unwrap();
    let out = Command::new("memccapable")
        .args(["-a", "-h", host, "-p", p, "-t", "10"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("All tests passed"), "{text}");
    assert!(!text.contains("[FAIL]"), "{text}");
}

#[test]
fn a_third_party_rust_client_sees_one_store_through_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 3, BackendKind::Mem, None);
    let client = |node: usize| {
        let url = format!(
            "memcache://{}?protocol=ascii&timeout=10",
            port(&cluster, node)
        );
        memcache::Client::connect(url).unwrap()
    };
    let (a, b, c) = (client(0), client(1), client(2));
    for i in 0..60 {
        a.set(&format!("key-{i}"), format!("value {i}").as_str(), 0)
            .unwrap();
    }
    // Each key lives on one node; any node answers any key.
    for i in 0..60 {
        let got: Option<String> = b.get(&format!("key-{i}")).unwrap();
        assert_eq!(got.as_deref(), Some(format!("value {i}").as_str()));
    }
    let keys: Vec<String> = (0..60).map(|i| format!("key-{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let many: std::collections::HashMap<String, String> = c.gets(&refs).unwrap();
    assert_eq!(many.len(), 60);
    assert_eq!(many["key-7"], "value 7");

    // This client answers an add that stores nothing as Ok; the value shows it.
    c.add("key-1", "other", 0).unwrap();
    assert_eq!(
        b.get::<String>("key-1").unwrap().as_deref(),
        Some("value 1")
    );
    c.replace("key-1", "replaced", 0).unwrap();
    c.append("key-1", "+").unwrap();
    c.prepend("key-1", "-").unwrap();
    assert_eq!(
        a.get::<String>("key-1").unwrap().as_deref(),
        Some("-replaced+")
    );
    assert_eq!(
        a.increment("counter", 1).ok(),
        None,
        "incr of a missing key"
    );
    a.set("counter", 41u64, 0).unwrap();
    assert_eq!(b.increment("counter", 1).unwrap(), 42);
    assert_eq!(c.decrement("counter", 50).unwrap(), 0);
    assert!(b.delete("key-2").unwrap());
    assert!(!c.delete("key-2").unwrap());
    let big = vec![b'x'; 1_000_000];
    a.set("big", big.as_slice(), 0).unwrap();
    let got: Option<Vec<u8>> = c.get("big").unwrap();
    assert_eq!(got.map(|v| v.len()), Some(1_000_000));
    a.flush().unwrap();
    assert_eq!(b.get::<String>("key-3").unwrap(), None);
}

const TENANTS: &str = r#"
[kv]
[[kv.tenants]]
name = "alpha"
secret = "alpha-pw"
max_bytes = 4000000

[[kv.tenants]]
name = "beta"
secret = "beta-pw"
mode = "durable"
max_bytes = 60000
max_keys = 40
"#;

fn login(addr: &str, user: &str, secret: &str) -> Conn {
    let mut c = Conn::open(addr);
    let token = format!("{user} {secret}");
    let answer = c.ask(
        format!("set auth 0 0 {}\r\n{token}\r\n", token.len()).as_bytes(),
        b"\r\n",
    );
    assert_eq!(answer, "STORED\r\n", "login of {user}");
    c
}

#[test]
fn tenants_authenticate_and_never_see_each_others_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 2, BackendKind::Mem, Some(TENANTS));
    let addr = port(&cluster, 0);

    let mut anon = Conn::open(&addr);
    assert_eq!(
        anon.ask(b"get k\r\n", b"\r\n"),
        "CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        anon.ask(b"set auth 0 0 14\r\nalpha beta-pw!\r\n", b"\r\n"),
        "CLIENT_ERROR authentication failure\r\n"
    );
    assert_eq!(
        anon.ask(b"stats\r\n", b"\r\n"),
        "CLIENT_ERROR unauthenticated\r\n"
    );

    let mut a = login(&addr, "alpha", "alpha-pw");
    let mut b = login(&port(&cluster, 1), "beta", "beta-pw");
    let value = "v".repeat(2000);
    for key in ["shared", "only-a"] {
        let cmd = format!("set {key} 3 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(a.ask(cmd.as_bytes(), b"\r\n"), "STORED\r\n");
    }
    // beta cannot read, count, overwrite-as-replace, delete or flush alpha's keys.
    assert_eq!(b.ask(b"get shared only-a\r\n", b"END\r\n"), "END\r\n");
    assert_eq!(
        b.ask(b"replace shared 0 0 1\r\nx\r\n", b"\r\n"),
        "NOT_STORED\r\n"
    );
    assert_eq!(b.ask(b"delete only-a\r\n", b"\r\n"), "NOT_FOUND\r\n");
    assert_eq!(b.ask(b"mg shared v\r\n", b"\r\n"), "EN\r\n");
    assert_eq!(b.ask(b"set shared 0 0 2\r\nbb\r\n", b"\r\n"), "STORED\r\n");
    assert_eq!(b.ask(b"flush_all\r\n", b"\r\n"), "OK\r\n");
    let stats = b.ask(b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT tenant beta\r\n"), "{stats}");
    assert!(stats.contains("STAT curr_items 0\r\n"), "{stats}");
    let got = a.ask(b"get shared only-a\r\n", b"END\r\n");
    assert_eq!(got.matches("VALUE").count(), 2, "{got}");
    assert!(got.contains(&value));
    let stats = a.ask(b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT curr_items 2\r\n"), "{stats}");
    // Two keys with the same 2000 bytes: deduplicated where they share a node.
    assert!(stats.contains("STAT logical_bytes 4000\r\n"), "{stats}");
}

#[test]
fn a_full_tenant_answers_out_of_memory_and_keeps_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 1, BackendKind::File, Some(TENANTS));
    let mut b = login(&port(&cluster, 0), "beta", "beta-pw");
    let mut stored = Vec::new();
    for i in 0..80 {
        let value = format!("{i:0>1000}");
        let answer = b.ask(
            format!("set k{i} 0 0 1000\r\n{value}\r\n").as_bytes(),
            b"\r\n",
        );
        match answer.as_str() {
            "STORED\r\n" => stored.push(i),
            "SERVER_ERROR out of memory storing object\r\n" => {}
            other => panic!("set k{i}: {other}"),
        }
    }
    assert!(
        !stored.is_empty() && stored.len() < 80,
        "{} stored",
        stored.len()
    );
    for i in &stored {
        let got = b.ask(format!("get k{i}\r\n").as_bytes(), b"END\r\n");
        assert!(got.contains(&format!("{i:0>1000}")), "k{i}: {got}");
    }
    // Deleting makes room again.
    assert_eq!(
        b.ask(format!("delete k{}\r\n", stored[0]).as_bytes(), b"\r\n"),
        "DELETED\r\n"
    );
    assert_eq!(b.ask(b"set again 0 0 1\r\nx\r\n", b"\r\n"), "STORED\r\n");
}

#[test]
fn bad_input_gets_memcacheds_answers_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 2, BackendKind::Mem, None);
    let addr = port(&cluster, 0);
    let mut c = Conn::open(&addr);
    assert_eq!(c.ask(b"set keep 0 0 4\r\nsafe\r\n", b"\r\n"), "STORED\r\n");

    assert_eq!(c.ask(b"bogus command\r\n", b"\r\n"), "ERROR\r\n");
    let long_key = "k".repeat(251);
    assert_eq!(
        c.ask(format!("get {long_key}\r\n").as_bytes(), b"\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );
    assert_eq!(
        c.ask(b"set x 0 0 notanumber\r\n", b"\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );
    // A value over the item size is answered, and its bytes swallowed.
    let huge = vec![b'z'; 2 << 20];
    c.send(format!("set huge 0 0 {}\r\n", huge.len()).as_bytes());
    c.send(&huge);
    c.send(b"\r\n");
    assert_eq!(
        c.until(b"\r\n"),
        "SERVER_ERROR object too large for cache\r\n"
    );
    // A data block longer than it said: memcached takes the 3 bytes and
    // the next two as its end, refuses them, and reads on from there (the
    // rest, "f", is an unknown command).
    assert_eq!(
        c.ask(b"set x 0 0 3\r\nabcdef\r\n", b"ERROR\r\n"),
        "CLIENT_ERROR bad data chunk\r\nERROR\r\n"
    );
    assert!(c.ask(b"get keep huge\r\n", b"END\r\n").contains("safe"));

    // Garbage that is not a line at all: a line past the limit closes.
    let mut g = Conn::open(&addr);
    g.send(&vec![b'g'; 100_000]);
    assert!(
        g.closed(),
        "a 100 KB line with no newline must close the connection"
    );

    // Half a command, then gone; half a value, then gone.
    let mut h = Conn::open(&addr);
    h.send(b"set half 0 0 10\r\nabc");
    drop(h);
    let mut h = Conn::open(&addr);
    h.send(b"get ke");
    drop(h);

    let mut d = Conn::open(&port(&cluster, 1));
    assert!(d
        .ask(b"get keep half\r\n", b"END\r\n")
        .ends_with("VALUE keep 0 4\r\nsafe\r\nEND\r\n"));
}

#[test]
fn acknowledged_durable_sets_survive_kill_9_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path(), 2, BackendKind::File, Some(TENANTS));
    let addr = port(&cluster, 0);
    let mut b = login(&addr, "beta", "beta-pw");
    let mut pipeline = Vec::new();
    for i in 0..30 {
        pipeline.extend_from_slice(format!("set d{i} {i} 0 3\r\nv{i:02}\r\n").as_bytes());
    }
    b.send(&pipeline);
    // Every answer of the pipeline, each an acknowledgement.
    let mut answers = String::new();
    while answers.matches("STORED\r\n").count() < 30 {
        answers += &b.until(b"\r\n");
    }
    assert_eq!(answers, "STORED\r\n".repeat(30));
    let mut c = login(&addr, "beta", "beta-pw");
    assert_eq!(c.ask(b"incr n 1\r\n", b"\r\n"), "NOT_FOUND\r\n");
    assert_eq!(c.ask(b"set n 0 0 1\r\n7\r\n", b"\r\n"), "STORED\r\n");
    assert_eq!(c.ask(b"incr n 5\r\n", b"\r\n"), "12\r\n");
    drop(b);
    for id in 0..2 {
        cluster.kill_node(id).unwrap();
    }
    for id in 0..2 {
        cluster.restart_node(id, &exe()).unwrap();
    }
    let mut c = login(&addr, "beta", "beta-pw");
    let keys: Vec<String> = (0..30).map(|i| format!("d{i}")).collect();
    let got = c.ask(
        format!("get {} n\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    for i in 0..30 {
        assert!(
            got.contains(&format!("VALUE d{i} {i} 3\r\nv{i:02}\r\n")),
            "d{i}: {got}"
        );
    }
    assert!(got.contains("VALUE n 0 2\r\n12\r\n"), "{got}");
}

#[test]
fn large_values_arrays_and_big_batches_through_the_rust_client() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 3, BackendKind::Mem, None);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = quarry_client::Client::connect_cluster(&cluster.cluster)
            .await
            .unwrap();
        let kv = client.kv("default", "").await.unwrap();
        // 20 MB: 20 slices of 1 MiB, several on each node, more than one
        // reply holds; fetched in one batch, answered in pieces.
        let big = bytes::Bytes::from(quarry_testkit::noise_bytes(20_000_000, 9));
        kv.set_large(b"big", big.clone(), 0, quarry_client::Expiry::Never)
            .await
            .unwrap();
        assert_eq!(kv.get_large(b"big").await.unwrap().unwrap(), big);
        // Replacing it with a small value leaves no slice behind.
        kv.set_large(
            b"big",
            bytes::Bytes::from_static(b"small"),
            0,
            quarry_client::Expiry::Never,
        )
        .await
        .unwrap();
        assert_eq!(&kv.get_large(b"big").await.unwrap().unwrap()[..], b"small");
        let items: u64 = kv
            .stats()
            .await
            .unwrap()
            .iter()
            .flat_map(|(_, s)| s.iter().filter(|(k, _)| k == "curr_items").map(|(_, v)| *v))
            .sum();
        assert_eq!(items, 1);

        // Twelve values of 1 MiB in one batched get.
        let keys: Vec<bytes::Bytes> = (0..12)
            .map(|i| bytes::Bytes::from(format!("m{i}")))
            .collect();
        let items = keys
            .iter()
            .map(|k| (k.clone(), bytes::Bytes::from(vec![k[1]; 1 << 20])))
            .collect();
        kv.set_many(items, quarry_client::Expiry::Never)
            .await
            .unwrap();
        let got = kv.get_many(&keys).await.unwrap();
        for (k, item) in keys.iter().zip(got) {
            assert_eq!(item.unwrap().value, vec![k[1]; 1 << 20]);
        }

        let elements: Vec<bytes::Bytes> = (0..100u32)
            .map(|i| bytes::Bytes::from(i.to_string()))
            .collect();
        kv.array_set(b"arr", elements, quarry_client::Expiry::Never)
            .await
            .unwrap();
        assert_eq!(kv.array_len(b"arr").await.unwrap(), Some(100));
        assert_eq!(&kv.array_get(b"arr", 42).await.unwrap().unwrap()[..], b"42");
        let some = kv
            .array_get_many(b"arr", &[99, 0, 7])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(some, vec!["99", "0", "7"]);
        let past = kv.array_get(b"arr", 100).await.unwrap_err().to_string();
        assert!(past.contains("index 100 of an array of 100"), "{past}");
        // Bad input is refused before it is sent, and names the rule.
        let long = vec![b'k'; 251];
        let e = kv.get(&long).await.unwrap_err().to_string();
        assert!(e.contains("251 bytes"), "{e}");
        let e = kv
            .set(
                b"k",
                bytes::Bytes::from(vec![0u8; (1 << 20) + 1]),
                0,
                quarry_client::Expiry::Never,
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("set_large"), "{e}");
    });
}

/// 100 000 bytes that name `i`.
fn big_value(i: usize) -> String {
    format!("{i:0>50000}{i:0>50000}")
}

#[test]
fn a_full_device_answers_out_of_memory_keeps_what_it_holds_and_deletes_free_it() {
    // A tenant allowed far more than the device holds: the device's room
    // is what refuses.
    let toml = "[kv]\n[[kv.tenants]]\nname = \"big\"\nsecret = \"big-pw\"\nmode = \"durable\"\nmax_bytes = 100000000000\n";
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path(), 1, BackendKind::File, Some(toml));
    let mut c = login(&port(&cluster, 0), "big", "big-pw");
    let mut stored = Vec::new();
    let mut refused = 0;
    for i in 0..400 {
        let value = big_value(i);
        let answer = c.ask(
            format!("set k{i} 0 0 100000\r\n{value}\r\n").as_bytes(),
            b"\r\n",
        );
        match answer.as_str() {
            "STORED\r\n" => stored.push(i),
            "SERVER_ERROR out of memory storing object\r\n" => refused += 1,
            other => panic!("set k{i}: {other}"),
        }
        if refused >= 3 {
            break;
        }
    }
    assert!(
        refused >= 3 && !stored.is_empty(),
        "{} stored, {refused} refused",
        stored.len()
    );
    for i in &stored {
        let got = c.ask(format!("get k{i}\r\n").as_bytes(), b"END\r\n");
        assert!(got.contains(&big_value(*i)), "k{i} lost");
    }
    let gone: Vec<_> = stored.iter().take(stored.len() / 2).collect();
    for i in &gone {
        assert_eq!(
            c.ask(format!("delete k{i}\r\n").as_bytes(), b"\r\n"),
            "DELETED\r\n"
        );
    }
    let value = "x".repeat(100_000);
    let again = c.ask(
        format!("set again 0 0 100000\r\n{value}\r\n").as_bytes(),
        b"\r\n",
    );
    assert_eq!(again, "STORED\r\n", "deleting half made no room");
}
