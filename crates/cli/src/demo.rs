//! `quarry demo`: starts the embedded cluster when none runs, then, on
//! managed nodes, stores objects (showing where their chunks went and what
//! deduplication saved), or, on raw nodes, writes and reads pages on every
//! node through one entry node, and reports the timings.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_client::{page_of, Client, ClusterFile, Completion, Request};
use quarry_device::{BlockAddr, Geometry, PageAddr};
use quarry_proto::{GlobalBlockAddr, GlobalPageAddr, NodeId};

use crate::args::DemoArgs;
use quarry_bench::LatencyStats;
use quarry_jobs::human_bytes;
use quarry_local::quarry_exe;
use quarry_local::{LocalCluster, LocalClusterSpec};

/// Requests the demo keeps in flight.
const DEMO_QUEUE_DEPTH: usize = 64;
/// Reads per node for the latency sample.
const LATENCY_SAMPLES: usize = 200;

/// One node's part of the demo.
struct NodePlan {
    id: NodeId,
    geometry: Geometry,
    blocks: Vec<BlockAddr>,
    pages: Vec<GlobalPageAddr>,
}

/// Runs the demo.
pub fn demo(args: &DemoArgs) -> Result<()> {
    let path = ClusterFile::locate(args.cluster.cluster.as_deref());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = match ClusterFile::load(&path)
        .ok()
        .map(|f| runtime.block_on(Client::connect_cluster(&f)))
    {
        Some(Ok(client)) => client,
        _ if args.cluster.cluster.is_some() => {
            bail!(
                "no node of the cluster in {} answers; start it with `quarry up`",
                path.display()
            )
        }
        _ => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new(".quarry"));
            println!(
                "no cluster is running; starting the embedded 4-node cluster in {}",
                dir.display()
            );
            let started = Instant::now();
            let cluster =
                LocalCluster::start(&LocalClusterSpec::default_in(dir), &quarry_exe()?)?.detach();
            println!(
                "  {} nodes up in {:.2} s (stop them with `quarry down --dir {}`)",
                cluster.nodes.len(),
                started.elapsed().as_secs_f64(),
                dir.display()
            );
            runtime.block_on(Client::connect_cluster(&cluster))?
        }
    };
    runtime.block_on(run(client, args.pages_per_node))
}

async fn run(client: Client, pages_per_node: u32) -> Result<()> {
    let objects = client.objects().await?;
    match objects.buckets().await {
        Ok(_) => return run_objects(&client, &objects).await,
        // Raw nodes say so by name; they get the page demo.
        Err(e) if e.to_string().contains("storage mode \"raw\"") => {}
        Err(e) => return Err(e.into()),
    }
    run_pages(client, pages_per_node).await
}

/// Objects of a few MiB of text, a copy with one region changed, read back
/// whole and by range, with the space each took.
async fn run_objects(client: &Client, objects: &quarry_client::Objects) -> Result<()> {
    use quarry_client::{BucketName, Chunking, Condition, ObjectKey, StoreError};
    let members = client.cluster().await?;
    println!(
        "entry node {}; cluster of {} managed nodes (space manager, object store)",
        client.entry_addr(),
        members.len()
    );
    let bucket = BucketName::new("demo")?;
    match objects
        .create_bucket(&bucket, Chunking::DEFAULT_FASTCDC)
        .await
    {
        Ok(_) => println!("made bucket demo (FastCDC chunks, 16 / 64 / 256 KiB)"),
        Err(StoreError::BucketExists(_)) => println!("bucket demo exists; storing new versions"),
        Err(e) => return Err(e.into()),
    }
    let text = demo_text(16 << 20);
    let key = ObjectKey::new("logs/day1.txt")?;
    let started = Instant::now();
    let first = objects
        .put(&bucket, &key, &text[..], Condition::Always)
        .await?;
    let put_time = started.elapsed();
    println!(
        "put demo/{key}: {} in {} chunks, version {}, {:.1} ms ({}/s)",
        human_bytes(first.size()),
        first.chunks().len(),
        first.version(),
        ms(put_time),
        human_bytes((first.size() as f64 / put_time.as_secs_f64()) as u64)
    );
    let before = objects.usage().await?;
    // A copy with 4 KiB inserted in the middle: content-defined chunks
    // re-align right after the edit, so only the chunks around it are new.
    let mut edited = text.clone();
    let middle = edited.len() / 2;
    edited.splice(middle..middle, b"-- an inserted line --\n".repeat(170));
    let copy_key = ObjectKey::new("logs/day1-edited.txt")?;
    let copy = objects
        .put(&bucket, &copy_key, &edited[..], Condition::Always)
        .await?;
    let after = objects.usage().await?;
    println!(
        "put demo/{copy_key}: {} with 4 KiB inserted; new chunk space {} ({} of {} chunks shared)",
        human_bytes(copy.size()),
        human_bytes(after.stored_bytes.saturating_sub(before.stored_bytes)),
        copy.chunks().len() as u64 - (after.chunks - before.chunks).min(copy.chunks().len() as u64),
        copy.chunks().len()
    );
    let started = Instant::now();
    let (_, back) = objects.get(&bucket, &key).await?;
    let get_time = started.elapsed();
    if back[..] != text[..] {
        bail!("demo/{key} read back different bytes than were put");
    }
    println!(
        "got and verified demo/{key} in {:.1} ms ({}/s)",
        ms(get_time),
        human_bytes((back.len() as f64 / get_time.as_secs_f64()) as u64)
    );
    let (_, range) = objects
        .get_range(&bucket, &copy_key, middle as u64, 23)
        .await?;
    println!(
        "bytes {middle}..{} of demo/{copy_key}: {:?}",
        middle + 23,
        String::from_utf8_lossy(&range)
    );

    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "node",
        "path from entry",
        "chunks held",
        "chunk bytes",
        "objects' manifests",
    ]);
    for (index, node) in objects.nodes().enumerate() {
        use quarry_store::StoreNode;
        let u = node.usage().await?;
        table.add_row(vec![
            node.id().to_string(),
            if index == 0 {
                "local".to_string()
            } else {
                "forwarded by the entry node".to_string()
            },
            u.chunks.to_string(),
            human_bytes(u.stored_bytes),
            u.objects.to_string(),
        ]);
    }
    println!("{table}");
    println!(
        "cluster: {} logical, {} stored, dedup {:.2}x",
        human_bytes(after.logical_bytes),
        human_bytes(after.stored_bytes),
        after.dedup_ratio()
    );
    near_data_query(client, &text, key.as_str()).await?;
    println!(
        "next: `quarry grep -c fabric 'demo/logs/*'`, `quarry wc demo/{key}`, `quarry ls demo`, \
         `quarry get demo/{key} day1.txt`, `quarry df`, `quarry status`"
    );
    Ok(())
}

/// Counts one word near the data (BlueDBM's word-count kernel runs on each
/// node over the chunks it holds; the entry node merges) and checks the
/// answer against counting the same bytes here.
async fn near_data_query(client: &Client, text: &[u8], key: &str) -> Result<()> {
    use quarry_client::{Job, KernelSpec, Limits, Outcome, Output, Target, WcSpec};
    let word = "fabric";
    let started = Instant::now();
    let (result, sent) = client
        .compute()
        .run(
            Job::Scan(KernelSpec::Wc(WcSpec {
                words: true,
                word: Some(word.as_bytes().to_vec()),
                top: None,
                locale: quarry_client::WcLocale::C,
            })),
            vec![Target::Object {
                bucket: "demo".into(),
                key: key.to_string(),
            }],
            Limits::default(),
        )
        .await?;
    let took = started.elapsed();
    let Outcome::Scan(targets) = &result.outcome else {
        bail!("the word count answered {:?}", result.outcome);
    };
    let Some(Output::Wc(wc)) = targets.first().map(|t| &t.output) else {
        bail!("the word count answered {targets:?}");
    };
    let here = text
        .split(|b| b" \t\n\r\x0b\x0c".contains(b))
        .filter(|w| *w == word.as_bytes())
        .count() as u64;
    if wc.word_count != Some(here) {
        bail!(
            "near the data {:?} counted {:?}, this process {here}",
            word,
            wc.word_count
        );
    }
    println!(
        "query near the data: {here} x {word:?} among {} words in demo/{key}, {:.1} ms; \
         the nodes scanned {}, {} came back to this client ({:.0}x less)",
        wc.words,
        ms(took),
        human_bytes(result.bytes_scanned),
        human_bytes(sent),
        result.bytes_scanned as f64 / sent.max(1) as f64
    );
    Ok(())
}

/// Log-like lines of text, `len` bytes, the same on every run.
fn demo_text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 128);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let words = [
        "read", "write", "node", "chunk", "page", "erase", "fabric", "quarry",
    ];
    let mut line = 0u64;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        line += 1;
        let w = words[(x % words.len() as u64) as usize];
        let v = words[((x >> 8) % words.len() as u64) as usize];
        out.extend_from_slice(format!("{line:08} {w} {v} {:016x}\n", x).as_bytes());
    }
    out.truncate(len);
    out
}

async fn run_pages(client: Client, pages_per_node: u32) -> Result<()> {
    let members = client.cluster().await?;
    println!(
        "entry node {}; cluster of {} nodes",
        client.entry_addr(),
        members.len()
    );
    let mut plans = Vec::new();
    for member in &members {
        let info = client
            .node_info(member.id)
            .await
            .with_context(|| format!("node {} at {}", member.id, member.addr))?;
        plans.push(plan(
            member.id,
            info.device.geometry,
            &info.device.bad_blocks,
            pages_per_node,
        )?);
    }

    // Erase first so the demo can run again and again on the same pages.
    let erase: Vec<Request> = plans
        .iter()
        .flat_map(|p| {
            p.blocks.iter().map(|b| {
                Request::EraseBlock(GlobalBlockAddr {
                    node: p.id,
                    block: *b,
                })
            })
        })
        .collect();
    let erase_count = erase.len();
    let (erase_time, _) = pipeline(&client, erase).await?;
    println!(
        "erased {erase_count} blocks on {} nodes in {:.1} ms",
        plans.len(),
        ms(erase_time)
    );

    let page_size = plans[0].geometry.page_size_bytes as usize;
    let writes: Vec<Request> = plans
        .iter()
        .flat_map(|p| {
            p.pages.iter().map(|a| Request::ProgramPage {
                addr: *a,
                data: demo_page(*a, page_size),
                oob: Bytes::new(),
            })
        })
        .collect();
    let total_pages = writes.len();
    let total_bytes = plans
        .iter()
        .map(|p| p.pages.len() as u64 * u64::from(p.geometry.page_size_bytes))
        .sum::<u64>();
    let (write_time, _) = pipeline(&client, writes).await?;
    println!(
        "wrote {total_pages} pages ({}) across all nodes in {:.1} ms: {}/s",
        human_bytes(total_bytes),
        ms(write_time),
        human_bytes((total_bytes as f64 / write_time.as_secs_f64()) as u64)
    );

    let reads: Vec<Request> = plans
        .iter()
        .flat_map(|p| p.pages.iter().map(|a| Request::ReadPage(*a)))
        .collect();
    let addrs: Vec<GlobalPageAddr> = plans.iter().flat_map(|p| p.pages.iter().copied()).collect();
    let (read_time, answers) = pipeline(&client, reads).await?;
    let mut corrected = 0u64;
    for (addr, answer) in addrs.iter().zip(answers) {
        let page = page_of(answer)?;
        let expected = demo_page(*addr, page.data.len());
        if page.data != expected {
            bail!("page {addr} read back different bytes than were written");
        }
        corrected += u64::from(page.corrected_bytes);
    }
    println!(
        "read and verified {total_pages} pages in {:.1} ms: {}/s, {corrected} bytes corrected by ECC",
        ms(read_time),
        human_bytes((total_bytes as f64 / read_time.as_secs_f64()) as u64)
    );

    print_latencies(&client, &plans).await?;
    println!(
        "next: `quarry status`, `quarry page read 1:0:0:{}:0`, `quarry bench page`",
        plans[0].blocks[0].block
    );
    Ok(())
}

/// QD1 read latency per node, and a sample page of each.
async fn print_latencies(client: &Client, plans: &[NodePlan]) -> Result<()> {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "node",
        "path from entry",
        "pages",
        "QD1 read avg",
        "p50",
        "p99",
        "sample page",
    ]);
    for (index, plan) in plans.iter().enumerate() {
        let mut stats = LatencyStats::new();
        for i in 0..LATENCY_SAMPLES {
            let addr = plan.pages[i % plan.pages.len()];
            let started = Instant::now();
            client.read_page(addr).await?;
            stats.record(started.elapsed());
        }
        let first = plan.pages[0];
        let page = client.read_page(first).await?;
        let text = String::from_utf8_lossy(
            &page.data[..page
                .data
                .iter()
                .position(|&b| b == b'\n')
                .unwrap_or(40)
                .min(40)],
        )
        .to_string();
        table.add_row(vec![
            plan.id.to_string(),
            if index == 0 {
                "local".to_string()
            } else {
                "forwarded by the entry node".to_string()
            },
            plan.pages.len().to_string(),
            format!("{:.0} us", stats.mean_us()),
            format!("{:.0} us", stats.quantile_us(0.5)),
            format!("{:.0} us", stats.quantile_us(0.99)),
            format!("{first}: {text:?}"),
        ]);
    }
    println!("{table}");
    Ok(())
}

/// Spreads the demo pages over every bus of a node, on the last good block of
/// chip 0 of each bus.
fn plan(id: NodeId, geometry: Geometry, bad: &[BlockAddr], pages: u32) -> Result<NodePlan> {
    let mut blocks = Vec::new();
    for bus in 0..geometry.buses {
        let block = (0..geometry.blocks_per_chip)
            .rev()
            .map(|block| BlockAddr {
                bus,
                chip: 0,
                block,
            })
            .find(|b| !bad.contains(b))
            .with_context(|| format!("node {id}: every block of bus {bus} chip 0 is bad"))?;
        blocks.push(block);
    }
    let capacity = geometry.buses * geometry.pages_per_block;
    let pages = pages.min(capacity);
    let pages = (0..pages)
        .map(|i| {
            let block = blocks[(i % geometry.buses) as usize];
            GlobalPageAddr {
                node: id,
                page: PageAddr {
                    page: i / geometry.buses,
                    ..block.page(0)
                },
            }
        })
        .collect();
    Ok(NodePlan {
        id,
        geometry,
        blocks,
        pages,
    })
}

/// Recognisable page contents: the address in text, repeated.
fn demo_page(addr: GlobalPageAddr, page_size: usize) -> Bytes {
    let line = format!("quarry demo page {addr}\n");
    let mut data = Vec::with_capacity(page_size);
    while data.len() < page_size {
        let take = (page_size - data.len()).min(line.len());
        data.extend_from_slice(&line.as_bytes()[..take]);
    }
    Bytes::from(data)
}

/// Runs `requests` keeping up to [`DEMO_QUEUE_DEPTH`] in flight; answers come
/// back in request order. An error answer fails the whole step.
async fn pipeline(
    client: &Client,
    requests: Vec<Request>,
) -> Result<(Duration, Vec<quarry_client::Response>)> {
    let started = Instant::now();
    let mut in_flight: std::collections::VecDeque<Completion> = std::collections::VecDeque::new();
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        if in_flight.len() >= DEMO_QUEUE_DEPTH {
            if let Some(done) = in_flight.pop_front() {
                answers.push(quarry_client::into_result(done.await?)?);
            }
        }
        in_flight.push_back(client.submit(request).await?);
    }
    while let Some(done) = in_flight.pop_front() {
        answers.push(quarry_client::into_result(done.await?)?);
    }
    Ok((started.elapsed(), answers))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
