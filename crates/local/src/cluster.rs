//! Local clusters on loopback: `quarry up` / `quarry down`, also used by the
//! demo, the benchmarks and the integration tests. Each node is a real
//! `quarry node` process, so a local cluster behaves like a deployed one.

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_client::{BlockingClient, ClusterFile, ClusterNode};
use quarry_device::{BackendKind, EccMode, Geometry, Preset};
use quarry_fabric::{links_of, Link, TopologyKind};
use std::collections::BTreeSet;

/// How long a starting node may take to answer its first ping.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopping node may take to exit after SIGTERM before it is killed.
const NODE_STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on local cluster size: each node is a process with its own port.
pub const MAX_LOCAL_NODES: u16 = 64;

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalClusterSpec {
    /// Number of nodes.
    pub nodes: u16,
    /// Directory holding cluster.toml and one `node-N` folder per node.
    pub dir: PathBuf,
    /// Backend of every node.
    pub backend: BackendKind,
    /// Chip preset.
    pub preset: Option<Preset>,
    /// Geometry override.
    pub geometry: Option<Geometry>,
    /// Data bytes per node (`[device] capacity_bytes`): the preset's or the
    /// default geometry with as many blocks as this needs. Not with
    /// `geometry`.
    pub capacity_bytes: Option<u64>,
    /// Use O_DIRECT on the file backend.
    pub direct_io: bool,
    /// Which nodes are linked.
    pub topology: Topology,
    /// The nodes get SIGTERM when the process that started them dies, even
    /// by SIGKILL or Ctrl-C (benchmarks, tests, `quarry up` in the
    /// foreground). False for a cluster meant to outlive it (`--detach`).
    pub stop_with_this_process: bool,
    /// The nodes run managed storage (space manager, object store,
    /// volumes) rather than raw pages.
    pub managed: bool,
    /// The per-page code of every node's device.
    pub ecc: EccMode,
    /// A `[kv]` table (tenants, modes, limits) for every node's
    /// configuration, as TOML; none: the one open `default` tenant.
    pub kv_toml: Option<String>,
    /// More lines of every node's `[device]` table (e.g. `sync_writes =
    /// false`), as TOML.
    pub device_toml: Option<String>,
}

/// The links of a local cluster: a named shape or an explicit list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// A shape over nodes `0..n` in id order.
    Shape(TopologyKind),
    /// Exactly these links (`a-b` pairs).
    Links(BTreeSet<Link>),
}

impl Default for Topology {
    fn default() -> Self {
        Topology::Shape(TopologyKind::Mesh)
    }
}

impl Topology {
    /// Parses `0-1,1-2,2-3` into links; the error names the bad item.
    pub fn parse_links(text: &str) -> Result<Topology> {
        let mut links = BTreeSet::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let parsed = item.split_once('-').and_then(|(a, b)| {
                Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
            });
            let Some((a, b)) = parsed else {
                bail!("link {item:?} is not of the form A-B with node ids A and B");
            };
            if a == b {
                bail!("link {item:?} links node {a} to itself");
            }
            links.insert((a.min(b), a.max(b)));
        }
        if links.is_empty() {
            bail!("--links lists no links; give pairs like 0-1,1-2");
        }
        Ok(Topology::Links(links))
    }

    /// The links over nodes `0..nodes`; fails if an explicit link names a node
    /// outside the cluster or leaves a node with no path to node 0.
    pub fn links(&self, nodes: u16) -> Result<BTreeSet<Link>> {
        let ids: Vec<u16> = (0..nodes).collect();
        let links = match self {
            Topology::Shape(kind) => links_of(*kind, &ids),
            Topology::Links(links) => {
                if let Some((a, b)) = links.iter().find(|(_, b)| *b >= nodes) {
                    bail!(
                        "link {a}-{b} names node {b}, but the cluster has nodes 0..={}",
                        nodes - 1
                    );
                }
                links.clone()
            }
        };
        let mut reached = BTreeSet::from([0u16]);
        let mut frontier = vec![0u16];
        while let Some(at) = frontier.pop() {
            for &(a, b) in &links {
                let other = if a == at {
                    b
                } else if b == at {
                    a
                } else {
                    continue;
                };
                if reached.insert(other) {
                    frontier.push(other);
                }
            }
        }
        if let Some(lost) = ids.iter().find(|id| !reached.contains(id)) {
            bail!("node {lost} has no path to node 0 over the links given");
        }
        Ok(links)
    }

    /// `mesh`, `line`, ... or the links as `0-1,1-2`.
    pub fn describe(&self) -> String {
        match self {
            Topology::Shape(kind) => format!("{kind:?}").to_lowercase(),
            Topology::Links(links) => links
                .iter()
                .map(|(a, b)| format!("{a}-{b}"))
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

impl LocalClusterSpec {
    /// The default embedded cluster: 4 file-backed nodes under `dir`.
    pub fn default_in(dir: &Path) -> Self {
        LocalClusterSpec {
            nodes: 4,
            dir: dir.to_path_buf(),
            backend: BackendKind::File,
            preset: None,
            geometry: None,
            capacity_bytes: None,
            direct_io: true,
            topology: Topology::default(),
            // The demo leaves its cluster running for the user.
            stop_with_this_process: false,
            managed: true,
            ecc: EccMode::Rs,
            kv_toml: None,
            device_toml: None,
        }
    }
}

/// The cluster file of a local cluster directory.
pub fn cluster_file_path(dir: &Path) -> PathBuf {
    dir.join("cluster.toml")
}

/// A running local cluster: its cluster file and, when this process started
/// the nodes, their process handles.
pub struct LocalCluster {
    /// Where cluster.toml lives.
    pub cluster_path: PathBuf,
    /// The members.
    pub cluster: ClusterFile,
    /// The cluster's name in every node's configuration.
    name: String,
    children: Vec<Child>,
}

impl LocalCluster {
    /// Starts the nodes of `spec` with the `quarry` binary at `exe`, waits until
    /// each answers, and writes `DIR/cluster.toml`. A node directory that already
    /// exists is reused, so its data survives `down` and `up`.
    pub fn start(spec: &LocalClusterSpec, exe: &Path) -> Result<LocalCluster> {
        if spec.nodes == 0 || spec.nodes > MAX_LOCAL_NODES {
            bail!(
                "--nodes {} is out of range: a local cluster has 1..={MAX_LOCAL_NODES} nodes",
                spec.nodes
            );
        }
        fs::create_dir_all(&spec.dir)
            .with_context(|| format!("cannot create {}", spec.dir.display()))?;
        let dir = fs::canonicalize(&spec.dir)
            .with_context(|| format!("cannot resolve {}", spec.dir.display()))?;
        let cluster_path = cluster_file_path(&dir);
        refuse_running(&cluster_path, spec)?;
        let links = spec.topology.links(spec.nodes)?;
        let (listeners, addrs) = free_ports(spec.nodes as usize)?;
        // The memcached faces' sockets, handed over open like the nodes'
        // own (a restarted node's is bound again at its address).
        let (memcached_listeners, memcached) = match spec.managed {
            true => free_ports(spec.nodes as usize)?,
            false => (Vec::new(), Vec::new()),
        };
        // A name of its own, so no node of this cluster ever links with a
        // node of another one that happens to use an address it dials.
        let name = format!("local-{:016x}", rand::random::<u64>());
        let mut children: Vec<Child> = Vec::new();
        let mut nodes = Vec::new();
        let start = (|| -> Result<()> {
            for id in 0..spec.nodes {
                let node_dir = dir.join(format!("node-{id}"));
                fs::create_dir_all(&node_dir)
                    .with_context(|| format!("cannot create {}", node_dir.display()))?;
                let config_path = node_dir.join("node.toml");
                // Durably: a node must restart after a power loss too.
                quarry_geometry::write_file_durably(
                    &config_path,
                    node_config_toml(
                        spec,
                        &name,
                        id,
                        &addrs,
                        memcached.get(usize::from(id)),
                        &links,
                    )
                    .as_bytes(),
                )
                .with_context(|| format!("cannot write {}", config_path.display()))?;
                let log_path = node_dir.join("node.log");
                let child = spawn_node(
                    exe,
                    &config_path,
                    &log_path,
                    spec.stop_with_this_process,
                    (
                        &listeners[id as usize],
                        memcached_listeners.get(usize::from(id)),
                    ),
                )?;
                nodes.push(ClusterNode {
                    id,
                    addr: addrs[id as usize].clone(),
                    memcached: memcached.get(usize::from(id)).cloned(),
                    config: Some(config_path),
                    log: Some(log_path),
                    pid: Some(child.id()),
                });
                children.push(child);
            }
            let deadline = Instant::now() + NODE_START_TIMEOUT;
            for (node, child) in nodes.iter().zip(children.iter_mut()) {
                wait_until_serving(node, &name, child, deadline)?;
            }
            for node in &nodes {
                wait_until_routed(node, spec.nodes, deadline)?;
            }
            Ok(())
        })();
        // The nodes hold their sockets now; this process must not keep them
        // open (a killed node's port would stay bound).
        drop(listeners);
        drop(memcached_listeners);
        if let Err(e) = start {
            for child in &mut children {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Err(e);
        }
        let cluster = ClusterFile { nodes };
        cluster.save(&cluster_path)?;
        Ok(LocalCluster {
            cluster_path,
            cluster,
            name,
            children,
        })
    }

    /// Kills node `id` at once (SIGKILL), as a crash would.
    pub fn kill_node(&mut self, id: u16) -> Result<()> {
        let index = self.index_of(id)?;
        self.children[index]
            .kill()
            .with_context(|| format!("cannot kill node {id}"))?;
        self.children[index]
            .wait()
            .with_context(|| format!("cannot reap node {id}"))?;
        Ok(())
    }

    /// Stops node `id` cleanly (SIGTERM) and waits for it to exit.
    pub fn stop_node(&mut self, id: u16) -> Result<std::process::ExitStatus> {
        let index = self.index_of(id)?;
        signal(self.children[index].id(), libc::SIGTERM);
        let deadline = Instant::now() + NODE_STOP_TIMEOUT;
        loop {
            if let Some(status) = self.children[index].try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("node {id} did not stop within {NODE_STOP_TIMEOUT:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts node `id` again with its configuration (same address, same data)
    /// and waits until it answers.
    pub fn restart_node(&mut self, id: u16, exe: &Path) -> Result<()> {
        let index = self.index_of(id)?;
        let node = self.cluster.nodes[index].clone();
        let (Some(config), Some(log)) = (&node.config, &node.log) else {
            bail!("node {id} was not started by this cluster");
        };
        let listener = TcpListener::bind(&node.addr)
            .with_context(|| format!("cannot listen on {} to restart node {id}", node.addr))?;
        let memcached = match &node.memcached {
            Some(addr) => Some(TcpListener::bind(addr).with_context(|| {
                format!("cannot listen on {addr} for node {id}'s memcached face")
            })?),
            None => None,
        };
        // A restarted node is this process's child, like a test's cluster.
        let mut child = spawn_node(exe, config, log, true, (&listener, memcached.as_ref()))?;
        drop(listener);
        drop(memcached);
        wait_until_serving(
            &node,
            &self.name,
            &mut child,
            Instant::now() + NODE_START_TIMEOUT,
        )?;
        self.cluster.nodes[index].pid = Some(child.id());
        self.children[index] = child;
        self.cluster.save(&self.cluster_path)?;
        Ok(())
    }

    fn index_of(&self, id: u16) -> Result<usize> {
        match self.cluster.nodes.iter().position(|n| n.id == id) {
            Some(index) if index < self.children.len() => Ok(index),
            _ => bail!("node {id} is not a running member of this local cluster"),
        }
    }

    /// Lets the nodes outlive this process (`quarry up --detach`).
    pub fn detach(mut self) -> ClusterFile {
        self.children.clear();
        self.cluster.clone()
    }

    /// Stops every node (SIGTERM, then SIGKILL after a bound) and removes the
    /// cluster file.
    pub fn stop(mut self) -> Result<()> {
        let result = stop_nodes(&self.cluster);
        for child in &mut self.children {
            let _ = child.wait();
        }
        self.children.clear();
        let _ = fs::remove_file(&self.cluster_path);
        result
    }

    /// Reports nodes that exited on their own, as `node N exited with STATUS`.
    pub fn exited_nodes(&mut self) -> Vec<String> {
        let mut exited = Vec::new();
        for (node, child) in self.cluster.nodes.iter().zip(self.children.iter_mut()) {
            if let Ok(Some(status)) = child.try_wait() {
                exited.push(format!("node {} exited with {status}", node.id));
            }
        }
        exited
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // A cluster owned by this process must not outlive it by accident
        // (a panicking test, an error in a benchmark).
        if !self.children.is_empty() {
            let _ = stop_nodes(&self.cluster);
            for child in &mut self.children {
                let _ = child.wait();
            }
            let _ = fs::remove_file(&self.cluster_path);
        }
    }
}

/// Stops the local cluster in `dir`; returns how many nodes were running.
pub fn down(dir: &Path) -> Result<usize> {
    let path = cluster_file_path(dir);
    let cluster = match ClusterFile::load(&path) {
        Ok(cluster) => cluster,
        Err(_) if !path.exists() => bail!(
            "no cluster is running in {} (no cluster.toml there)",
            dir.display()
        ),
        Err(e) => return Err(e.into()),
    };
    let running = cluster
        .nodes
        .iter()
        .filter(|n| n.pid.is_some_and(process_alive))
        .count();
    stop_nodes(&cluster)?;
    fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    Ok(running)
}

fn stop_nodes(cluster: &ClusterFile) -> Result<()> {
    let pids: Vec<(u16, u32)> = cluster
        .nodes
        .iter()
        .filter_map(|n| n.pid.map(|pid| (n.id, pid)))
        .collect();
    for &(_, pid) in &pids {
        signal(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + NODE_STOP_TIMEOUT;
    while Instant::now() < deadline && pids.iter().any(|&(_, pid)| process_alive(pid)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut killed = Vec::new();
    for &(id, pid) in &pids {
        if process_alive(pid) {
            signal(pid, libc::SIGKILL);
            killed.push(format!("node {id} (pid {pid})"));
        }
    }
    if !killed.is_empty() {
        bail!(
            "{} did not stop within {:?} of SIGTERM and were killed",
            killed.join(", "),
            NODE_STOP_TIMEOUT
        );
    }
    Ok(())
}

/// Starts `quarry node` on `listener` (and its memcached face on the second
/// socket, when it has one), which the node inherits open: a port is never
/// free between choosing it and the node serving on it.
fn spawn_node(
    exe: &Path,
    config_path: &Path,
    log_path: &Path,
    stop_with_this_process: bool,
    (listener, memcached): (&TcpListener, Option<&TcpListener>),
) -> Result<Child> {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let log_err = log.try_clone().context("cannot duplicate the log handle")?;
    let mut command = Command::new(exe);
    command
        .arg("node")
        .arg("--config")
        .arg(config_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: Ctrl-C in the terminal of `quarry up --detach`
        // must not reach the nodes.
        .process_group(0)
        .env(quarry_node::LISTEN_FD_ENV, listener.as_raw_fd().to_string());
    if let Some(m) = memcached {
        command.env(quarry_node::MEMCACHED_FD_ENV, m.as_raw_fd().to_string());
    }
    let listen_fd = listener.as_raw_fd();
    let memcached_fd = memcached.map(|m| m.as_raw_fd());
    // SAFETY: runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed; prctl(2) and fcntl(2) are, and the
    // closure touches no memory shared with the parent (it copies three
    // integers; `Option::into_iter` and `chain` allocate nothing). Clearing FD_CLOEXEC affects only the child's copy of the
    // descriptor table, so nodes started at the same time from other threads
    // never inherit this socket. Tested by
    // `foreground_cluster_dies_with_its_parent` in tests/cli.rs and by every
    // local cluster (their nodes serve on the inherited sockets).
    unsafe {
        command.pre_exec(move || {
            if stop_with_this_process && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for fd in std::iter::once(listen_fd).chain(memcached_fd) {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "info");
    }
    command
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))
}

fn signal(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; a stale pid at worst
    // yields ESRCH, which we ignore.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// True when `pid` names a live process (a zombie counts as dead).
pub fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name, which may itself contain spaces.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// Waits until `node` answers at its address as a member of `cluster`.
fn wait_until_serving(
    node: &ClusterNode,
    cluster: &str,
    child: &mut Child,
    deadline: Instant,
) -> Result<()> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "node {} exited during start-up with {status}; its log:\n{}",
                node.id,
                log_tail(node)
            );
        }
        if let Ok(client) = BlockingClient::connect(&node.addr) {
            if let Ok(info) = client.node_info(node.id) {
                if info.cluster != cluster || info.addr != node.addr {
                    bail!(
                        "the node answering at {} is node {} of cluster {:?} at {}, not node {} \
                         of cluster {cluster:?}",
                        node.addr,
                        info.id,
                        info.cluster,
                        info.addr,
                        node.id
                    );
                }
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!(
                "node {} at {} did not answer within {:?}; its log:\n{}",
                node.id,
                node.addr,
                NODE_START_TIMEOUT,
                log_tail(node)
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Waits until `node` has discovered the whole cluster over the fabric.
fn wait_until_routed(node: &ClusterNode, nodes: u16, deadline: Instant) -> Result<()> {
    let client = BlockingClient::connect(&node.addr)?;
    loop {
        let members = client.cluster()?;
        if members.len() == usize::from(nodes) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "node {} knows only nodes {:?} after {:?}; its log:\n{}",
                node.id,
                members.iter().map(|m| m.id).collect::<Vec<_>>(),
                NODE_START_TIMEOUT,
                log_tail(node)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last lines of a node's log, for error messages.
pub fn log_tail(node: &ClusterNode) -> String {
    const TAIL_BYTES: usize = 4096;
    let Some(path) = &node.log else {
        return "(no log)".into();
    };
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    let start = text.len().saturating_sub(TAIL_BYTES);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_string()
}

/// Refuses to start over a cluster whose nodes are still running.
fn refuse_running(cluster_path: &Path, spec: &LocalClusterSpec) -> Result<()> {
    let dir = cluster_path.parent().unwrap_or(cluster_path);
    if let Ok(existing) = ClusterFile::load(cluster_path) {
        let alive: Vec<String> = existing
            .nodes
            .iter()
            .filter_map(|n| {
                n.pid
                    .filter(|pid| process_alive(*pid))
                    .map(|pid| format!("node {} (pid {pid})", n.id))
            })
            .collect();
        if !alive.is_empty() {
            bail!(
                "a cluster is already running in {}: {}; stop it with `quarry down --dir {}`",
                dir.display(),
                alive.join(", "),
                spec.dir.display()
            );
        }
    }
    Ok(())
}

/// A listening loopback socket on a free port for each node, and their
/// addresses.
fn free_ports(count: usize) -> Result<(Vec<TcpListener>, Vec<String>)> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").context("cannot find a free loopback port"))
        .collect::<Result<_>>()?;
    let addrs = listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.to_string()))
        .collect::<Result<_>>()?;
    Ok((listeners, addrs))
}

fn node_config_toml(
    spec: &LocalClusterSpec,
    cluster: &str,
    id: u16,
    addrs: &[String],
    memcached: Option<&String>,
    links: &BTreeSet<Link>,
) -> String {
    let backend = match spec.backend {
        BackendKind::File => "file",
        BackendKind::Mem => "mem",
        BackendKind::Nand => "nand",
    };
    let mut text = format!(
        "# Written by `quarry up`.\ncluster = \"{cluster}\"\nid = {id}\nlisten = \"{}\"\ndata_dir = \".\"\n\n[device]\nbackend = \"{backend}\"\n",
        addrs[id as usize]
    );
    if let Some(preset) = spec.preset {
        let name = match preset {
            Preset::Bluedbm => "bluedbm",
            Preset::Rfsa => "rfsa",
        };
        text.push_str(&format!("preset = \"{name}\"\n"));
    }
    if let Some(capacity) = spec.capacity_bytes {
        text.push_str(&format!("capacity_bytes = {capacity}\n"));
    }
    if spec.backend == BackendKind::File {
        text.push_str(&format!("direct_io = {}\n", spec.direct_io));
    }
    if spec.ecc == EccMode::Crc {
        text.push_str("ecc = \"crc\"\n");
    }
    text.push_str(&format!("seed = {}\n", 1000 + u64::from(id)));
    if let Some(lines) = &spec.device_toml {
        text.push_str(lines);
        text.push('\n');
    }
    let mode = if spec.managed { "managed" } else { "raw" };
    text.insert_str(
        text.find("\n[device]").unwrap_or(text.len()),
        &format!("\n[storage]\nmode = \"{mode}\"\n"),
    );
    if let Some(addr) = memcached {
        text.insert_str(
            text.find("\n[storage]").unwrap_or(text.len()),
            &format!("memcached_listen = \"{addr}\"\n"),
        );
    }
    if let Some(kv) = &spec.kv_toml {
        text.push('\n');
        text.push_str(kv);
        text.push('\n');
    }
    if let Some(g) = spec.geometry {
        text.push_str(&format!(
            "\n[device.geometry]\nbuses = {}\nchips_per_bus = {}\nblocks_per_chip = {}\npages_per_block = {}\npage_size_bytes = {}\noob_size_bytes = {}\n",
            g.buses, g.chips_per_bus, g.blocks_per_chip, g.pages_per_block, g.page_size_bytes, g.oob_size_bytes
        ));
    }
    // Both ends list a link; whichever dials first keeps it, and either
    // end redials it after a failure.
    for (peer, addr) in addrs.iter().enumerate() {
        let peer = peer as u16;
        if links.contains(&(id.min(peer), id.max(peer))) {
            text.push_str(&format!("\n[[peers]]\nid = {peer}\naddr = \"{addr}\"\n"));
        }
    }
    text
}
