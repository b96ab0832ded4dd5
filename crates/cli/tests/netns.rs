//! The fabric over a real network: four `quarry node` processes, each in its
//! own Linux network namespace, linked by veth pairs (iproute2).
//!
//! ```text
//!   root ns (this test, the client)
//!      |  veth, a /30 chosen per run
//!    node 0 --- node 1 --- node 2 --- node 3
//!      |                                 |
//!      +------ link 3-0, added later ----+
//! ```
//!
//! Every node is configured with the ring's links from the start, but the 3-0
//! veth only appears halfway through, so the fabric first runs as a line. Node
//! 0 listens on its address on the veth to the root namespace; nodes 1..3
//! listen on an address of their own on `lo`, and each namespace has a /32
//! route to its neighbours' addresses over the link between them, so a node
//! has one address however many links it has (as a deployed node would).
//!
//! The test checks, over real sockets and real interfaces:
//! 1. discovery across 3 hops of a line, pages programmed and read back there;
//! 2. that a slower link shows in the read latency (tc netem delay, or a tbf
//!    rate limit where the kernel has no netem) and the data stays right;
//! 3. that a link coming up late is used at once (node 0 reaches node 3
//!    directly once the ring closes);
//! 4. that a cut link (interface down: nothing more is heard, no FIN, no RST)
//!    is declared dead and routed around while a reader runs, with every read
//!    either right or a clear error, never wrong data;
//! 5. that a node cut off completely fails requests with a clear error in
//!    bounded time.
//!
//! It runs in the test command (about 10 s). Without root, `ip` or `tc` it
//! fails, naming what is missing (quarry_testkit).

use std::fmt::Write as _;
use std::io::Read as _;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_client::{Client, ClientError, Status};
use quarry_device::{BlockAddr, PageAddr, PageRead};
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, RoutesInfo, SessionLimits};

/// Every node listens on this port (each in its own namespace).
const PORT: u16 = 7400;
const NODES: usize = 4;
/// The fabric's timings, written into every node's `[limits]` (the defaults).
const KEEPALIVE_MS: u64 = 200;
const DEAD_AFTER_MS: u64 = 1000;
const ROUTE_WAIT_MS: u64 = 1000;
const CONNECT_TIMEOUT_MS: u64 = 1500;
const RETRY_BACKOFF_MS: u64 = 500;
/// The client gives up on any one request after this long; a request that
/// takes it has hung as far as this test is concerned.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Pages programmed on each of nodes 2 and 3.
const PAGES: u32 = 8;
const PAGE_BYTES: usize = 8192;
/// Reads per latency sample.
const LATENCY_READS: usize = 50;

/// The links of the ring, in the order they are numbered: link `k` (1-based)
/// joins `RING[k - 1]` over 10.77.k.0/24, its first node at .1, its second
/// at .2. Link 4 (0-3) is created only once the line has been tested.
const RING: [(usize, usize); 4] = [(0, 1), (1, 2), (2, 3), (0, 3)];

#[test]
#[allow(clippy::too_many_lines)] // one scenario, step by step
fn four_namespaces_line_then_ring_delay_cut_and_isolation() {
    let tag = format!("{}", std::process::id());
    if !quarry_testkit::require(
        "network namespaces, veth pairs and tc (root and iproute2)",
        "scripts/setup.sh installs iproute2; the test command runs as root, as CI does",
        probe(&tag),
    ) {
        return;
    }
    remove_stale_namespaces();
    let started = Instant::now();
    let mut timings: Vec<(String, Duration)> = Vec::new();
    let mut net = Net::new(&tag);
    net.build_line();
    net.start_nodes();
    let entry = net.node_addr(0);
    let (client, waited) = net.wait_for("node 0 to answer a ping", Duration::from_secs(20), || {
        let client = Probe::connect(&entry)?;
        client.ping()?;
        Ok(client)
    });
    timings.push(("node 0 serving".into(), waited));

    // --- The line 0-1-2-3: discovery over three hops. ---
    let (_, waited) = net.wait_for(
        "node 0 to route to node 3 at 3 hops via node 1",
        Duration::from_secs(15),
        || {
            let routes = client.routes(0)?;
            expect_route(&routes, 3, 1, 3)?;
            expect_route(&routes, 2, 1, 2)?;
            expect_route(&routes, 1, 1, 1)?;
            Ok(())
        },
    );
    timings.push(("line discovered".into(), waited));
    let routes3 = client.routes(3).expect("node 3's routes, 3 hops away");
    assert_eq!(
        route_of(&routes3, 0),
        Some((2, 3)),
        "node 3 reaches node 0 over the line: {}",
        describe(&routes3)
    );
    let members = client.cluster().expect("cluster members");
    let addrs: Vec<String> = members.iter().map(|m| m.addr.clone()).collect();
    let expected: Vec<String> = (0..NODES).map(|i| net.node_addr(i)).collect();
    assert_eq!(
        addrs, expected,
        "each node advertises the address it listens on"
    );

    for node in [2u16, 3] {
        client
            .erase_block(block(node))
            .unwrap_or_else(|e| panic!("erase a block of node {node} through node 0: {e}"));
        for p in 0..PAGES {
            client
                .program_page(page(node, p), pattern(node, p), oob(node, p))
                .unwrap_or_else(|e| panic!("program node {node} page {p} through node 0: {e}"));
        }
    }
    for node in [2u16, 3] {
        for p in 0..PAGES {
            let read = client
                .read_page(page(node, p))
                .unwrap_or_else(|e| panic!("read node {node} page {p} from node 0: {e}"));
            if let Err(wrong) = check_page(&read, node, p) {
                panic!("node {node} page {p} read from node 0: {wrong}");
            }
        }
    }

    // --- A slow link 1-2 shows in the latency of node 3's pages. ---
    let (baseline, _) = read_latency(&client, 3);
    let shaped_if = net.link_if(2, 2);
    let shaped_ns = net.ns(2);
    // A kernel without either qdisc fails the test (the check is part of it).
    let slowed_by = quarry_testkit::need(
        "a tc qdisc that slows a link (netem, or else tbf)",
        "the kernel needs sch_netem or sch_tbf; tc is iproute2's (scripts/setup.sh)",
        add_slow_qdisc(&shaped_ns, &shaped_if),
    );
    match slowed_by {
        Some(how) => {
            net.qdisc = Some((shaped_ns.clone(), shaped_if.clone()));
            let (slowed, worst) = read_latency(&client, 3);
            net.del_qdisc();
            let rise = slowed.saturating_sub(baseline);
            eprintln!(
                "netns: QD1 read of node 3 from node 0 (3 hops): median {baseline:?}; \
                 with {how} on node 2's end of link 1-2: median {slowed:?} (slowest {worst:?})"
            );
            assert!(
                rise >= Duration::from_millis(15),
                "{how} on link 1-2 should add at least 15 ms to a 3-hop read, \
                 but the median went from {baseline:?} to {slowed:?}"
            );
            timings.push(("median rise from the slow link".into(), rise));
        }
        None => eprintln!("netns: latency check skipped by the developer's choice"),
    }

    // --- Close the ring: the late link 3-0 is used as soon as it is up. ---
    net.add_link(4);
    let (_, waited) = net.wait_for(
        "node 0 to route to node 3 directly once link 3-0 exists",
        Duration::from_secs(10),
        || {
            let routes = client.routes(0)?;
            expect_route(&routes, 3, 3, 1)?;
            expect_route(&routes, 2, 1, 2)?;
            Ok(())
        },
    );
    timings.push(("ring closed: 3-0 link up and routed".into(), waited));
    let read = client
        .read_page(page(3, 0))
        .expect("read node 3 over link 3-0");
    check_page(&read, 3, 0).expect("node 3 page 0 over link 3-0");

    // --- Cut link 1-2 while a reader reads node 2's pages through node 0. ---
    let reader = Reader::start(&entry, 2);
    net.wait_for(
        "the reader to read node 2 before the cut",
        Duration::from_secs(10),
        || reader.successes_after(reader.started, 20),
    );
    let cut = Instant::now();
    net.set_link_down(2, 1);
    let (_, rerouted) = net.wait_for(
        "node 0 to reach node 2 via node 3 after link 1-2 is cut",
        Duration::from_millis(DEAD_AFTER_MS * 5 + 2000),
        || {
            let routes = client.routes(0)?;
            expect_route(&routes, 2, 3, 2)?;
            Ok(())
        },
    );
    let rerouted_at = cut + rerouted;
    timings.push(("link 1-2 cut: rerouted via node 3".into(), rerouted));
    net.wait_for(
        "the reader to read node 2 again after the reroute",
        Duration::from_secs(10),
        || reader.successes_after(rerouted_at, 20),
    );
    let outcomes = reader.stop();
    let summary = judge_reads(&outcomes, cut, rerouted_at);
    eprintln!("netns: reader during the cut of link 1-2: {summary}");
    let routes1 = client.routes(1).expect("node 1's routes");
    assert!(
        routes1.links.iter().all(|l| l.peer != 2),
        "node 1 no longer lists its dead link to node 2: {}",
        describe(&routes1)
    );
    assert!(
        rerouted <= Duration::from_millis(DEAD_AFTER_MS + 3 * KEEPALIVE_MS + 1500),
        "rerouting took {rerouted:?}; links are declared dead after {DEAD_AFTER_MS} ms"
    );

    // --- Cut link 2-3 too: node 2 is cut off; requests fail, in bounded time. ---
    let isolated = Instant::now();
    net.set_link_down(3, 3);
    let bound = Duration::from_millis(DEAD_AFTER_MS + ROUTE_WAIT_MS + 2000);
    let (result, took) = timed(|| client.read_page(page(2, 0)));
    expect_clear_failure(
        result,
        took,
        bound,
        "the first read after node 2 is cut off",
    );
    net.wait_for(
        "node 0 to lose its route to node 2",
        Duration::from_millis(DEAD_AFTER_MS * 5 + 2000),
        || match route_of(&client.routes(0)?, 2) {
            None => Ok(()),
            Some(route) => Err(format!("node 0 still routes to node 2 as {route:?}")),
        },
    );
    timings.push(("link 2-3 cut: node 2 unroutable".into(), isolated.elapsed()));
    let (result, took) = timed(|| client.read_page(page(2, 1)));
    expect_clear_failure(result, took, bound, "a read of node 2 once it has no route");
    assert!(
        took >= Duration::from_millis(ROUTE_WAIT_MS / 2),
        "a read of a known node without a route waits for one (route_wait_ms = {ROUTE_WAIT_MS}) \
         before failing, but it failed after {took:?}"
    );
    // The rest of the cluster is unaffected.
    for p in 0..PAGES {
        let read = client
            .read_page(page(3, p))
            .expect("node 3 is still reachable over link 3-0");
        check_page(&read, 3, p).expect("node 3's pages stay right");
    }
    client
        .node_info(1)
        .expect("node 1 is still reachable over link 0-1");

    timings.push(("whole test".into(), started.elapsed()));
    let mut report = String::new();
    for (what, took) in &timings {
        let _ = write!(report, "\n  {what}: {} ms", took.as_millis());
    }
    eprintln!("netns: timings:{report}");
    net.stop_nodes();
}

// ---------------------------------------------------------------------------
// The network.

/// The namespaces, veths and node processes of one run. Dropping it (also
/// when the test panics) kills the nodes and deletes everything it created;
/// after a panic it first prints the tail of every node's log.
struct Net {
    tag: String,
    root_subnet: [u8; 3],
    root_host: u8,
    exe: PathBuf,
    dir: Option<tempfile::TempDir>,
    namespaces: Vec<String>,
    root_ifs: Vec<String>,
    nodes: Vec<Option<Child>>,
    logs: Vec<PathBuf>,
    qdisc: Option<(String, String)>,
}

impl Net {
    fn new(tag: &str) -> Net {
        let (root_subnet, root_host) = free_root_subnet(tag);
        let dir = tempfile::Builder::new()
            .prefix("quarry-netns-")
            .tempdir()
            .expect("create a tempdir for node configs and logs");
        Net {
            tag: tag.to_string(),
            root_subnet,
            root_host,
            exe: PathBuf::from(env!("CARGO_BIN_EXE_quarry")),
            dir: Some(dir),
            namespaces: Vec::new(),
            root_ifs: Vec::new(),
            nodes: Vec::new(),
            logs: Vec::new(),
            qdisc: None,
        }
    }

    fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("the tempdir lives as long as the net")
            .path()
    }

    fn ns(&self, node: usize) -> String {
        format!("quarry-netns-{}-n{node}", self.tag)
    }

    /// The interface of `node` on ring link `k` (at most 15 characters).
    fn link_if(&self, k: usize, node: usize) -> String {
        let (a, _) = RING[k - 1];
        format!("q{}l{k}{}", self.tag, if node == a { 'a' } else { 'b' })
    }

    fn link_ip(&self, k: usize, node: usize) -> Ipv4Addr {
        let (a, _) = RING[k - 1];
        Ipv4Addr::new(10, 77, k as u8, if node == a { 1 } else { 2 })
    }

    /// Where node `node` listens: node 0 on the veth to the root namespace,
    /// the others on an address of their own on `lo`.
    fn node_ip(&self, node: usize) -> Ipv4Addr {
        if node == 0 {
            let [a, b, c] = self.root_subnet;
            Ipv4Addr::new(a, b, c, self.root_host + 1)
        } else {
            Ipv4Addr::new(10, 78, 0, node as u8)
        }
    }

    fn node_addr(&self, node: usize) -> String {
        format!("{}:{PORT}", self.node_ip(node))
    }

    /// Namespaces for every node, the veth from the root namespace to node
    /// 0, and links 1-3 of the ring (a line).
    fn build_line(&mut self) {
        for node in 0..NODES {
            let ns = self.ns(node);
            run("ip", &["netns", "add", &ns]).expect("create a node's namespace");
            self.namespaces.push(ns.clone());
            run("ip", &["-n", &ns, "link", "set", "lo", "up"]).expect("bring lo up");
            if node > 0 {
                let ip = format!("{}/32", self.node_ip(node));
                run("ip", &["-n", &ns, "addr", "add", &ip, "dev", "lo"])
                    .expect("give a node its address on lo");
            }
        }
        let root_if = format!("q{}r", self.tag);
        let node0_if = format!("q{}r0", self.tag);
        let ns0 = self.ns(0);
        run(
            "ip",
            &[
                "link", "add", &root_if, "type", "veth", "peer", "name", &node0_if, "netns", &ns0,
            ],
        )
        .expect("create the veth from the root namespace to node 0");
        self.root_ifs.push(root_if.clone());
        let [a, b, c] = self.root_subnet;
        let root_ip = format!("{}/30", Ipv4Addr::new(a, b, c, self.root_host));
        let node0_ip = format!("{}/30", self.node_ip(0));
        run("ip", &["addr", "add", &root_ip, "dev", &root_if]).expect("address the root end");
        run(
            "ip",
            &["-n", &ns0, "addr", "add", &node0_ip, "dev", &node0_if],
        )
        .expect("address node 0's end of the root veth");
        run("ip", &["-n", &ns0, "link", "set", &node0_if, "up"]).expect("node 0's end up");
        run("ip", &["link", "set", &root_if, "up"]).expect("root end up");
        for k in 1..=3 {
            self.add_link(k);
        }
    }

    /// Creates ring link `k`: the veth, its addresses, and a route on each
    /// side to the other node's address through it.
    fn add_link(&mut self, k: usize) {
        let (a, b) = RING[k - 1];
        let (ns_a, ns_b) = (self.ns(a), self.ns(b));
        let (if_a, if_b) = (self.link_if(k, a), self.link_if(k, b));
        run(
            "ip",
            &[
                "link", "add", &if_a, "netns", &ns_a, "type", "veth", "peer", "name", &if_b,
                "netns", &ns_b,
            ],
        )
        .unwrap_or_else(|e| panic!("create the veth of link {a}-{b}: {e}"));
        for (ns, ifname, me, other) in [(&ns_a, &if_a, a, b), (&ns_b, &if_b, b, a)] {
            let ip = format!("{}/24", self.link_ip(k, me));
            run("ip", &["-n", ns, "addr", "add", &ip, "dev", ifname])
                .unwrap_or_else(|e| panic!("address node {me}'s end of link {a}-{b}: {e}"));
            run("ip", &["-n", ns, "link", "set", ifname, "up"])
                .unwrap_or_else(|e| panic!("bring up node {me}'s end of link {a}-{b}: {e}"));
            let to = format!("{}/32", self.node_ip(other));
            let via = self.link_ip(k, other).to_string();
            run("ip", &["-n", ns, "route", "add", &to, "via", &via])
                .unwrap_or_else(|e| panic!("route node {me} to node {other} over {a}-{b}: {e}"));
        }
    }

    /// Takes `node`'s end of ring link `k` down: the link goes silent.
    fn set_link_down(&mut self, k: usize, node: usize) {
        let (ns, ifname) = (self.ns(node), self.link_if(k, node));
        run("ip", &["-n", &ns, "link", "set", &ifname, "down"])
            .unwrap_or_else(|e| panic!("take {ifname} down in {ns}: {e}"));
    }

    fn del_qdisc(&mut self) {
        if let Some((ns, ifname)) = self.qdisc.take() {
            run(
                "ip",
                &[
                    "netns", "exec", &ns, "tc", "qdisc", "del", "dev", &ifname, "root",
                ],
            )
            .unwrap_or_else(|e| panic!("remove the qdisc of {ifname}: {e}"));
        }
    }

    fn start_nodes(&mut self) {
        for node in 0..NODES {
            let node_dir = self.dir().join(format!("node-{node}"));
            std::fs::create_dir_all(&node_dir).expect("create a node's data folder");
            let config = node_dir.join("node.toml");
            std::fs::write(&config, self.node_config(node)).expect("write a node's config");
            let log_path = node_dir.join("node.log");
            let log = std::fs::File::create(&log_path).expect("create a node's log");
            let log_err = log.try_clone().expect("duplicate a log handle");
            let mut command = Command::new("ip");
            command
                .args(["netns", "exec", &self.ns(node)])
                .arg(&self.exe)
                .arg("node")
                .arg("--config")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err);
            if std::env::var_os("RUST_LOG").is_none() {
                command.env("RUST_LOG", "info");
            }
            // Plain text in the log files, which the test prints on failure.
            command.env("NO_COLOR", "1");
            // SAFETY: prctl(2) is async-signal-safe and touches no memory of
            // this process. The node dies with this test's thread even if
            // the test is killed before its guard can run (`ip netns exec`
            // execs the node in place, keeping the setting).
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = command
                .spawn()
                .unwrap_or_else(|e| panic!("start node {node} with `ip netns exec`: {e}"));
            self.nodes.push(Some(child));
            self.logs.push(log_path);
        }
    }

    fn node_config(&self, node: usize) -> String {
        let mut text = format!(
            "id = {node}\nlisten = \"{}\"\ndata_dir = \".\"\n\n\
             [device]\nbackend = \"mem\"\n\n\
             [device.geometry]\nbuses = 2\nchips_per_bus = 2\nblocks_per_chip = 4\n\
             pages_per_block = 16\npage_size_bytes = {PAGE_BYTES}\noob_size_bytes = 64\n\n\
             [limits]\nkeepalive_interval_ms = {KEEPALIVE_MS}\nlink_dead_after_ms = {DEAD_AFTER_MS}\n\
             route_wait_ms = {ROUTE_WAIT_MS}\nconnect_timeout_ms = {CONNECT_TIMEOUT_MS}\n\
             retry_backoff_ms = {RETRY_BACKOFF_MS}\n",
            self.node_addr(node)
        );
        for &(a, b) in &RING {
            let peer = match node {
                n if n == a => b,
                n if n == b => a,
                _ => continue,
            };
            let _ = write!(
                text,
                "\n[[peers]]\nid = {peer}\naddr = \"{}\"\n",
                self.node_addr(peer)
            );
        }
        text
    }

    /// Nodes that exited, as `node N exited with STATUS`.
    fn exited(&mut self) -> Vec<String> {
        let mut exited = Vec::new();
        for (node, child) in self.nodes.iter_mut().enumerate() {
            if let Some(child) = child {
                if let Ok(Some(status)) = child.try_wait() {
                    exited.push(format!("node {node} exited with {status}"));
                }
            }
        }
        exited
    }

    /// Polls `check` until it returns Ok or `timeout` passes; fails the test
    /// with what `check` last reported, and fails at once if a node exited.
    fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> (T, Duration) {
        let start = Instant::now();
        loop {
            let exited = self.exited();
            assert!(
                exited.is_empty(),
                "waiting for {what}: {}",
                exited.join(", ")
            );
            let last = match check() {
                Ok(value) => return (value, start.elapsed()),
                Err(last) => last,
            };
            assert!(
                start.elapsed() < timeout,
                "waited {timeout:?} for {what}; last seen: {last}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the nodes with SIGTERM and checks they exit cleanly.
    fn stop_nodes(&mut self) {
        for (node, child) in self.nodes.iter_mut().enumerate() {
            let Some(mut child) = child.take() else {
                continue;
            };
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            let status = loop {
                match child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => break None,
                }
            };
            match status {
                Some(status) => assert!(
                    status.success(),
                    "node {node} exited with {status} after SIGTERM"
                ),
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("node {node} did not stop within 10 s of SIGTERM");
                }
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for (node, log) in self.logs.iter().enumerate() {
                eprintln!(
                    "---- node {node} log ({}), last lines ----\n{}",
                    log.display(),
                    tail(log, 6000)
                );
            }
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "netns: node configs and logs kept in {}",
                    dir.keep().display()
                );
            }
        }
        for ifname in &self.root_ifs {
            let _ = run("ip", &["link", "del", ifname]);
        }
        for ns in &self.namespaces {
            if let Err(e) = run("ip", &["netns", "del", ns]) {
                eprintln!("netns: could not delete namespace {ns}: {e}");
            }
        }
    }
}

/// Runs `program` with `args`; the error carries the command and its stderr.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Whether this machine lets the test build its network; the error says
/// exactly what is missing.
fn probe(tag: &str) -> Result<(), String> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    for (tool, arg) in [("ip", "-V"), ("tc", "-V")] {
        if let Err(e) = run(tool, &[arg]) {
            return Err(format!(
                "`{tool}` (iproute2) is not usable here: {e}; install iproute2"
            ));
        }
    }
    let ns = format!("quarry-netns-{tag}-probe");
    run("ip", &["netns", "add", &ns]).map_err(|e| {
        format!("cannot create a network namespace (running as uid {euid}; this needs root or CAP_SYS_ADMIN): {e}")
    })?;
    let veth = run(
        "ip",
        &[
            "link",
            "add",
            &format!("q{tag}p0"),
            "netns",
            &ns,
            "type",
            "veth",
            "peer",
            "name",
            &format!("q{tag}p1"),
            "netns",
            &ns,
        ],
    );
    let deleted = run("ip", &["netns", "del", &ns]);
    veth.map_err(|e| format!("cannot create a veth pair in a namespace: {e}"))?;
    deleted.map_err(|e| format!("cannot delete a network namespace: {e}"))?;
    Ok(())
}

/// Deletes namespaces left by runs of this test that were killed before
/// their guard ran (their pid is gone).
fn remove_stale_namespaces() {
    let Ok(list) = run("ip", &["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("quarry-netns-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("netns: deleting namespace {name} left by a run that died");
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}

/// A /30 of 10.0.0.0/8 for the veth between the root namespace and node 0,
/// chosen from the pid so that concurrent runs differ, and skipped past any
/// block whose addresses the root namespace already has.
fn free_root_subnet(tag: &str) -> ([u8; 3], u8) {
    let pid: u32 = tag.parse().expect("the tag is the pid");
    let in_use = run("ip", &["-4", "-o", "addr", "show"]).unwrap_or_default();
    for attempt in 0..256u32 {
        let n = pid.wrapping_add(attempt * 7919);
        let b = 200 + ((n >> 14) % 50) as u8;
        let c = ((n >> 6) & 0xff) as u8;
        let host = ((n & 0x3f) << 2) as u8 + 1;
        let taken = (0..4).any(|i| {
            let addr = format!(" 10.{b}.{c}.{}/", (host - 1) + i);
            in_use.contains(&addr)
        });
        if !taken {
            return ([10, b, c], host);
        }
    }
    panic!("no free /30 in 10.200.0.0/10 for the root veth");
}

/// Slows `ifname`'s egress: a 20 ms netem delay where the kernel has netem,
/// else a 1 Mbit/s tbf rate limit (an 8 KiB page then takes ~50 ms more).
fn add_slow_qdisc(ns: &str, ifname: &str) -> Result<String, String> {
    let tc = |args: &[&str]| {
        let mut full = vec![
            "netns", "exec", ns, "tc", "qdisc", "add", "dev", ifname, "root",
        ];
        full.extend_from_slice(args);
        run("ip", &full)
    };
    match tc(&["netem", "delay", "20ms"]) {
        Ok(_) => Ok("netem delay 20ms".into()),
        Err(netem) => match tc(&["tbf", "rate", "1mbit", "burst", "2kb", "limit", "256kb"]) {
            Ok(_) => Ok(format!(
                "tbf rate 1mbit (netem is not available: {})",
                netem.rsplit(": ").next().unwrap_or(&netem)
            )),
            Err(tbf) => Err(format!("neither netem nor tbf works: {netem}; {tbf}")),
        },
    }
}

fn tail(path: &Path, bytes: usize) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let start = text.len().saturating_sub(bytes);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_string()
}

// ---------------------------------------------------------------------------
// The client side.

/// A client of node 0 whose every request gives up after [`CLIENT_TIMEOUT`].
struct Probe {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl Probe {
    fn connect(addr: &str) -> Result<Probe, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build a client runtime: {e}"))?;
        let limits = SessionLimits {
            connect_timeout: Duration::from_secs(2),
            request_timeout: CLIENT_TIMEOUT,
            ..SessionLimits::default()
        };
        let client = runtime
            .block_on(Client::connect_with(addr, limits))
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        Ok(Probe { runtime, client })
    }

    fn ping(&self) -> Result<(), String> {
        self.runtime
            .block_on(self.client.ping())
            .map_err(|e| format!("ping: {e}"))
    }

    fn routes(&self, node: u16) -> Result<RoutesInfo, String> {
        self.runtime
            .block_on(self.client.routes(node))
            .map_err(|e| format!("routes of node {node}: {e}"))
    }

    fn cluster(&self) -> Result<Vec<quarry_proto::NodeEntry>, ClientError> {
        self.runtime.block_on(self.client.cluster())
    }

    fn node_info(&self, node: u16) -> Result<quarry_proto::NodeInfo, ClientError> {
        self.runtime.block_on(self.client.node_info(node))
    }

    fn read_page(&self, addr: GlobalPageAddr) -> Result<PageRead, ClientError> {
        self.runtime.block_on(self.client.read_page(addr))
    }

    fn program_page(
        &self,
        addr: GlobalPageAddr,
        data: Bytes,
        oob: Bytes,
    ) -> Result<(), ClientError> {
        self.runtime
            .block_on(self.client.program_page(addr, data, oob))
    }

    fn erase_block(&self, addr: GlobalBlockAddr) -> Result<(), ClientError> {
        self.runtime.block_on(self.client.erase_block(addr))
    }
}

fn page(node: u16, p: u32) -> GlobalPageAddr {
    GlobalPageAddr {
        node,
        page: PageAddr {
            bus: 1,
            chip: 0,
            block: 2,
            page: p,
        },
    }
}

fn block(node: u16) -> GlobalBlockAddr {
    GlobalBlockAddr {
        node,
        block: BlockAddr {
            bus: 1,
            chip: 0,
            block: 2,
        },
    }
}

/// Page `p` of `node`'s data: different for every page of every node, so a
/// page delivered for the wrong request cannot pass for the right one.
fn pattern(node: u16, p: u32) -> Bytes {
    Bytes::from(quarry_testkit::noise_bytes(
        PAGE_BYTES,
        u64::from(node) << 32 | u64::from(p),
    ))
}

fn oob(node: u16, p: u32) -> Bytes {
    Bytes::from(vec![0x51, node as u8, p as u8])
}

fn check_page(read: &PageRead, node: u16, p: u32) -> Result<(), String> {
    if read.erased {
        return Err("came back erased".into());
    }
    if read.data != pattern(node, p) {
        let other = (0..PAGES)
            .flat_map(|q| [(2u16, q), (3u16, q)])
            .find(|&(n, q)| read.data == pattern(n, q));
        return Err(match other {
            Some((n, q)) => format!("WRONG DATA: got node {n} page {q}'s data"),
            None => format!("WRONG DATA: {} bytes matching no page", read.data.len()),
        });
    }
    if read.oob.get(..3) != Some(&oob(node, p)[..]) {
        return Err(format!(
            "WRONG OOB: {:?}",
            &read.oob[..read.oob.len().min(8)]
        ));
    }
    Ok(())
}

/// Median and slowest of [`LATENCY_READS`] QD1 reads of `node`'s pages; every
/// read must return the right data.
fn read_latency(client: &Probe, node: u16) -> (Duration, Duration) {
    let mut samples = Vec::with_capacity(LATENCY_READS);
    for i in 0..LATENCY_READS {
        let p = i as u32 % PAGES;
        let (read, took) = timed(|| client.read_page(page(node, p)));
        let read = read.unwrap_or_else(|e| panic!("read node {node} page {p}: {e}"));
        if let Err(wrong) = check_page(&read, node, p) {
            panic!("node {node} page {p}: {wrong}");
        }
        samples.push(took);
    }
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// Asserts that `result` is a NodeUnreachable or Timeout answer that came
/// within `bound`.
fn expect_clear_failure(
    result: Result<PageRead, ClientError>,
    took: Duration,
    bound: Duration,
    what: &str,
) {
    match result {
        Err(ClientError::Remote { status, message })
            if matches!(status, Status::NodeUnreachable | Status::Timeout) =>
        {
            eprintln!(
                "netns: {what}: {status:?} after {} ms: {message}",
                took.as_millis()
            );
            assert!(
                took <= bound,
                "{what} failed as it should ({status:?}: {message}) but only after {took:?}, \
                 more than {bound:?}"
            );
        }
        Err(other) => panic!("{what}: expected NodeUnreachable or Timeout, got: {other}"),
        Ok(_) => panic!("{what}: a node that is cut off answered"),
    }
}

fn route_of(routes: &RoutesInfo, dest: u16) -> Option<(u16, u8)> {
    routes
        .routes
        .iter()
        .find(|r| r.dest == dest)
        .map(|r| (r.next_hop, r.hops))
}

/// Ok when `routes` sends `dest` via `next_hop` over `hops` links.
fn expect_route(routes: &RoutesInfo, dest: u16, next_hop: u16, hops: u8) -> Result<(), String> {
    if route_of(routes, dest) == Some((next_hop, hops)) {
        Ok(())
    } else {
        Err(describe(routes))
    }
}

fn describe(routes: &RoutesInfo) -> String {
    let links: Vec<String> = routes
        .links
        .iter()
        .map(|l| format!("{}@{}", l.peer, l.addr))
        .collect();
    let table: Vec<String> = routes
        .routes
        .iter()
        .map(|r| format!("{} via {} ({} hops)", r.dest, r.next_hop, r.hops))
        .collect();
    format!(
        "node {}: links [{}], routes [{}]",
        routes.node,
        links.join(", "),
        table.join(", ")
    )
}

// ---------------------------------------------------------------------------
// The reader that runs while a link is cut.

#[derive(Debug)]
enum Outcome {
    Right,
    Wrong(String),
    /// An error answer: the status and message.
    Failed(Status, String),
    /// Not an answer at all (the connection, the client's own timeout).
    Broken(String),
}

struct ReadRecord {
    page: u32,
    started: Instant,
    took: Duration,
    outcome: Outcome,
}

/// A thread reading one node's pages through node 0 at queue depth 1, over
/// and over, recording every read.
struct Reader {
    /// When the reader started.
    started: Instant,
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<ReadRecord>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    fn start(entry: &str, node: u16) -> Reader {
        let client = Probe::connect(entry).expect("the reader connects to node 0");
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let records = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, records) = (stop.clone(), records.clone());
            std::thread::spawn(move || {
                let mut p = 0;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let result = client.read_page(page(node, p));
                    let took = started.elapsed();
                    let outcome = match result {
                        Ok(read) => match check_page(&read, node, p) {
                            Ok(()) => Outcome::Right,
                            Err(wrong) => Outcome::Wrong(wrong),
                        },
                        Err(ClientError::Remote { status, message }) => {
                            Outcome::Failed(status, message)
                        }
                        Err(other) => Outcome::Broken(other.to_string()),
                    };
                    records
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .push(ReadRecord {
                            page: p,
                            started,
                            took,
                            outcome,
                        });
                    p = (p + 1) % PAGES;
                }
            })
        };
        Reader {
            started,
            stop,
            records,
            thread: Some(thread),
        }
    }

    /// Ok once `count` reads started after `since` came back right.
    fn successes_after(&self, since: Instant, count: usize) -> Result<(), String> {
        let records = self
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let right = records
            .iter()
            .filter(|r| r.started >= since && matches!(r.outcome, Outcome::Right))
            .count();
        if right >= count {
            Ok(())
        } else {
            let last = records
                .last()
                .map(|r| format!("{:?} after {:?}", r.outcome, r.took))
                .unwrap_or_else(|| "no read finished yet".into());
            Err(format!("{right} right reads so far; the last: {last}"))
        }
    }

    /// Stops the reader and returns its records.
    fn stop(mut self) -> Vec<ReadRecord> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the reader thread panicked");
        }
        std::mem::take(
            &mut *self
                .records
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}

impl Drop for Reader {
    /// Also when the test fails: the reader's connection must be closed
    /// while the veth to node 0 still exists (the guard deletes it later),
    /// so no packet for the test's addresses is left to take the default
    /// route out of the root namespace.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Checks the reads made while link 1-2 was cut: never wrong data, failures
/// only NodeUnreachable or Timeout and in bounded time, and every read that
/// started after the reroute right. Returns a one-line summary.
fn judge_reads(records: &[ReadRecord], cut: Instant, rerouted_at: Instant) -> String {
    let mut failures = Vec::new();
    let mut longest = Duration::ZERO;
    let mut right = 0;
    for r in records {
        let at = |t: Instant| -> String {
            if t >= cut {
                format!("+{} ms", (t - cut).as_millis())
            } else {
                format!("-{} ms", (cut - t).as_millis())
            }
        };
        let when = format!(
            "page {} read at {} (took {} ms)",
            r.page,
            at(r.started),
            r.took.as_millis()
        );
        longest = longest.max(r.took);
        match &r.outcome {
            Outcome::Right => right += 1,
            Outcome::Wrong(wrong) => panic!("{when}: {wrong}"),
            Outcome::Broken(e) => panic!("{when}: not a clear error answer: {e}"),
            Outcome::Failed(status, message) => {
                assert!(
                    matches!(status, Status::NodeUnreachable | Status::Timeout),
                    "{when}: expected NodeUnreachable or Timeout, got {status:?}: {message}"
                );
                assert!(
                    r.started < rerouted_at,
                    "{when}: failed although node 0 had already rerouted (at {}): {status:?}: {message}",
                    at(rerouted_at)
                );
                failures.push(format!("{when}: {status:?}: {message}"));
            }
        }
    }
    let bound = Duration::from_millis(DEAD_AFTER_MS + ROUTE_WAIT_MS + 2000);
    assert!(
        longest <= bound,
        "a read during the cut took {longest:?}, more than {bound:?}"
    );
    let mut summary = format!(
        "{} reads, {right} right, {} failed with a clear error, longest {} ms",
        records.len(),
        failures.len(),
        longest.as_millis()
    );
    for failure in &failures {
        let _ = write!(summary, "\n    {failure}");
    }
    summary
}
