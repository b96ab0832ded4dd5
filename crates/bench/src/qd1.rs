//! The floor a QD1 request is measured against (a blocking loopback TCP
//! ping-pong of the request's and the answer's sizes), and the volume page
//! rows of `quarry bench page`: a volume page read and write at QD1 next to
//! a raw page read through the same node.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quarry_client::Client;
use quarry_device::{BackendKind, PageAddr};
use quarry_local::{quarry_exe, LocalCluster, LocalClusterSpec, Topology};
use quarry_proto::GlobalPageAddr;
use rand::{Rng, SeedableRng};

use crate::stats::LatencyStats;

/// What a page read's request frame carries, rounded up (header and page
/// address), and what an answer adds to the page (header, flags, lengths).
pub(crate) const REQUEST_FRAME_BYTES: usize = 64;
pub(crate) const ANSWER_HEAD_BYTES: usize = 64;
/// Most rounds of one ping-pong measurement.
const MAX_ROUNDS: usize = 1_000_000;
/// Logical pages of the volume the volume rows read and write.
const VOLUME_PAGES: u64 = 1024;
/// Raw pages the raw row reads: programmed pages found by scanning the
/// device from its first page, at most this many pages looked at.
const RAW_PAGES_WANTED: usize = 256;
const RAW_SCAN_MAX_PAGES: u64 = 64 * 1024;

/// Mean round trip (us) of a blocking loopback TCP ping-pong: `request_bytes`
/// out, `answer_bytes` back, `rounds` times, TCP_NODELAY on both ends, one
/// thread per end. The floor any request/answer protocol over loopback
/// stands on.
pub(crate) fn ping_pong_us(
    rounds: usize,
    request_bytes: usize,
    answer_bytes: usize,
) -> Result<f64> {
    if rounds == 0 || rounds > MAX_ROUNDS {
        bail!("ping-pong rounds must be in 1..={MAX_ROUNDS}, not {rounds}");
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut request = vec![0u8; request_bytes];
        let answer = vec![0u8; answer_bytes];
        for _ in 0..rounds {
            s.read_exact(&mut request)?;
            s.write_all(&answer)?;
        }
        Ok(())
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_nodelay(true)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let request = vec![1u8; request_bytes];
    let mut answer = vec![0u8; answer_bytes];
    let started = Instant::now();
    for _ in 0..rounds {
        c.write_all(&request)?;
        c.read_exact(&mut answer)?;
    }
    let us = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
    match server.join() {
        Ok(r) => r.context("ping-pong server")?,
        Err(_) => bail!("the ping-pong server thread panicked"),
    }
    Ok(us)
}

/// QD1 figures of a one-node managed `mem` cluster (CRC-32C pages, as
/// `quarry up` makes them): a raw page read, a
/// volume page read and a volume page write through the same node, and the
/// ping-pong of a page read's sizes measured in the same run.
#[derive(Debug, serde::Serialize)]
pub(crate) struct VolumeRows {
    pub page_size_bytes: usize,
    pub ops: u64,
    pub pingpong_us_mean: f64,
    pub raw_read_us_mean: f64,
    pub volume_read_us_mean: f64,
    pub volume_write_us_mean: f64,
    /// Medians: on a shared machine the means carry other processes' stalls.
    pub raw_read_us_p50: f64,
    pub volume_read_us_p50: f64,
    pub volume_write_us_p50: f64,
    pub volume_read_vs_raw: f64,
    pub volume_write_vs_raw: f64,
}

/// Starts a one-node managed `mem` cluster in `dir` and measures
/// [`VolumeRows`] with `ops` requests per row.
pub(crate) fn volume_rows(
    runtime: &tokio::runtime::Runtime,
    ops: u64,
    dir: &Path,
) -> Result<VolumeRows> {
    let spec = LocalClusterSpec {
        nodes: 1,
        dir: dir.to_path_buf(),
        backend: BackendKind::Mem,
        preset: None,
        geometry: None,
        capacity_bytes: None,
        direct_io: true,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        // What `quarry up` gives a mem node: the rows are what a user gets.
        ecc: quarry_device::EccMode::Crc,
        kv_toml: None,
        device_toml: None,
    };
    eprintln!(
        "bench page: starting a 1-node managed mem cluster in {} for the volume rows",
        dir.display()
    );
    let cluster = LocalCluster::start(&spec, &quarry_exe()?)?;
    let rows = runtime.block_on(measure_volume(&cluster, ops.max(1)));
    cluster.stop()?;
    rows
}

async fn measure_volume(cluster: &LocalCluster, ops: u64) -> Result<VolumeRows> {
    let client = Client::connect(&cluster.cluster.nodes[0].addr).await?;
    let volumes = client.volumes().await?;
    let probe = volumes.list().await?;
    let page_size = probe
        .nodes
        .first()
        .map(|n| n.page_size_bytes as usize)
        .context("the cluster lists no node")?;
    volumes
        .create("bench-page", VOLUME_PAGES * page_size as u64, None)
        .await?;
    let volume = volumes.open("bench-page").await?;
    let page = vec![0x5au8; page_size];
    // Every page written once, so reads find data (not the zeros of a page
    // never written, which costs no device read).
    for p in 0..VOLUME_PAGES {
        volume.write_page(p, &page).await?;
    }
    let raw = programmed_pages(&client).await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x51d1);
    let mut raw_stats = LatencyStats::new();
    let mut read_stats = LatencyStats::new();
    let mut write_stats = LatencyStats::new();
    // Interleaved, so drift on a shared machine hits all three alike.
    for _ in 0..ops {
        let addr = raw[rng.gen_range(0..raw.len())];
        let sent = Instant::now();
        client.read_page(addr).await?;
        raw_stats.record(sent.elapsed());
        let p = rng.gen_range(0..VOLUME_PAGES);
        let sent = Instant::now();
        volume.read_page(p).await?;
        read_stats.record(sent.elapsed());
        let sent = Instant::now();
        volume.write_page(p, &page).await?;
        write_stats.record(sent.elapsed());
    }
    let pingpong = ping_pong_us(
        ops as usize,
        REQUEST_FRAME_BYTES,
        page_size + ANSWER_HEAD_BYTES,
    )?;
    let raw_us = raw_stats.mean_us();
    Ok(VolumeRows {
        page_size_bytes: page_size,
        ops,
        pingpong_us_mean: pingpong,
        raw_read_us_mean: raw_us,
        volume_read_us_mean: read_stats.mean_us(),
        volume_write_us_mean: write_stats.mean_us(),
        raw_read_us_p50: raw_stats.quantile_us(0.5),
        volume_read_us_p50: read_stats.quantile_us(0.5),
        volume_write_us_p50: write_stats.quantile_us(0.5),
        volume_read_vs_raw: read_stats.mean_us() / raw_us,
        volume_write_vs_raw: write_stats.mean_us() / raw_us,
    })
}

/// Programmed (not erased) pages of node 0's device, found by reading its
/// pages in device order: what the volume's writes put there.
async fn programmed_pages(client: &Client) -> Result<Vec<GlobalPageAddr>> {
    let g = client.node_info(0).await?.device.geometry;
    let mut found = Vec::new();
    for index in 0..g.pages().min(RAW_SCAN_MAX_PAGES) {
        let page: PageAddr = g.page_at(index);
        let addr = GlobalPageAddr { node: 0, page };
        if !client.read_page(addr).await?.erased {
            found.push(addr);
            if found.len() >= RAW_PAGES_WANTED {
                break;
            }
        }
    }
    if found.is_empty() {
        bail!("no programmed page among node 0's first {RAW_SCAN_MAX_PAGES} pages");
    }
    Ok(found)
}

/// Prints the volume rows as a table.
pub(crate) fn print_volume_rows(r: &VolumeRows) {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "QD1, one managed mem node",
        "mean us",
        "p50 us",
        "mean vs raw read",
        "p50 vs raw read",
        "mean in ping-pongs",
    ]);
    let rows = [
        (
            "TCP ping-pong (64 B / page + 64 B)",
            r.pingpong_us_mean,
            None,
        ),
        ("raw page read", r.raw_read_us_mean, Some(r.raw_read_us_p50)),
        (
            "volume page read",
            r.volume_read_us_mean,
            Some(r.volume_read_us_p50),
        ),
        (
            "volume page write",
            r.volume_write_us_mean,
            Some(r.volume_write_us_p50),
        ),
    ];
    let dash = || "-".to_string();
    for (name, mean, p50) in rows {
        table.add_row(vec![
            name.to_string(),
            format!("{mean:.1}"),
            p50.map_or_else(dash, |p| format!("{p:.1}")),
            format!("{:.2}", mean / r.raw_read_us_mean),
            p50.map_or_else(dash, |p| format!("{:.2}", p / r.raw_read_us_p50)),
            format!("{:.2}", mean / r.pingpong_us_mean),
        ]);
    }
    println!(
        "\n== volume pages of {} B vs a raw page read through the same node ({} ops each, interleaved):\n{table}",
        r.page_size_bytes, r.ops
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_pong_moves_its_sizes_and_refuses_no_rounds() {
        assert!(ping_pong_us(50, 64, 8192).unwrap() > 0.0);
        let refused = ping_pong_us(0, 64, 8192).unwrap_err().to_string();
        assert!(refused.contains("rounds must be in"), "{refused}");
    }
}
