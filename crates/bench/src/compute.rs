//! `quarry bench wordcount` (BlueDBM Fig. 11) and `quarry bench minerva`
//! (Minerva's fgrep-8 and read-modify-write): near-data kernels vs the
//! client doing the same work on data it fetches, on loopback and with the
//! client's link limited by `tc` in a network namespace. Every row reports
//! the bytes the kernels scanned, the bytes that reached the client and
//! their ratio.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use futures::StreamExt;
use quarry_client::{
    BucketName, Chunking, Client, Condition, GrepSpec, GrepSyntax, Job, KernelSpec, Limits,
    ObjectKey, Outcome, Output, OutputPiece, RmwBatch, RmwOp, Target, WcSpec,
};
use quarry_device::{BackendKind, Geometry};
use serde::Serialize;

use crate::args::BenchComputeArgs;
use crate::common::{work_dir, CountingSink, TempDir};
use crate::measure::median;
use crate::netlink::ClientNet;
use crate::plot::{LinePlot, Series};
use quarry_client::file_source;
use quarry_jobs::human_bytes;
use quarry_jobs::parse_size;
use quarry_local::quarry_exe;
use quarry_local::{LocalCluster, LocalClusterSpec, Topology};

const WORD: &str = "would";
const PATTERN: [u8; 8] = *b"flashes!";
const BUCKET: &str = "bench";
const KEY: &str = "corpus.txt";
/// The x value standing for loopback on the plots' link axis.
const LOOPBACK_X: f64 = 100.0;

/// One measured way of doing the work on one link.
#[derive(Debug, Clone, Serialize)]
struct Row {
    link: String,
    mode: &'static str,
    /// MB/s of data processed (10^6 bytes), or ops/s for RMW.
    rate: f64,
    unit: &'static str,
    bytes_scanned: u64,
    bytes_to_client: u64,
    scanned_per_sent: f64,
    /// Rate over the host-software (or round-trip) row of the same link.
    speedup: f64,
    answer: u64,
}

/// Where the client runs.
pub(crate) struct Link {
    pub(crate) name: String,
    pub(crate) rate: Option<String>,
    x: f64,
}

pub(crate) fn links(text: &str) -> Result<Vec<Link>> {
    text.split(',')
        .map(|l| {
            let l = l.trim();
            if l == "loopback" {
                return Ok(Link {
                    name: "loopback".into(),
                    rate: None,
                    x: LOOPBACK_X,
                });
            }
            let Some(gbit) = l.strip_suffix("gbit") else {
                bail!("--links: {l:?} is not loopback or NNgbit");
            };
            let g: f64 = gbit.parse().with_context(|| format!("--links: {l:?}"))?;
            Ok(Link {
                name: format!("{g} Gb/s"),
                rate: Some(l.to_string()),
                x: g,
            })
        })
        .collect()
}

/// The cluster, its data and the client's way in.
struct Setup {
    _scratch: Option<TempDir>,
    cluster: LocalCluster,
    source: PathBuf,
    size_bytes: u64,
    members: Vec<u16>,
}

impl Setup {
    fn entry(&self) -> Result<SocketAddr> {
        self.cluster.cluster.nodes[0]
            .addr
            .parse()
            .context("the entry node's address")
    }
}

fn setup(args: &BenchComputeArgs, name: &str, volume_bytes: u64) -> Result<Setup> {
    let size_bytes = if args.common.quick {
        64 << 20
    } else {
        parse_size(&args.size)?
    };
    if size_bytes < (1 << 20) {
        bail!("--size must be at least 1M");
    }
    let (dir, scratch) = work_dir(args.common.dir.as_deref(), &format!("quarry-bench-{name}"))?;
    let source = dir.join("corpus.txt");
    write_corpus(&source, size_bytes)?;
    // Every node holds its quarter of the corpus (and of the volume) twice
    // over, for the space manager's reserve.
    let cluster = mem_cluster(&dir, size_bytes + volume_bytes, 2)?;
    let members: Vec<u16> = cluster.cluster.nodes.iter().map(|n| n.id).collect();
    let setup = Setup {
        _scratch: scratch,
        cluster,
        source,
        size_bytes,
        members,
    };
    let entry = setup.entry()?;
    let runtime = runtime()?;
    runtime.block_on(async {
        let client = Client::connect(&entry.to_string())
            .await?
            .with_members(setup.members.clone());
        let objects = client.objects().await?;
        let bucket = BucketName::new(BUCKET)?;
        objects
            .create_bucket(&bucket, Chunking::fixed(1 << 20)?)
            .await?;
        let file = std::fs::File::open(&setup.source)?;
        objects
            .put(
                &bucket,
                &ObjectKey::new(KEY)?,
                file_source(file),
                Condition::Always,
            )
            .await?;
        if volume_bytes > 0 {
            client
                .volumes()
                .await?
                .create("counters", volume_bytes, None)
                .await?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(setup)
}

/// A 4-node managed cluster on the `mem` backend in `dir/cluster`, in
/// 64 KiB pages, each node with room for `copies` times its quarter of
/// `data_bytes` (plus 64 MiB).
pub(crate) fn mem_cluster(
    dir: &std::path::Path,
    data_bytes: u64,
    copies: u64,
) -> Result<LocalCluster> {
    let nodes: u16 = 4;
    let page_size_bytes = 64 * 1024u32;
    let per_node = data_bytes.div_ceil(u64::from(nodes)) * copies + (64 << 20);
    let block_bytes = 64 * u64::from(page_size_bytes);
    let geometry = Geometry {
        buses: 4,
        chips_per_bus: 4,
        blocks_per_chip: u32::try_from(per_node.div_ceil(16 * block_bytes).max(16))
            .context("the data is too large for the benchmark's cluster")?,
        pages_per_block: 64,
        page_size_bytes,
        oob_size_bytes: 64,
    };
    geometry.validate()?;
    let spec = LocalClusterSpec {
        nodes,
        dir: dir.join("cluster"),
        backend: BackendKind::Mem,
        preset: None,
        geometry: Some(geometry),
        capacity_bytes: None,
        direct_io: false,
        topology: Topology::default(),
        stop_with_this_process: true,
        managed: true,
        ecc: quarry_device::EccMode::Crc,
        kv_toml: None,
        device_toml: None,
    };
    LocalCluster::start(&spec, &quarry_exe()?)
}

/// Each member's id and address, for a client that may dial them.
pub(crate) fn member_addrs(cluster: &LocalCluster) -> Vec<(u16, String)> {
    cluster
        .cluster
        .nodes
        .iter()
        .map(|n| (n.id, n.addr.clone()))
        .collect()
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Text of words separated by spaces and newlines; "would" is about one
/// word in 40, the fgrep pattern one in 3000.
fn write_corpus(path: &std::path::Path, size_bytes: u64) -> Result<()> {
    const WORDS: [&str; 16] = [
        "storage", "would", "the", "of", "near", "data", "kernel", "flash", "node", "page", "a",
        "scan", "word", "count", "and", "to",
    ];
    let file = std::fs::File::create(path)?;
    let mut out = std::io::BufWriter::with_capacity(4 << 20, file);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut written = 0u64;
    let mut line = 0u32;
    while written < size_bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let word: &[u8] = if x.is_multiple_of(3000) {
            &PATTERN
        } else {
            // "would" one in 40: index 1 of 16 with a 2.5 in 40 rate.
            let i = if x % 40 == 1 {
                1
            } else {
                ((x >> 20) % 16) as usize
            };
            let i = if i == 1 && x % 40 != 1 { 0 } else { i };
            WORDS[i].as_bytes()
        };
        out.write_all(word)?;
        line += 1;
        let sep: &[u8] = if line.is_multiple_of(12) { b"\n" } else { b" " };
        out.write_all(sep)?;
        written += (word.len() + 1) as u64;
    }
    out.flush()?;
    Ok(())
}

/// Serves the corpus over plain TCP from `ip` (the host-software peer's
/// file server: what a user without Quarry would fetch from).
fn serve_file(path: PathBuf, ip: std::net::IpAddr) -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind((ip, 0))?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let path = path.clone();
            std::thread::spawn(move || {
                if let Ok(mut file) = std::fs::File::open(&path) {
                    // std::io::copy uses sendfile/splice here: no user copy.
                    let _ = std::io::copy(&mut file, &mut stream);
                }
            });
        }
    });
    Ok(addr)
}

/// Host software: fetch the file over TCP and count the word as a
/// demanding host program would, with memmem over each received block and
/// a check of the bytes on either side of a hit (the kernel finds its words
/// the same way); only the word cut by a block's end is copied, into a
/// carry of at most the word's length and one byte.
fn host_wordcount(server: SocketAddr) -> Result<(f64, u64, u64)> {
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(server)?;
    let mut buf = vec![0u8; 1 << 20];
    let word = WORD.as_bytes();
    let finder = memchr::memmem::Finder::new(word);
    // The bytes of the word the last block ended in; longer than the word
    // means "not the word", so it is kept to the word's length plus one.
    let mut carry: Vec<u8> = Vec::with_capacity(word.len() + 1);
    let (mut count, mut bytes) = (0u64, 0u64);
    let keep = |carry: &mut Vec<u8>, more: &[u8]| {
        let room = (word.len() + 1).saturating_sub(carry.len());
        carry.extend_from_slice(&more[..more.len().min(room)]);
    };
    loop {
        let n = stream.read(&mut buf)?;
        bytes += n as u64;
        if n == 0 {
            count += u64::from(carry == word);
            break;
        }
        let block = &buf[..n];
        let Some(head_end) = block.iter().position(u8::is_ascii_whitespace) else {
            keep(&mut carry, block);
            continue;
        };
        keep(&mut carry, &block[..head_end]);
        count += u64::from(carry == word);
        carry.clear();
        // From the first separator through the last: every word in it is
        // whole, with a separator on each side.
        let tail_start = block
            .iter()
            .rposition(u8::is_ascii_whitespace)
            .map_or(n, |i| i + 1);
        let body = &block[head_end..tail_start];
        count += finder
            .find_iter(body)
            .filter(|&at| {
                at > 0
                    && body[at - 1].is_ascii_whitespace()
                    && body
                        .get(at + word.len())
                        .is_some_and(u8::is_ascii_whitespace)
            })
            .count() as u64;
        keep(&mut carry, &block[tail_start..]);
    }
    Ok((started.elapsed().as_secs_f64(), count, bytes))
}

/// Minerva's host baseline: the client reads the object in `threads`
/// ranges at once and scans each with memmem.
async fn threaded_fgrep(client: &Client, size: u64, threads: u64) -> Result<(f64, u64, u64)> {
    let objects = Arc::new(client.objects().await?);
    let started = Instant::now();
    let bucket = BucketName::new(BUCKET)?;
    let key = ObjectKey::new(KEY)?;
    let mut tasks = Vec::new();
    for t in 0..threads {
        let (objects, bucket, key) = (objects.clone(), bucket.clone(), key.clone());
        let (start, end) = (size * t / threads, size * (t + 1) / threads);
        tasks.push(tokio::spawn(async move {
            let finder = memchr::memmem::Finder::new(&PATTERN);
            let (mut count, mut fetched) = (0u64, 0u64);
            let mut at = start;
            while at < end {
                // 7 bytes more, so a match starting before `end` is seen.
                let len = (8u64 << 20).min(end - at) + 7;
                let (_, piece) = objects.get_range(&bucket, &key, at, len).await?;
                fetched += piece.len() as u64;
                let limit = (end - at).min(8 << 20) as usize;
                count += finder.find_iter(&piece).filter(|&i| i < limit).count() as u64;
                at += 8 << 20;
            }
            Ok::<_, anyhow::Error>((count, fetched))
        }));
    }
    let (mut count, mut fetched) = (0, 0);
    for t in tasks {
        let (c, f) = t.await??;
        count += c;
        fetched += f;
    }
    Ok((started.elapsed().as_secs_f64(), count, fetched))
}

/// Bulk read by one client: the whole object fetched with `get` (chunks
/// read ahead from the four nodes through the entry node) into a sink that
/// only counts; returns (seconds, bytes).
async fn bulk_get(client: &Client) -> Result<(f64, u64)> {
    let objects = client.objects().await?;
    let (bucket, key) = (BucketName::new(BUCKET)?, ObjectKey::new(KEY)?);
    let mut sink = CountingSink::default();
    let started = Instant::now();
    objects
        .get_to(&bucket, &key, 0, u64::MAX, &mut sink)
        .await?;
    Ok((started.elapsed().as_secs_f64(), sink.bytes))
}

/// The floor for a bulk read on this machine: one plain TCP stream between
/// two processes over loopback, the file sent by `cat` in another process
/// (bash's /dev/tcp) and read here in 1 MiB reads; returns (seconds, bytes).
fn plain_tcp_stream(path: &std::path::Path) -> Result<(f64, u64)> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let port = listener.local_addr()?.port();
    // Hot in the page cache first, as the object is in the nodes' memory.
    std::io::copy(&mut std::fs::File::open(path)?, &mut std::io::sink())?;
    let mut sender = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("cat \"$0\" > /dev/tcp/127.0.0.1/{port}"))
        .arg(path)
        .spawn()
        .context("cannot start bash to send the plain TCP stream")?;
    // A sender that never connects (a bash without /dev/tcp) must not hang
    // the benchmark: wait at most 10 s for it.
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Some(status) = sender.try_wait()? {
                    bail!("the plain TCP sender (bash, cat) ended without connecting: {status}");
                }
                if Instant::now() > deadline {
                    let _ = sender.kill();
                    bail!("the plain TCP sender (bash, cat) did not connect within 10 s");
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) => return Err(e.into()),
        }
    };
    stream.set_nonblocking(false)?;
    let started = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    let status = sender.wait()?;
    if !status.success() {
        bail!("the plain TCP sender (bash, cat) failed: {status}");
    }
    Ok((secs, bytes))
}

/// The kernel near the data.
async fn near(client: &Client, spec: KernelSpec) -> Result<(f64, u64, u64, u64)> {
    let started = Instant::now();
    let (result, sent) = client
        .compute()
        .run(
            Job::Scan(spec),
            vec![Target::Object {
                bucket: BUCKET.into(),
                key: KEY.into(),
            }],
            Limits::default(),
        )
        .await?;
    let secs = started.elapsed().as_secs_f64();
    Ok((secs, answer(&result.outcome)?, result.bytes_scanned, sent))
}

/// The same kernel at the client, on the object's bytes fetched through
/// Quarry (off the datapath).
async fn at_client(client: &Client, spec: KernelSpec) -> Result<(f64, u64, u64)> {
    let objects = client.objects().await?;
    let started = Instant::now();
    let bucket = BucketName::new(BUCKET)?;
    let m = objects.head(&bucket, &ObjectKey::new(KEY)?).await?;
    let kernel = quarry_kernels::compile(&spec)?;
    // The kernel folds on a blocking thread while the next pieces arrive.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
    let folder = tokio::task::spawn_blocking(move || {
        let mut part = kernel.empty(0);
        let mut fetched = 0u64;
        while let Some(piece) = rx.blocking_recv() {
            fetched += piece.len() as u64;
            part = kernel.fold(part, &piece)?;
        }
        Ok::<_, anyhow::Error>((kernel.finish(part)?, fetched))
    });
    let mut pieces = std::pin::pin!(objects.stream_manifest(&m, 0, m.size())?);
    while let Some(piece) = pieces.next().await {
        if tx.send(piece?).await.is_err() {
            break;
        }
    }
    drop(tx);
    let (output, fetched) = folder.await??;
    let secs = started.elapsed().as_secs_f64();
    let n = match output {
        Output::Count(n) => n,
        Output::Wc(w) => w.word_count.unwrap_or(0),
        other => bail!("unexpected output {other:?}"),
    };
    Ok((secs, n, fetched))
}

fn answer(outcome: &Outcome) -> Result<u64> {
    match outcome {
        Outcome::Scan(t) => match t.first().map(|t| &t.output) {
            Some(Output::Count(n)) => Ok(*n),
            Some(Output::Wc(w)) => Ok(w.word_count.unwrap_or(0)),
            other => bail!("unexpected output {other:?}"),
        },
        other => bail!("unexpected outcome {other:?}"),
    }
}

fn wc_spec() -> KernelSpec {
    KernelSpec::Wc(WcSpec {
        words: false,
        word: Some(WORD.as_bytes().to_vec()),
        top: None,
        locale: quarry_client::WcLocale::C,
    })
}

/// Runs `f` with the client on `link`: here for loopback, else in the
/// namespace with the link limited.
pub(crate) fn on_link<T: Send>(
    link: &Link,
    net: Option<&ClientNet>,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    match (&link.rate, net) {
        (Some(_), Some(net)) => net.run_in(f),
        _ => f(),
    }
}

/// The client's namespace, when any link is limited.
pub(crate) fn client_net(links: &[Link]) -> Result<Option<ClientNet>> {
    if links.iter().all(|l| l.rate.is_none()) {
        return Ok(None);
    }
    ClientNet::create()
        .context("the limited links need a network namespace (root, iproute2, tc)")
        .map(Some)
}

/// The client's view of the cluster on one link.
struct Way {
    entry: SocketAddr,
    file_server: SocketAddr,
    /// The members' own addresses when the client may dial them (loopback:
    /// object reads then skip the entry node, as any client with a cluster
    /// file does); empty behind a limited link, whose only way in is the
    /// relay to the entry node.
    members_direct: Vec<(u16, String)>,
}

fn ways(setup: &Setup, net: &mut Option<ClientNet>, link: &Link) -> Result<Way> {
    match (&link.rate, net.as_mut()) {
        (None, _) => Ok(Way {
            entry: setup.entry()?,
            file_server: serve_file(setup.source.clone(), "127.0.0.1".parse()?)?,
            members_direct: member_addrs(&setup.cluster),
        }),
        (Some(rate), Some(n)) => {
            n.limit(Some(rate))?;
            let entry = n.relay(setup.entry()?)?;
            Ok(Way {
                entry,
                file_server: serve_file(setup.source.clone(), std::net::IpAddr::V4(n.root_ip()))?,
                members_direct: Vec::new(),
            })
        }
        (Some(_), None) => bail!("no client namespace"),
    }
}

fn client_runtime_and_client(
    way: &Way,
    members: &[u16],
) -> Result<(tokio::runtime::Runtime, Client)> {
    let rt = runtime()?;
    let client = rt.block_on(Client::connect(&way.entry.to_string()))?;
    let client = client.with_members(members.iter().copied());
    if way.members_direct.is_empty() {
        return Ok((rt, client));
    }
    Ok((
        rt,
        client.with_member_addrs(way.members_direct.iter().cloned()),
    ))
}

/// Medians over a link's rounds of each way of counting the word.
struct WordcountRun {
    near_s: f64,
    off_s: f64,
    host_s: f64,
    /// (seconds, what it printed) of the GNU peers, which count other
    /// things (lines with the word; all words) at the speed a user gets.
    gnu_grep: (f64, u64),
    gnu_wc: (f64, u64),
    /// The near-data count, bytes scanned and sent, of the last round.
    near_info: (u64, u64, u64),
    /// (near data, at the client, host memmem) counts of every round.
    answers: Vec<(u64, u64, u64)>,
}

fn measure_wordcount(way: &Way, members: &[u16], rounds: u32) -> Result<WordcountRun> {
    let (rt, client) = client_runtime_and_client(way, members)?;
    let mut secs: [Vec<f64>; 5] = Default::default();
    let mut near_info = (0, 0, 0);
    let mut answers = Vec::new();
    let (mut grep_lines, mut wc_words) = (0, 0);
    let grep = format!("grep -c -w -F {WORD}");
    for _ in 0..rounds.max(1) {
        let (s, n, scanned, sent) = rt.block_on(near(&client, wc_spec()))?;
        secs[0].push(s);
        near_info = (n, scanned, sent);
        let (s, n2, _) = rt.block_on(at_client(&client, wc_spec()))?;
        secs[1].push(s);
        let (s, n3, _) = host_wordcount(way.file_server)?;
        secs[2].push(s);
        answers.push((n, n2, n3));
        let (s, lines) = gnu_over_tcp(way.file_server, &grep)?;
        secs[3].push(s);
        grep_lines = lines;
        let (s, words) = gnu_over_tcp(way.file_server, "wc -w")?;
        secs[4].push(s);
        wc_words = words;
    }
    let [near_s, off_s, host_s, grep_s, wc_s] = secs.map(|mut v| median(&mut v));
    Ok(WordcountRun {
        near_s,
        off_s,
        host_s,
        gnu_grep: (grep_s, grep_lines),
        gnu_wc: (wc_s, wc_words),
        near_info,
        answers,
    })
}

/// Runs a GNU tool on the file served at `server`, read over the same
/// link as the host program's: bash opens the connection (`/dev/tcp`) and
/// hands it to the tool as its standard input. The tool runs in the C
/// locale, its fastest (what a user who wants speed sets). Returns the
/// wall seconds and the first number the tool printed.
fn gnu_over_tcp(server: SocketAddr, tool: &str) -> Result<(f64, u64)> {
    let script = format!("exec {tool} < /dev/tcp/{}/{}", server.ip(), server.port());
    let started = Instant::now();
    let output = std::process::Command::new("bash")
        .args(["-c", &script])
        .env("LC_ALL", "C")
        .output()
        .with_context(|| format!("cannot run `{tool}` through bash"))?;
    let secs = started.elapsed().as_secs_f64();
    // grep exits 1 when no line matched.
    if !matches!(output.status.code(), Some(0) | Some(1)) {
        bail!(
            "`{tool}` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let count = text
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("`{tool}` printed no count: {text:?}"))?;
    Ok((secs, count))
}

/// `quarry bench wordcount`.
pub fn wordcount(args: &BenchComputeArgs) -> Result<()> {
    let links = links(&args.links)?;
    let setup = setup(args, "wordcount", 0)?;
    let size = setup.size_bytes;
    if !args.common.json {
        eprintln!(
            "bench wordcount: {} of text on a 4-node managed cluster (mem backend), counting {WORD:?}; links: {}",
            human_bytes(size),
            links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let mut net = client_net(&links)?;
    let mut rows = Vec::new();
    for link in &links {
        let way = ways(&setup, &mut net, link)?;
        let members = setup.members.clone();
        let m = on_link(link, net.as_ref(), || {
            measure_wordcount(&way, &members, args.rounds)
        })?;
        if m.answers.iter().any(|&(a, b, c)| a != b || b != c) {
            bail!("the three ways counted differently: {:?}", m.answers);
        }
        let mb = |s: f64| size as f64 / s / 1e6;
        // The baseline is the fastest host program over the same link.
        let host_rate = [m.host_s, m.gnu_grep.0, m.gnu_wc.0]
            .into_iter()
            .map(mb)
            .fold(0.0, f64::max);
        let (n, scanned, sent) = m.near_info;
        for (mode, secs, scanned_b, to_client, answer) in [
            (
                "in the datapath (kernel at the nodes)",
                m.near_s,
                scanned,
                sent,
                n,
            ),
            (
                "off the datapath (kernel at the client)",
                m.off_s,
                size,
                size,
                n,
            ),
            (
                "host software (plain TCP + memmem)",
                m.host_s,
                size,
                size,
                n,
            ),
            (
                "GNU grep -c -w -F over the same link (lines)",
                m.gnu_grep.0,
                size,
                size,
                m.gnu_grep.1,
            ),
            (
                "GNU wc -w over the same link (all words)",
                m.gnu_wc.0,
                size,
                size,
                m.gnu_wc.1,
            ),
        ] {
            rows.push(Row {
                link: link.name.clone(),
                mode,
                rate: mb(secs),
                unit: "MB/s",
                bytes_scanned: scanned_b,
                bytes_to_client: to_client,
                scanned_per_sent: scanned_b as f64 / to_client.max(1) as f64,
                speedup: mb(secs) / host_rate,
                answer,
            });
        }
    }
    report(args, "word count (BlueDBM Fig. 11)", &rows, &links)
}

/// `grep ''` near the data: every line streams to the client, which
/// counts the bytes it would print; returns the time, the lines and those
/// bytes.
async fn grep_every_line(client: &Client) -> Result<(f64, u64, u64)> {
    let compute = client.compute();
    let started = Instant::now();
    let limits = Limits::default();
    let id = compute
        .submit(
            Job::Scan(KernelSpec::Grep(GrepSpec::new("", GrepSyntax::Basic))),
            vec![Target::Object {
                bucket: BUCKET.into(),
                key: KEY.into(),
            }],
            limits,
        )
        .await?;
    let (mut lines, mut printed) = (0u64, 0u64);
    // What `quarry grep ''` would print of them: a block's text as it is.
    let mut count = |runs: &[quarry_client::LineRun]| {
        for run in runs {
            match run {
                quarry_client::LineRun::Block(b) => {
                    lines += b.lines();
                    printed += b.text().len() as u64;
                }
                quarry_client::LineRun::One(l) => {
                    lines += 1;
                    printed += l.text.len() as u64 + 1;
                }
            }
        }
    };
    let timeout = std::time::Duration::from_millis(limits.time_ms);
    compute
        .stream(id, timeout, |piece| {
            match &piece {
                OutputPiece::Lines { lines, .. } => count(lines),
                OutputPiece::Target(t) => {
                    if let Output::Grep(g) = &t.output {
                        count(&g.lines);
                    }
                }
                _ => {}
            }
            Ok(())
        })
        .await?;
    Ok((started.elapsed().as_secs_f64(), lines, printed))
}

/// The peer of `grep ''`: a get of the same object, streamed to the
/// client, its lines counted; returns the time, the lines and the bytes.
async fn get_every_line(client: &Client) -> Result<(f64, u64, u64)> {
    let objects = client.objects().await?;
    let started = Instant::now();
    let m = objects
        .head(&BucketName::new(BUCKET)?, &ObjectKey::new(KEY)?)
        .await?;
    let (mut lines, mut bytes) = (0u64, 0u64);
    let mut pieces = std::pin::pin!(objects.stream_manifest(&m, 0, m.size())?);
    while let Some(piece) = pieces.next().await {
        let piece = piece?;
        lines += memchr::memchr_iter(b'\n', &piece).count() as u64;
        bytes += piece.len() as u64;
    }
    Ok((started.elapsed().as_secs_f64(), lines, bytes))
}

/// `grep ''` near the data, then a get of the same object; returns their
/// times and the lines grep printed, its bytes and the get's newlines.
async fn every_line_both_ways(client: &Client) -> Result<(f64, f64, (u64, u64, u64))> {
    let (grep_s, lines, printed) = grep_every_line(client).await?;
    let (get_s, newlines, got) = get_every_line(client).await?;
    // grep '' prints every byte (and a newline after a last line without
    // one).
    if printed < got || printed > got + 1 {
        bail!(
            "grep '' printed {lines} lines ({printed} bytes), get read {newlines} newlines \
             ({got} bytes)"
        );
    }
    Ok((grep_s, get_s, (lines, printed, newlines)))
}

/// The rows of `grep ''` and its peer, a get: nothing filtered out, so
/// their ratio is what pushdown costs over a plain read.
fn every_line_rows(
    link: &str,
    size: u64,
    (grep_s, get_s): (f64, f64),
    (lines, printed, newlines): (u64, u64, u64),
) -> Vec<Row> {
    let mb = |s: f64| size as f64 / s / 1e6;
    [
        (
            "grep '' near the data, every line streamed to the client",
            grep_s,
            printed,
            lines,
        ),
        (
            "get of the same object (the peer of grep ''), newlines counted",
            get_s,
            size,
            newlines,
        ),
    ]
    .into_iter()
    .map(|(mode, secs, to_client, answer)| Row {
        link: link.to_string(),
        mode,
        rate: mb(secs),
        unit: "MB/s",
        bytes_scanned: size,
        bytes_to_client: to_client,
        scanned_per_sent: size as f64 / to_client.max(1) as f64,
        speedup: mb(secs) / mb(get_s),
        answer,
    })
    .collect()
}

/// `quarry bench minerva`.
pub fn minerva(args: &BenchComputeArgs) -> Result<()> {
    let links = links(&args.links)?;
    let volume_bytes = 64u64 << 20;
    let setup = setup(args, "minerva", volume_bytes)?;
    let size = setup.size_bytes;
    if !args.common.json {
        eprintln!(
            "bench minerva: fgrep-8 over {} and read-modify-write on a {} volume, 4-node managed cluster (mem backend); links: {}",
            human_bytes(size),
            human_bytes(volume_bytes),
            links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let mut net = client_net(&links)?;
    let fgrep = KernelSpec::Fgrep8 { pattern: PATTERN };
    let batch_ops: usize = if args.common.quick { 20_000 } else { 200_000 };
    let trip_ops: usize = if args.common.quick { 300 } else { 2_000 };
    let mut rows = Vec::new();
    for link in &links {
        let way = ways(&setup, &mut net, link)?;
        let members = setup.members.clone();
        let fgrep = fgrep.clone();
        let measured = on_link(link, net.as_ref(), || {
            let (rt, client) = client_runtime_and_client(&way, &members)?;
            let (mut near_s, mut host_s, mut batch_s, mut trip_s) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let (mut grep_s, mut get_s) = (Vec::new(), Vec::new());
            let mut info = (0, 0, 0);
            let mut every_line = (0, 0, 0);
            for _ in 0..args.rounds.max(1) {
                let (s, n, scanned, sent) = rt.block_on(near(&client, fgrep.clone()))?;
                near_s.push(s);
                info = (n, scanned, sent);
                let (s, n2, _) = rt.block_on(threaded_fgrep(&client, size, 4))?;
                host_s.push(s);
                if n != n2 {
                    bail!("fgrep-8 near the data counted {n}, the client {n2}");
                }
                let (bs, ts) = rt.block_on(rmw(&client, volume_bytes, batch_ops, trip_ops))?;
                batch_s.push(bs);
                trip_s.push(ts);
                let (grep, get, counts) = rt.block_on(every_line_both_ways(&client))?;
                grep_s.push(grep);
                get_s.push(get);
                every_line = counts;
            }
            Ok((
                median(&mut near_s),
                median(&mut host_s),
                median(&mut batch_s),
                median(&mut trip_s),
                info,
                (median(&mut grep_s), median(&mut get_s), every_line),
            ))
        })?;
        let (near_s, host_s, batch_s, trip_s, (n, scanned, sent), every_line) = measured;
        let (grep_s, get_s, every_line) = every_line;
        if link.rate.is_none() {
            bulk_rows(&setup, &way, &setup.members, args.rounds, &mut rows)?;
        }
        let mb = |s: f64| size as f64 / s / 1e6;
        for (mode, secs, scanned_b, to_client) in [
            ("fgrep-8 near the data", near_s, scanned, sent),
            (
                "fgrep-8 by the client (4 threads of range reads + memmem)",
                host_s,
                size,
                size,
            ),
        ] {
            rows.push(Row {
                link: link.name.clone(),
                mode,
                rate: mb(secs),
                unit: "MB/s",
                bytes_scanned: scanned_b,
                bytes_to_client: to_client,
                scanned_per_sent: scanned_b as f64 / to_client.max(1) as f64,
                speedup: mb(secs) / mb(host_s),
                answer: n,
            });
        }
        rows.extend(every_line_rows(
            &link.name,
            size,
            (grep_s, get_s),
            every_line,
        ));
        rows.extend(rmw_rows(
            &link.name,
            (batch_ops, batch_s),
            (trip_ops, trip_s),
        ));
    }
    report(args, "Minerva fgrep-8 and read-modify-write", &rows, &links)
}

/// Bulk bytes to one client on loopback: `get` of the whole object from
/// the four `mem` nodes, next to one plain TCP stream between two
/// processes, alternated, medians of `rounds`.
fn bulk_rows(
    setup: &Setup,
    way: &Way,
    members: &[u16],
    rounds: u32,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let (rt, client) = client_runtime_and_client(way, members)?;
    // The corpus ends on a whole line, a few bytes past the size asked for.
    let object_bytes = std::fs::metadata(&setup.source)?.len();
    let (mut get_s, mut tcp_s) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        let (s, got) = rt.block_on(bulk_get(&client))?;
        if got != object_bytes {
            bail!("get returned {got} bytes of {object_bytes}");
        }
        get_s.push(s);
        let (s, sent) = plain_tcp_stream(&setup.source)?;
        if sent != object_bytes {
            bail!("the plain TCP stream carried {sent} bytes of {object_bytes}");
        }
        tcp_s.push(s);
    }
    let (get_s, tcp_s) = (median(&mut get_s), median(&mut tcp_s));
    let mb = |s: f64| object_bytes as f64 / s / 1e6;
    for (mode, secs) in [
        (
            "bulk read by the client (get of the object, 4 mem nodes)",
            get_s,
        ),
        (
            "one plain TCP stream between two processes (the floor)",
            tcp_s,
        ),
    ] {
        rows.push(Row {
            link: "loopback".into(),
            mode,
            rate: mb(secs),
            unit: "MB/s",
            bytes_scanned: object_bytes,
            bytes_to_client: object_bytes,
            scanned_per_sent: 1.0,
            speedup: mb(secs) / mb(tcp_s),
            answer: object_bytes,
        });
    }
    Ok(())
}

/// The two read-modify-write rows of one link: `(ops, seconds)` of the
/// batched command and of the client's round trips.
fn rmw_rows(link: &str, batch: (usize, f64), trip: (usize, f64)) -> Vec<Row> {
    let ((batch_ops, batch_s), (trip_ops, trip_s)) = (batch, trip);
    let mut rows = Vec::with_capacity(2);
    let batch_rate = batch_ops as f64 / batch_s;
    let trip_rate = trip_ops as f64 / trip_s;
    // What crosses the client's link per operation: in a batch, the op
    // (offset and delta) and its new value; in a round trip, the
    // counter read and its whole page written back (a volume is written
    // in pages, so the client's write of 8 bytes reads and writes one).
    let page = 64 * 1024u64;
    let rmw_rows = [
        (
            "read-modify-write, one batched command",
            batch_rate,
            batch_ops,
            24,
        ),
        (
            "read-modify-write, client round trips (read + write)",
            trip_rate,
            trip_ops,
            8 + 2 * page,
        ),
    ];
    for (mode, rate, ops, link_bytes) in rmw_rows {
        rows.push(Row {
            link: link.to_string(),
            mode,
            rate,
            unit: "ops/s",
            bytes_scanned: ops as u64 * 8,
            bytes_to_client: ops as u64 * link_bytes,
            scanned_per_sent: 8.0 / link_bytes as f64,
            speedup: rate / trip_rate,
            answer: ops as u64,
        });
    }
    rows
}

/// One batched command of `batch_ops` adds, then `trip_ops` adds done by
/// the client as read and write round trips; returns both times.
async fn rmw(
    client: &Client,
    volume_bytes: u64,
    batch_ops: usize,
    trip_ops: usize,
) -> Result<(f64, f64)> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x1234_5678_9abc_def1);
    let mut offset = move || rng.gen_range(0..volume_bytes / 8) * 8;
    let ops: Vec<RmwOp> = (0..batch_ops)
        .map(|_| RmwOp {
            offset_bytes: offset(),
            delta: 1,
        })
        .collect();
    let started = Instant::now();
    let (result, _) = client
        .compute()
        .run(
            Job::Rmw(RmwBatch {
                volume: "counters".into(),
                ops,
            }),
            Vec::new(),
            Limits::default(),
        )
        .await?;
    let batch = started.elapsed().as_secs_f64();
    match result.outcome {
        Outcome::Rmw { values } if values.len() == batch_ops => {}
        other => bail!("the batch answered {other:?}"),
    }
    let volume = client.volumes().await?.open("counters").await?;
    let started = Instant::now();
    for _ in 0..trip_ops {
        let at = offset();
        let bytes = volume.read_range(at, 8).await?;
        let mut v = [0u8; 8];
        v.copy_from_slice(&bytes[..8]);
        let new = u64::from_le_bytes(v).wrapping_add(1);
        volume.write_range(at, &new.to_le_bytes()).await?;
    }
    Ok((batch, started.elapsed().as_secs_f64()))
}

fn report(args: &BenchComputeArgs, title: &str, rows: &[Row], links: &[Link]) -> Result<()> {
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        table.set_header([
            "client link",
            "how",
            "rate",
            "vs peer",
            "bytes scanned",
            "bytes to client",
            "scanned/sent",
        ]);
        for r in rows {
            table.add_row([
                r.link.clone(),
                r.mode.to_string(),
                format!("{:.1} {}", r.rate, r.unit),
                format!("{:.2}x", r.speedup),
                human_bytes(r.bytes_scanned),
                human_bytes(r.bytes_to_client),
                if r.scanned_per_sent >= 10.0 {
                    format!("{:.0}", r.scanned_per_sent)
                } else {
                    format!("{:.4}", r.scanned_per_sent)
                },
            ]);
        }
        println!("{title}:\n{table}");
    }
    if let Some(path) = &args.plot {
        let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
        let mut modes: Vec<&'static str> = Vec::new();
        for r in rows.iter().filter(|r| r.unit == "MB/s") {
            if !modes.contains(&r.mode) {
                modes.push(r.mode);
            }
        }
        let series = modes
            .iter()
            .enumerate()
            .map(|(i, mode)| Series {
                name: mode.to_string(),
                color: colors[i % colors.len()],
                points: links
                    .iter()
                    .filter_map(|l| {
                        rows.iter()
                            .find(|r| r.mode == *mode && r.link == l.name)
                            .map(|r| (l.x, r.rate))
                    })
                    .collect(),
            })
            .collect();
        let plot = LinePlot {
            title: title.to_string(),
            x_label: "client link".into(),
            y_label: "MB/s of data processed".into(),
            log2_x: true,
            x_tick: |x| {
                if x >= LOOPBACK_X {
                    "loopback".into()
                } else {
                    format!("{x} Gb/s")
                }
            },
            series,
            hlines: Vec::new(),
        };
        std::fs::write(path, plot.to_svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
