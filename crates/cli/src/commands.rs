//! The small subcommands: up, down, status, page.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{BlockingClient, ClusterFile, LinearSpace, LinearSpaceError};
use quarry_device::BackendKind;
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeInfo};

use crate::args::{DeviceArg, EccArg, PageCommand, StorageArg, TopologyArg, UpArgs};
use quarry_fabric::TopologyKind;
use quarry_local::{backend_of, preset_of, quarry_exe, LocalCluster, LocalClusterSpec, Topology};

/// `quarry up`.
/// The per-page code `quarry up` gives a backend when none is asked for:
/// parity where bits flip (emulated NAND), CRC alone over a disk or DRAM
/// that correct their own errors (`docs/benchmarks.md`, "At a glance":
/// RS parity was a quarter of a put's CPU on the file backend).
fn default_ecc(device: DeviceArg) -> EccArg {
    match device {
        DeviceArg::Nand => EccArg::Rs,
        DeviceArg::File | DeviceArg::Mem => EccArg::Crc,
    }
}

pub fn up(args: &UpArgs) -> Result<()> {
    let (capacity_bytes, why) = node_capacity(args)?;
    println!("capacity: {why}");
    let kv_toml = match &args.kv_config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --kv-config {}", path.display()))?;
            // Checked here, so a bad file is named before any node starts.
            let table: toml::Table = toml::from_str(&text)
                .with_context(|| format!("--kv-config {} is not TOML", path.display()))?;
            let kv: quarry_node::KvConfig = table
                .get("kv")
                .cloned()
                .with_context(|| format!("--kv-config {} has no [kv] table", path.display()))?
                .try_into()
                .with_context(|| format!("--kv-config {}", path.display()))?;
            kv.validate()
                .map_err(|e| anyhow::anyhow!("--kv-config {}: {e}", path.display()))?;
            Some(text)
        }
        None => None,
    };
    let spec = LocalClusterSpec {
        nodes: args.nodes,
        dir: args.dir.clone(),
        backend: backend_of(args.device),
        preset: args.preset.map(preset_of),
        geometry: None,
        capacity_bytes,
        direct_io: true,
        topology: topology_of(args)?,
        stop_with_this_process: !args.detach,
        managed: args.storage == StorageArg::Managed,
        ecc: match args.ecc.unwrap_or_else(|| default_ecc(args.device)) {
            EccArg::Rs => quarry_device::EccMode::Rs,
            EccArg::Crc => quarry_device::EccMode::Crc,
        },
        kv_toml,
        device_toml: None,
    };
    let mut cluster = LocalCluster::start(&spec, &quarry_exe()?)?;
    print_members(&cluster.cluster);
    println!("topology: {}", spec.topology.describe());
    println!("cluster file: {}", cluster.cluster_path.display());
    if args.detach {
        cluster.detach();
        println!(
            "running in the background; stop it with `quarry down --dir {}`",
            args.dir.display()
        );
        return Ok(());
    }
    println!("press Ctrl-C to stop");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = terminate.recv() => break,
                _ = tick.tick() => {
                    for line in cluster.exited_nodes() {
                        eprintln!("warning: {line}");
                    }
                }
            }
        }
        anyhow::Ok(())
    })?;
    println!("stopping");
    cluster.stop()
}

/// The default share of the free disk under `--dir` a new cluster may
/// grow into: an eighth, so that the cluster filling up leaves the disk
/// most of its room (the device files are sparse: they take space only as
/// data arrives, so the share is a ceiling, not an allocation).
const DEFAULT_DISK_SHARE_DIVISOR: u64 = 8;
/// The most a node gets by default. Each page written costs the node's
/// space manager an entry in its map (about 100 bytes of memory per 8 KiB
/// page, ~200 MiB at 16 GiB) and its recovery scan after a crash reads the
/// spare areas of every written page, so an unasked-for default stays
/// within what a laptop holds in memory and scans in seconds.
const DEFAULT_MAX_NODE_CAPACITY_BYTES: u64 = 16 << 30;
/// The least a node gets by default: the old fixed size, so a nearly full
/// disk still gets a usable cluster (the files are sparse).
const DEFAULT_MIN_NODE_CAPACITY_BYTES: u64 = 512 << 20;

/// The capacity of each node of `quarry up` and why it is that: `--capacity`,
/// else what the cluster in `--dir` was made with, else for a device on
/// disk a share of the free space there (`None`: the geometry's own, for
/// `mem`).
pub fn node_capacity(args: &UpArgs) -> Result<(Option<u64>, String)> {
    let base = match args.preset {
        Some(p) => quarry_device::preset_geometry(preset_of(p)),
        None => quarry_device::Geometry::default(),
    };
    let row = base.chips() * u64::from(base.pages_per_block) * u64::from(base.page_size_bytes);
    let sized = |bytes: u64| base.with_capacity(bytes).map(|g| g.capacity_bytes());
    if let Some(text) = &args.capacity {
        let bytes = quarry_jobs::parse_size(text)
            .map_err(|e| anyhow::anyhow!("--capacity {text:?}: {e}"))?;
        let Ok(bytes) = sized(bytes) else {
            bail!(
                "--capacity {text:?}: a node of this geometry holds {} to {}, in steps of {}",
                human_bytes(row * u64::from(quarry_device::MIN_BLOCKS_PER_CHIP_FOR_CAPACITY)),
                human_bytes(row * u64::from(quarry_device::MAX_BLOCKS_PER_CHIP)),
                human_bytes(row)
            );
        };
        return Ok((
            Some(bytes),
            format!("{} per node (--capacity)", human_bytes(bytes)),
        ));
    }
    if let Some(made) = existing_capacity(&args.dir)? {
        let shown = made.map_or(human_bytes(base.capacity_bytes()), human_bytes);
        return Ok((made, format!("{shown} per node, as this cluster was made")));
    }
    if args.device == DeviceArg::Mem {
        let shown = human_bytes(base.capacity_bytes());
        return Ok((
            None,
            format!("{shown} per node in memory (--capacity SIZE to choose)"),
        ));
    }
    let free = free_bytes_under(&args.dir)?;
    let share = free / DEFAULT_DISK_SHARE_DIVISOR / u64::from(args.nodes.max(1));
    let want = share.clamp(
        DEFAULT_MIN_NODE_CAPACITY_BYTES,
        DEFAULT_MAX_NODE_CAPACITY_BYTES,
    );
    let bytes = sized(want).with_context(|| format!("sizing a node of {}", human_bytes(want)))?;
    Ok((
        Some(bytes),
        format!(
            "{} per node: 1/{DEFAULT_DISK_SHARE_DIVISOR} of the {} free under {} over {} nodes, \
             within {}..{} a node (--capacity SIZE to choose); the files grow as data arrives",
            human_bytes(bytes),
            human_bytes(free),
            args.dir.display(),
            args.nodes,
            human_bytes(DEFAULT_MIN_NODE_CAPACITY_BYTES),
            human_bytes(DEFAULT_MAX_NODE_CAPACITY_BYTES)
        ),
    ))
}

/// The capacity node 0 of the cluster in `dir` was configured with, if that
/// cluster exists: `Some(None)` for one made before capacities (the
/// geometry's own size). A device keeps its geometry, so a later `up`
/// must not size it anew from what is free by then.
fn existing_capacity(dir: &Path) -> Result<Option<Option<u64>>> {
    let path = dir.join("node-0").join("node.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))?;
    let capacity = table
        .get("device")
        .and_then(|d| d.get("capacity_bytes"))
        .and_then(toml::Value::as_integer)
        .and_then(|n| u64::try_from(n).ok());
    Ok(Some(capacity))
}

/// Bytes free to an unprivileged user on the filesystem of `dir` (or of
/// its nearest existing ancestor, when `up` has not made it yet).
fn free_bytes_under(dir: &Path) -> Result<u64> {
    let mut at = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    while !at.exists() {
        at = at
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
    }
    let c_path = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .with_context(|| format!("{} holds a NUL byte", at.display()))?;
    // SAFETY: statvfs fills the struct it is given from a valid C string path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot read the free space under {}", at.display()));
    }
    // The fields are u32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (blocks, block_bytes) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Ok(blocks.saturating_mul(block_bytes))
}

/// The topology `quarry up` was asked for.
pub fn topology_of(args: &UpArgs) -> Result<Topology> {
    if let Some(links) = &args.links {
        return Topology::parse_links(links);
    }
    Ok(Topology::Shape(match args.topology {
        None | Some(TopologyArg::Mesh) => TopologyKind::Mesh,
        Some(TopologyArg::Line) => TopologyKind::Line,
        Some(TopologyArg::Ring) => TopologyKind::Ring,
        Some(TopologyArg::Star) => TopologyKind::Star,
        Some(TopologyArg::Tree) => TopologyKind::Tree,
    }))
}

/// `quarry status --routes`: every node's links and routing table.
pub fn routes(cluster: Option<&Path>, json: bool) -> Result<()> {
    let (file, client) = connect(cluster)?;
    let mut tables = Vec::new();
    for node in &file.nodes {
        tables.push((
            node.id,
            node.addr.clone(),
            client.routes(node.id).map_err(|e| e.to_string()),
        ));
    }
    if json {
        let value: Vec<serde_json::Value> = tables
            .iter()
            .map(|(id, addr, routes)| match routes {
                Ok(info) => serde_json::json!({"id": id, "addr": addr, "state": "up", "links": info.links, "routes": info.routes}),
                Err(e) => serde_json::json!({"id": id, "addr": addr, "state": "unreachable", "error": e}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    for (id, addr, routes) in &tables {
        match routes {
            Err(e) => println!("node {id} ({addr}): unreachable: {e}\n"),
            Ok(info) => {
                let links: Vec<String> = info.links.iter().map(|l| l.peer.to_string()).collect();
                println!(
                    "node {id} ({addr}), links to: {}",
                    if links.is_empty() {
                        "none".to_string()
                    } else {
                        links.join(", ")
                    }
                );
                let mut table = Table::new();
                table.load_preset(UTF8_FULL_CONDENSED);
                table.set_header(["destination", "next hop", "hops"]);
                for route in &info.routes {
                    table.add_row([
                        route.dest.to_string(),
                        route.next_hop.to_string(),
                        route.hops.to_string(),
                    ]);
                }
                println!("{table}\n");
            }
        }
    }
    Ok(())
}

/// `quarry down`.
pub fn down(dir: &Path) -> Result<()> {
    let stopped = quarry_local::down(dir)?;
    println!(
        "stopped {stopped} node(s) of the cluster in {}",
        dir.display()
    );
    Ok(())
}

fn print_members(cluster: &ClusterFile) {
    for node in &cluster.nodes {
        let memcached = node
            .memcached
            .as_ref()
            .map(|m| format!(", memcached on {m}"))
            .unwrap_or_default();
        println!(
            "node {} listening on {} (pid {}){memcached}",
            node.id,
            node.addr,
            node.pid
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }
}

/// Loads the cluster file the user pointed at and connects to it.
pub fn connect(cluster: Option<&Path>) -> Result<(ClusterFile, BlockingClient)> {
    let path = ClusterFile::locate(cluster);
    let file = ClusterFile::load(&path)?;
    let client = BlockingClient::connect_cluster(&file)?;
    Ok((file, client))
}

/// `quarry status`.
pub fn status(cluster: Option<&Path>, json: bool) -> Result<()> {
    let (file, client) = connect(cluster)?;
    let mut rows: Vec<(u16, String, Result<NodeInfo, String>)> = Vec::new();
    for node in &file.nodes {
        let info = client.node_info(node.id).map_err(|e| e.to_string());
        rows.push((node.id, node.addr.clone(), info));
    }
    if json {
        let value: Vec<serde_json::Value> = rows
            .iter()
            .map(|(id, addr, info)| match info {
                Ok(info) => {
                    serde_json::json!({"id": id, "addr": addr, "state": "up", "info": info})
                }
                Err(e) => {
                    serde_json::json!({"id": id, "addr": addr, "state": "unreachable", "error": e})
                }
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "node",
        "address",
        "state",
        "device",
        "geometry (bus x chip x block x page)",
        "page",
        "capacity",
        "programmed",
        "bad blocks",
        "erases min/mean/max",
    ]);
    let mut capacity_total = 0u64;
    for (id, addr, info) in &rows {
        match info {
            Ok(info) => {
                let d = &info.device;
                let g = d.geometry;
                capacity_total += g.capacity_bytes();
                let backend = match (d.backend, d.preset) {
                    (b, Some(p)) => format!("{b:?} ({p:?})").to_lowercase(),
                    (b, None) => format!("{b:?}").to_lowercase(),
                };
                let backend = if d.backend == BackendKind::File && !d.direct_io {
                    format!("{backend}, buffered")
                } else {
                    backend
                };
                table.add_row(vec![
                    id.to_string(),
                    addr.clone(),
                    format!("up {}s", info.uptime_secs),
                    backend,
                    format!(
                        "{} x {} x {} x {}",
                        g.buses, g.chips_per_bus, g.blocks_per_chip, g.pages_per_block
                    ),
                    format!("{} + {} B", g.page_size_bytes, g.oob_size_bytes),
                    human_bytes(g.capacity_bytes()),
                    format!("{} pages", d.programmed_pages),
                    bad_blocks_text(&d.bad_blocks),
                    format!(
                        "{}/{:.1}/{}",
                        d.erase_count_min, d.erase_count_mean, d.erase_count_max
                    ),
                ]);
            }
            Err(e) => {
                table.add_row(vec![
                    id.to_string(),
                    addr.clone(),
                    "unreachable".into(),
                    e.clone(),
                ]);
            }
        }
    }
    println!("{table}");
    let up = rows.iter().filter(|r| r.2.is_ok()).count();
    println!(
        "{up} of {} nodes up, {} total capacity (entry node {})",
        rows.len(),
        human_bytes(capacity_total),
        client.client().entry_addr()
    );
    Ok(())
}

fn bad_blocks_text(blocks: &[quarry_device::BlockAddr]) -> String {
    const SHOWN: usize = 4;
    if blocks.is_empty() {
        return "0".into();
    }
    let mut text = format!("{}:", blocks.len());
    for b in blocks.iter().take(SHOWN) {
        text.push_str(&format!(" {b}"));
    }
    if blocks.len() > SHOWN {
        text.push_str(" ...");
    }
    text
}

pub use quarry_jobs::human_bytes;

/// What a `quarry page read|write` address names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageTarget {
    /// One page by its global address `node:bus:chip:block:page`.
    Global(GlobalPageAddr),
    /// Linear pages from `first`: exactly `count` of them for a range
    /// (`N..M`, `N+COUNT`), else one to read or as many as the input needs
    /// to write (`N`).
    Linear {
        /// The first linear page.
        first: u64,
        /// The range's length, when one was given.
        count: Option<u64>,
    },
}

const ADDR_FORMS: &str =
    "expected node:bus:chip:block:page, a linear page N, or a linear range N..M (end exclusive) or N+COUNT";

impl std::str::FromStr for PageTarget {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let text = text.trim();
        if text.contains(':') {
            return Ok(PageTarget::Global(text.parse()?));
        }
        let (first, count) = parse_page_range(text, &LINEAR_SYNTAX)?;
        Ok(PageTarget::Linear { first, count })
    }
}

/// How a page-number argument is named in errors.
pub(crate) struct RangeSyntax {
    /// The argument, as in "page address \"x\": ...".
    pub argument: &'static str,
    /// A range, as in "linear range 5..5 is empty".
    pub range: &'static str,
    /// The forms accepted, for errors.
    pub forms: &'static str,
}

const LINEAR_SYNTAX: RangeSyntax = RangeSyntax {
    argument: "page address",
    range: "linear range",
    forms: ADDR_FORMS,
};

/// Parses a page number `N`, a range `N..M` (end exclusive) or `N+COUNT`
/// into the first page and the range's length (`None` for a bare `N`).
/// Shared by `quarry page` (linear pages) and `quarry volume` (volume pages).
pub(crate) fn parse_page_range(text: &str, syntax: &RangeSyntax) -> Result<(u64, Option<u64>)> {
    let text = text.trim();
    let RangeSyntax {
        argument,
        range,
        forms,
    } = syntax;
    let number = |part: &str, what: &str| -> Result<u64> {
        part.trim().parse::<u64>().map_err(|e| {
            anyhow::anyhow!("{argument} {text:?}: {what} {part:?} is not a number ({e}); {forms}")
        })
    };
    if let Some((start, end)) = text.split_once("..") {
        let (first, end) = (number(start, "start")?, number(end, "end")?);
        if end <= first {
            bail!("{range} {text} is empty: the end (exclusive) must be above the start");
        }
        return Ok((first, Some(end - first)));
    }
    if let Some((start, count)) = text.split_once('+') {
        let (first, count) = (number(start, "start")?, number(count, "count")?);
        if count == 0 {
            bail!("{range} {text} is empty: the count must be at least 1");
        }
        if first.checked_add(count).is_none() {
            bail!("{range} {text} ends past the largest page number");
        }
        return Ok((first, Some(count)));
    }
    Ok((number(text, "page")?, None))
}

/// Pages one client call moves when the CLI streams a range: bounds the
/// memory of a read (32 MiB at 8 KiB pages) while keeping the pipeline full
/// long enough that the refill between calls costs little.
const CLI_CHUNK_PAGES: u64 = 4096;
const _: () = assert!(CLI_CHUNK_PAGES <= quarry_client::MAX_LINEAR_PAGES);

/// Largest input one `quarry page write` takes: the input is read whole
/// before anything is programmed, so that input longer than the range is an
/// error that leaves the pages untouched.
pub(crate) const MAX_WRITE_INPUT_BYTES: u64 = 1 << 30;

/// `quarry page ...`.
pub fn page(cluster: Option<&Path>, command: &PageCommand) -> Result<()> {
    match command {
        PageCommand::Read {
            addr,
            out,
            oob,
            queue_depth,
        } => {
            let target: PageTarget = addr.parse()?;
            let (_, client) = connect(cluster)?;
            match target {
                PageTarget::Global(addr) => read_one(&client, addr, None, out.as_deref(), *oob),
                PageTarget::Linear { first, count } => {
                    let space = client.linear_space()?;
                    let count = count.unwrap_or(1);
                    if count == 1 {
                        let addr = space.to_global(first)?;
                        return read_one(&client, addr, Some(first), out.as_deref(), *oob);
                    }
                    if *oob {
                        bail!("--oob shows one page; {addr} is {count} pages");
                    }
                    read_range(&client, &space, first, count, *queue_depth, out.as_deref())
                }
            }
        }
        PageCommand::Write {
            addr,
            file,
            oob_hex,
            queue_depth,
        } => {
            let target: PageTarget = addr.parse()?;
            let oob = match oob_hex {
                Some(text) => parse_hex(text)?,
                None => Vec::new(),
            };
            let (_, client) = connect(cluster)?;
            match target {
                PageTarget::Global(addr) => {
                    let info = client.node_info(addr.node)?;
                    let page_size = u64::from(info.device.geometry.page_size_bytes);
                    let data = read_input(file.as_deref(), page_size)?;
                    if data.len() as u64 > page_size {
                        bail!("input is more than the page size of {page_size} bytes");
                    }
                    program_one(&client, addr, None, data, page_size, oob)
                }
                PageTarget::Linear { first, count } => {
                    let space = client.linear_space()?;
                    // Fails here, before reading any input, when `first`
                    // itself is outside the space.
                    let first_addr = space.to_global(first)?;
                    let page_size = u64::from(space.geometry().page_size_bytes);
                    let room = space.pages() - first;
                    let (pages, what) = match count {
                        Some(count) if count > room => {
                            return Err(past_the_end(&space)
                                .context(format!("linear range {addr} does not fit in the space")))
                        }
                        Some(count) => (count, format!("linear range {addr}")),
                        None => (room, format!("the space from linear page {first} on")),
                    };
                    let limit = pages.saturating_mul(page_size).min(MAX_WRITE_INPUT_BYTES);
                    let data = read_input(file.as_deref(), limit)?;
                    if data.len() as u64 > limit {
                        if limit == MAX_WRITE_INPUT_BYTES {
                            bail!(
                                "input is more than {}, the most one write takes",
                                human_bytes(MAX_WRITE_INPUT_BYTES)
                            );
                        }
                        bail!(
                            "input is more than {limit} bytes: {what} holds {pages} pages of {page_size} bytes; nothing was programmed"
                        );
                    }
                    if data.len() as u64 <= page_size {
                        return program_one(&client, first_addr, Some(first), data, page_size, oob);
                    }
                    if !oob.is_empty() {
                        bail!(
                            "--oob-hex programs one page; the input needs {} pages",
                            data.len().div_ceil(page_size as usize)
                        );
                    }
                    write_range(&client, &space, first, &data, *queue_depth)
                }
            }
        }
        PageCommand::Erase { addr } => {
            let addr: GlobalBlockAddr = addr.parse()?;
            let (_, client) = connect(cluster)?;
            client.erase_block(addr)?;
            eprintln!("erased block {addr}");
            Ok(())
        }
    }
}

/// Names a page for messages: its global address, and its linear number when
/// the user gave one.
fn page_label(addr: GlobalPageAddr, linear: Option<u64>) -> String {
    match linear {
        Some(linear) => format!("linear page {linear} ({addr})"),
        None => format!("page {addr}"),
    }
}

fn read_one(
    client: &BlockingClient,
    addr: GlobalPageAddr,
    linear: Option<u64>,
    out: Option<&Path>,
    oob: bool,
) -> Result<()> {
    let label = page_label(addr, linear);
    let page = client
        .read_page(addr)
        .with_context(|| format!("cannot read {label}"))?;
    if oob || page.corrected_bytes > 0 {
        eprintln!(
            "{label}: {} data bytes, erased: {}, ECC corrected {} bytes",
            page.data.len(),
            page.erased,
            page.corrected_bytes
        );
    }
    if oob {
        eprintln!("oob: {}", hex(&page.oob));
    }
    match out {
        Some(path) => std::fs::write(path, &page.data)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None if std::io::stdout().is_terminal() => print!("{}", hex_dump(&page.data)),
        None => std::io::stdout()
            .lock()
            .write_all(&page.data)
            .context("cannot write to stdout")?,
    }
    Ok(())
}

/// Streams `count` linear pages from `first` to `out` (or stdout), raw and
/// concatenated, in calls of at most [`CLI_CHUNK_PAGES`] pages.
fn read_range(
    client: &BlockingClient,
    space: &LinearSpace,
    first: u64,
    count: u64,
    queue_depth: u32,
    out: Option<&Path>,
) -> Result<()> {
    // Check the whole range before any output, so a range that runs past the
    // end writes nothing rather than its first chunks.
    let end = match first.checked_add(count) {
        Some(end) if end <= space.pages() => end,
        _ => {
            return Err(past_the_end(space).context(format!(
                "linear range {first}..{} does not fit in the space",
                first.saturating_add(count)
            )))
        }
    };
    let mut sink: Box<dyn Write> = match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let target = match out {
        Some(path) => path.display().to_string(),
        None => "stdout".into(),
    };
    let mut bytes = 0u64;
    let mut chunk_first = first;
    while chunk_first < end {
        let chunk = (end - chunk_first).min(CLI_CHUNK_PAGES);
        let pages = client.read_linear(space, chunk_first, chunk, queue_depth as usize)?;
        for (i, page) in pages.iter().enumerate() {
            if page.corrected_bytes > 0 {
                let linear = chunk_first + i as u64;
                eprintln!(
                    "{}: ECC corrected {} bytes",
                    page_label(space.to_global(linear)?, Some(linear)),
                    page.corrected_bytes
                );
            }
            sink.write_all(&page.data)
                .with_context(|| format!("cannot write to {target}"))?;
            bytes += page.data.len() as u64;
        }
        chunk_first += chunk;
    }
    sink.flush()
        .with_context(|| format!("cannot write to {target}"))?;
    eprintln!(
        "read linear pages {first}..{end} ({count} pages, {}) from {} nodes",
        human_bytes(bytes),
        nodes_touched(space, count)
    );
    Ok(())
}

fn program_one(
    client: &BlockingClient,
    addr: GlobalPageAddr,
    linear: Option<u64>,
    mut data: Vec<u8>,
    page_size: u64,
    oob: Vec<u8>,
) -> Result<()> {
    let label = page_label(addr, linear);
    let given = data.len();
    data.resize(page_size as usize, 0);
    client
        .program_page(addr, Bytes::from(data), Bytes::from(oob))
        .with_context(|| format!("cannot program {label}"))?;
    eprintln!("programmed {label} ({given} bytes given, padded to {page_size})");
    Ok(())
}

/// Programs `data` onto consecutive linear pages from `first`, in calls of at
/// most [`CLI_CHUNK_PAGES`] pages.
fn write_range(
    client: &BlockingClient,
    space: &LinearSpace,
    first: u64,
    data: &[u8],
    queue_depth: u32,
) -> Result<()> {
    let page_size = space.geometry().page_size_bytes as usize;
    let mut programmed = 0u64;
    for chunk in data.chunks(CLI_CHUNK_PAGES as usize * page_size) {
        programmed +=
            client.write_linear(space, first + programmed, chunk, queue_depth as usize)?;
    }
    eprintln!(
        "programmed linear pages {first}..{} ({programmed} pages on {} nodes, {} bytes given, the last page padded to {page_size})",
        first + programmed,
        nodes_touched(space, programmed),
        data.len()
    );
    Ok(())
}

/// How many nodes `count` consecutive linear pages reach: consecutive pages
/// go to consecutive members, so it is the count, at most every member.
fn nodes_touched(space: &LinearSpace, count: u64) -> u64 {
    count.min(space.nodes().len() as u64)
}

/// The error for a range that runs past the end: it names the first linear
/// page outside the space and the space's size.
fn past_the_end(space: &LinearSpace) -> anyhow::Error {
    LinearSpaceError::OutOfRange {
        linear: space.pages(),
        pages: space.pages(),
    }
    .into()
}

/// Reads `file` (or stdin) up to one byte past `limit`, so input over the
/// limit shows as longer than it without being read whole.
pub(crate) fn read_input(file: Option<&Path>, limit: u64) -> Result<Vec<u8>> {
    // Read one byte past the limit so oversized input is detected without
    // reading it all.
    let limit = limit.saturating_add(1);
    let mut data = Vec::new();
    match file {
        Some(path) => {
            let f = std::fs::File::open(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            f.take(limit)
                .read_to_end(&mut data)
                .with_context(|| format!("cannot read {}", path.display()))?;
        }
        None => {
            std::io::stdin()
                .lock()
                .take(limit)
                .read_to_end(&mut data)
                .context("cannot read stdin")?;
        }
    }
    Ok(data)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Result<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        bail!("--oob-hex {text:?} has an odd number of digits");
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&text[i..i + 2], 16)
                .with_context(|| format!("--oob-hex {text:?}: {:?} is not hex", &text[i..i + 2]))
        })
        .collect()
}

/// An `xxd`-style dump, eliding runs of identical lines.
pub fn hex_dump(data: &[u8]) -> String {
    let mut out = String::new();
    let mut previous: Option<&[u8]> = None;
    let mut eliding = false;
    for (i, line) in data.chunks(16).enumerate() {
        if previous == Some(line) {
            if !eliding {
                out.push_str("*\n");
                eliding = true;
            }
            continue;
        }
        eliding = false;
        previous = Some(line);
        let hexes: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let text: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!(
            "{:08x}: {:<47}  {text}\n",
            i * 16,
            hexes.join(" ")
        ));
    }
    out.push_str(&format!("{:08x}\n", data.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PageTarget> {
        text.parse()
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse(text).expect_err("bad address"))
    }

    #[test]
    fn page_targets_parse_every_form() {
        let global = parse("2:1:0:3:4").expect("global");
        assert_eq!(
            global,
            PageTarget::Global("2:1:0:3:4".parse().expect("global"))
        );
        assert_eq!(
            parse("17").expect("linear"),
            PageTarget::Linear {
                first: 17,
                count: None
            }
        );
        assert_eq!(
            parse("4..10").expect("range"),
            PageTarget::Linear {
                first: 4,
                count: Some(6)
            }
        );
        assert_eq!(
            parse("4+3").expect("range"),
            PageTarget::Linear {
                first: 4,
                count: Some(3)
            }
        );
    }

    #[test]
    fn bad_page_targets_say_what_was_expected() {
        for text in ["abc", "1..x", "+3", "1.5"] {
            let message = error(text);
            assert!(message.contains(ADDR_FORMS), "{text}: {message}");
        }
        assert!(error("5..5").contains("is empty"));
        assert!(error("5..3").contains("is empty"));
        assert!(error("5+0").contains("is empty"));
        assert!(error(&format!("{}+2", u64::MAX)).contains("past the largest"));
        assert!(error("1:2:3").contains("expected 5 fields"));
    }
}
