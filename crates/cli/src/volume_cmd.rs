//! `quarry volume ...`: named block volumes striped over the cluster's
//! nodes (create, ls, stat, rm, read, write).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{Client, ClusterFile, Volume, VolumeDef, Volumes, MAX_RANGE_BYTES};

use crate::commands::{
    hex_dump, human_bytes, parse_page_range, read_input, RangeSyntax, MAX_WRITE_INPUT_BYTES,
};
use crate::dates::local_time_text;
use quarry_jobs::parse_size;

/// `quarry volume ...`.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create a volume: a logical page space striped over nodes (page L on
    /// the (L mod n)-th node of --nodes), then over each node's buses and
    /// chips.
    ///
    /// The size is thin-provisioned: nothing is reserved, and a write of a
    /// new page past a node's capacity fails with "out of space". Every
    /// node must run managed storage and have the same page size.
    Create {
        /// The name: letters, digits, '.', '_' and '-', at most 64 bytes.
        name: String,
        /// Size in bytes, a whole number of pages: 4096, 64K, 64M, 1G, 2T
        /// (K/M/G/T are powers of 1024; KiB, MB and the like work too).
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// The member nodes in stripe order, as 0,1,2 (default: every node).
        #[arg(long, value_delimiter = ',', value_name = "ID,...")]
        nodes: Option<Vec<u16>>,
    },
    /// List the cluster's volumes.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one volume: its definition and each member's share.
    Stat {
        /// The volume.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a volume: every member trims its pages and drops it.
    Rm {
        /// The volume.
        name: String,
    },
    /// Write pages from FILE or stdin; the last page is padded with zero bytes.
    ///
    /// `N` takes as many pages from page N on as the input needs; a range
    /// `N..M` (end exclusive) or `N+COUNT` the same, but no more than the
    /// range holds (checked before anything is written). Input is read
    /// whole first, at most 1 GiB.
    Write {
        /// The volume.
        name: String,
        /// A page `N`, or a range `N..M` (end exclusive) or `N+COUNT`.
        #[arg(value_name = "PAGES")]
        pages: String,
        /// The data (default: stdin).
        file: Option<PathBuf>,
    },
    /// Read pages to stdout or --out: raw bytes, or a hex dump when one page
    /// goes to a terminal. Pages never written read as zeros.
    Read {
        /// The volume.
        name: String,
        /// A page `N`, or a range `N..M` (end exclusive) or `N+COUNT`.
        #[arg(value_name = "PAGES")]
        pages: String,
        /// Write the data to this file.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

const VOLUME_SYNTAX: RangeSyntax = RangeSyntax {
    argument: "volume pages",
    range: "page range",
    forms: "expected a page N, or a range N..M (end exclusive) or N+COUNT",
};

/// Pages one call of the CLI moves: bounds its memory (16 MiB at 4 KiB
/// pages) within what one client read or write may move.
fn chunk_pages(page_size: u64) -> u64 {
    (MAX_RANGE_BYTES / page_size).clamp(1, 4096)
}

/// `quarry volume ...`.
pub fn volume(cluster: Option<&Path>, command: &VolumeCommand) -> Result<()> {
    let file = ClusterFile::load(&ClusterFile::locate(cluster))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the client runtime")?;
    runtime.block_on(async {
        let client = Client::connect_cluster(&file).await?;
        let volumes = client.volumes().await?;
        match command {
            VolumeCommand::Create { name, size, nodes } => {
                create(&volumes, name, *size, nodes.clone()).await
            }
            VolumeCommand::Ls { json } => list(&volumes, *json).await,
            VolumeCommand::Stat { name, json } => stat(&volumes, name, *json).await,
            VolumeCommand::Rm { name } => {
                let trimmed = volumes.delete(name).await?;
                eprintln!("deleted volume {name} ({trimmed} pages trimmed)");
                Ok(())
            }
            VolumeCommand::Write { name, pages, file } => {
                let (first, count) = parse_page_range(pages, &VOLUME_SYNTAX)?;
                let volume = volumes.open(name).await?;
                write(&volume, first, count, file.as_deref()).await
            }
            VolumeCommand::Read { name, pages, out } => {
                let (first, count) = parse_page_range(pages, &VOLUME_SYNTAX)?;
                let volume = volumes.open(name).await?;
                read(&volume, first, count.unwrap_or(1), out.as_deref()).await
            }
        }
    })
}

fn members_text(def: &VolumeDef) -> String {
    def.members
        .iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

async fn create(volumes: &Volumes, name: &str, size: u64, nodes: Option<Vec<u16>>) -> Result<()> {
    let def = volumes.create(name, size, nodes).await?;
    println!(
        "created volume {}: {} ({} pages of {} bytes) striped over nodes {}",
        def.name,
        human_bytes(def.size_bytes()),
        def.size_pages,
        def.page_size_bytes,
        members_text(&def)
    );
    // Thin provisioning: say so when the members cannot hold it all now.
    if let Ok(listing) = volumes.list().await {
        let free: u64 = listing
            .nodes
            .iter()
            .filter(|n| def.members.contains(&n.node))
            .map(|n| n.capacity_pages.saturating_sub(n.live_pages))
            .sum();
        if free < def.size_pages {
            eprintln!(
                "note: volumes are thin-provisioned; its members have room for {free} more pages \
                 ({}) now, a write past that fails with \"out of space\"",
                human_bytes(free * u64::from(def.page_size_bytes))
            );
        }
    }
    Ok(())
}

async fn list(volumes: &Volumes, json: bool) -> Result<()> {
    let listing = volumes.list().await?;
    for (node, why) in &listing.unanswered {
        eprintln!("warning: node {node} did not answer, its volumes may be missing: {why}");
    }
    if json {
        let value: Vec<serde_json::Value> = listing
            .volumes
            .iter()
            .map(|v| {
                serde_json::json!({
                    "name": v.def.name,
                    "id": v.def.id,
                    "size_bytes": v.def.size_bytes(),
                    "size_pages": v.def.size_pages,
                    "page_size_bytes": v.def.page_size_bytes,
                    "members": v.def.members,
                    "used_pages": v.used_pages,
                    "created_unix_ms": v.def.created_unix_ms,
                    "missing_on": v.missing_on,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if listing.volumes.is_empty() {
        println!("no volumes");
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "name", "size", "pages", "page", "nodes", "used", "created", "state",
    ]);
    for v in &listing.volumes {
        let d = &v.def;
        let state = if v.missing_on.is_empty() {
            "ok".to_string()
        } else {
            format!("incomplete: not on node(s) {:?}", v.missing_on)
        };
        table.add_row(vec![
            d.name.clone(),
            human_bytes(d.size_bytes()),
            d.size_pages.to_string(),
            format!("{} B", d.page_size_bytes),
            members_text(d),
            human_bytes(v.used_pages * u64::from(d.page_size_bytes)),
            local_time_text(d.created_unix_ms),
            state,
        ]);
    }
    println!("{table}");
    Ok(())
}

async fn stat(volumes: &Volumes, name: &str, json: bool) -> Result<()> {
    let status = volumes.status(name).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(());
    }
    let d = &status.def;
    let ps = u64::from(d.page_size_bytes);
    println!("volume:     {}", d.name);
    println!(
        "size:       {} ({} pages of {} bytes)",
        human_bytes(d.size_bytes()),
        d.size_pages,
        d.page_size_bytes
    );
    println!(
        "used:       {} ({} pages written; the rest reads as zeros)",
        human_bytes(status.used_pages() * ps),
        status.used_pages()
    );
    println!(
        "striping:   page L on node members[L % {}] at index L / {}",
        d.members.len(),
        d.members.len()
    );
    println!("members:    {}", members_text(d));
    println!("id:         {} (space {} on each member)", d.id, d.space());
    println!("created:    {}", local_time_text(d.created_unix_ms));
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "node",
        "pages of the volume",
        "written here",
        "node free / capacity",
        "problem",
    ]);
    for (i, m) in status.members.iter().enumerate() {
        let share = d.member_pages(i);
        table.add_row(vec![
            m.node.to_string(),
            share.to_string(),
            m.used_pages
                .map(|p| format!("{p} ({})", human_bytes(p * ps)))
                .unwrap_or_else(|| "-".into()),
            m.space
                .map(|s| {
                    format!(
                        "{} / {}",
                        human_bytes(s.capacity_pages.saturating_sub(s.live_pages) * ps),
                        human_bytes(s.capacity_pages * ps)
                    )
                })
                .unwrap_or_else(|| "-".into()),
            m.problem.clone().unwrap_or_default(),
        ]);
    }
    println!("{table}");
    Ok(())
}

async fn write(volume: &Volume, first: u64, count: Option<u64>, file: Option<&Path>) -> Result<()> {
    let name = &volume.def().name;
    let pages = volume.pages();
    let ps = volume.page_size() as u64;
    // Checked before any input is read.
    let room = match pages.checked_sub(first) {
        Some(room) if room > 0 => room,
        _ => bail!("volume {name:?} has {pages} pages (0..{pages}); page {first} is past its end"),
    };
    let (limit_pages, what) = match count {
        Some(count) if count > room => bail!(
            "page range {first}..{} does not fit in volume {name:?}, which has {pages} pages",
            first.saturating_add(count)
        ),
        Some(count) => (count, format!("pages {first}..{}", first + count)),
        None => (room, format!("volume {name:?} from page {first} on")),
    };
    let limit = limit_pages.saturating_mul(ps).min(MAX_WRITE_INPUT_BYTES);
    let mut data = read_input(file, limit)?;
    if data.len() as u64 > limit {
        if limit == MAX_WRITE_INPUT_BYTES {
            bail!(
                "input is more than {}, the most one write takes; nothing was written",
                human_bytes(MAX_WRITE_INPUT_BYTES)
            );
        }
        bail!(
            "input is more than {limit} bytes: {what} holds {limit_pages} pages of {ps} bytes; \
             nothing was written"
        );
    }
    if data.is_empty() {
        bail!("the input is empty; nothing was written");
    }
    let given = data.len();
    data.resize(given.div_ceil(ps as usize) * ps as usize, 0);
    let written = data.len() as u64 / ps;
    let chunk = chunk_pages(ps);
    for (i, part) in data.chunks((chunk * ps) as usize).enumerate() {
        let at = first + i as u64 * chunk;
        volume
            .write_pages(at, part)
            .await
            .with_context(|| format!("writing pages from {at} of volume {name:?}"))?;
    }
    eprintln!(
        "wrote pages {first}..{} of volume {name} ({written} pages on {} nodes, {given} bytes \
         given, the last page padded to {ps})",
        first + written,
        written.min(volume.def().members.len() as u64)
    );
    Ok(())
}

async fn read(volume: &Volume, first: u64, count: u64, out: Option<&Path>) -> Result<()> {
    let name = &volume.def().name;
    let pages = volume.pages();
    // Checked before any output, so a range past the end writes nothing.
    match first.checked_add(count) {
        Some(end) if end <= pages => {}
        _ => bail!(
            "page range {first}..{} does not fit in volume {name:?}, which has {pages} pages",
            first.saturating_add(count)
        ),
    }
    let ps = volume.page_size() as u64;
    if count == 1 && out.is_none() && std::io::stdout().is_terminal() {
        let page = volume.read_page(first).await?;
        print!("{}", hex_dump(&page));
        return Ok(());
    }
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
    let chunk = chunk_pages(ps);
    let mut at = first;
    while at < first + count {
        let n = (first + count - at).min(chunk);
        let data = volume.read_pages(at, n).await?;
        sink.write_all(&data)
            .with_context(|| format!("cannot write to {target}"))?;
        at += n;
    }
    sink.flush()
        .with_context(|| format!("cannot write to {target}"))?;
    eprintln!(
        "read pages {first}..{} of volume {name} ({count} pages, {})",
        first + count,
        human_bytes(count * ps)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_page_ranges_parse_with_their_own_words() {
        assert_eq!(parse_page_range("7", &VOLUME_SYNTAX).unwrap(), (7, None));
        assert_eq!(
            parse_page_range("2..5", &VOLUME_SYNTAX).unwrap(),
            (2, Some(3))
        );
        assert_eq!(
            parse_page_range("2+5", &VOLUME_SYNTAX).unwrap(),
            (2, Some(5))
        );
        let e = format!("{:#}", parse_page_range("x", &VOLUME_SYNTAX).unwrap_err());
        assert!(
            e.contains("volume pages \"x\"") && e.contains("N+COUNT"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            parse_page_range("3..3", &VOLUME_SYNTAX).unwrap_err()
        );
        assert!(e.contains("page range 3..3 is empty"), "{e}");
    }
}
