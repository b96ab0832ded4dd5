//! The small subcommands: up, down, status, page.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{BlockingClient, ClusterFile};
use quarry_device::{BackendKind, Preset};
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeInfo};

use crate::args::{DeviceArg, PageCommand, PresetArg, UpArgs};
use crate::local_cluster::{self, LocalCluster, LocalClusterSpec};

/// Converts the CLI's backend choice.
pub fn backend_of(arg: DeviceArg) -> BackendKind {
    match arg {
        DeviceArg::File => BackendKind::File,
        DeviceArg::Mem => BackendKind::Mem,
        DeviceArg::Nand => BackendKind::Nand,
    }
}

/// Converts the CLI's preset choice.
pub fn preset_of(arg: PresetArg) -> Preset {
    match arg {
        PresetArg::Bluedbm => Preset::Bluedbm,
        PresetArg::Rfsa => Preset::Rfsa,
    }
}

/// The `quarry` binary, to start nodes with.
pub fn quarry_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the quarry executable to start nodes with")
}

/// `quarry up`.
pub fn up(args: &UpArgs) -> Result<()> {
    let spec = LocalClusterSpec {
        nodes: args.nodes,
        dir: args.dir.clone(),
        backend: backend_of(args.device),
        preset: args.preset.map(preset_of),
        geometry: None,
        direct_io: true,
    };
    let mut cluster = LocalCluster::start(&spec, &quarry_exe()?)?;
    print_members(&cluster.cluster);
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

/// `quarry down`.
pub fn down(dir: &Path) -> Result<()> {
    let stopped = local_cluster::down(dir)?;
    println!(
        "stopped {stopped} node(s) of the cluster in {}",
        dir.display()
    );
    Ok(())
}

fn print_members(cluster: &ClusterFile) {
    for node in &cluster.nodes {
        println!(
            "node {} listening on {} (pid {})",
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

/// Formats a byte count with binary units.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `quarry page ...`.
pub fn page(cluster: Option<&Path>, command: &PageCommand) -> Result<()> {
    match command {
        PageCommand::Read { addr, out, oob } => {
            let addr: GlobalPageAddr = addr.parse()?;
            let (_, client) = connect(cluster)?;
            let page = client.read_page(addr)?;
            if *oob || page.corrected_bytes > 0 {
                eprintln!(
                    "page {addr}: {} data bytes, erased: {}, ECC corrected {} bytes",
                    page.data.len(),
                    page.erased,
                    page.corrected_bytes
                );
            }
            if *oob {
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
        PageCommand::Write {
            addr,
            file,
            oob_hex,
        } => {
            let addr: GlobalPageAddr = addr.parse()?;
            let (_, client) = connect(cluster)?;
            let info = client.node_info(addr.node)?;
            let page_size = info.device.geometry.page_size_bytes as usize;
            let mut data = read_input(file.as_deref(), page_size)?;
            if data.len() > page_size {
                bail!(
                    "input is {} bytes, more than the page size of {page_size} bytes",
                    data.len()
                );
            }
            let given = data.len();
            data.resize(page_size, 0);
            let oob = match oob_hex {
                Some(text) => parse_hex(text)?,
                None => Vec::new(),
            };
            client.program_page(addr, Bytes::from(data), Bytes::from(oob))?;
            eprintln!("programmed page {addr} ({given} bytes given, padded to {page_size})");
            Ok(())
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

fn read_input(file: Option<&Path>, page_size: usize) -> Result<Vec<u8>> {
    // Read one byte past a page so oversized input is detected without reading it all.
    let limit = page_size as u64 + 1;
    let mut data = Vec::with_capacity(page_size);
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
