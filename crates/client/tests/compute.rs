//! Near-data commands through the client (Minerva's command/status API),
//! against an in-process cluster of four managed `mem` nodes on loopback:
//! the entry node resolves targets, the nodes holding the data run the
//! kernel, the entry node merges.

mod common;

use std::time::Duration;

use common::{cluster_on, cluster_with};
use quarry_client::{
    BucketName, Chunking, Client, CommandState, Condition, Job, KernelSpec, Limits, ObjectKey,
    Outcome, Output, Request, Response, Target,
};
use quarry_device::Geometry;
use quarry_kernels::{decode, ComputeAnswer};
use quarry_node::StorageMode;
use quarry_proto::{Service, ServiceCall, ENTRY_NODE};

fn geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 64,
        pages_per_block: 32,
        page_size_bytes: 4096,
        oob_size_bytes: 64,
    }
}

const PATTERN: [u8; 8] = *b"flash!!!";

/// Text with the pattern sprinkled in, including at every 4 KiB boundary
/// (where fixed chunks and pages are cut) and overlapping itself.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"abc flash! \n"[(x % 12) as usize]
        })
        .collect();
    let mut at = 4096 - 4;
    while at + 8 <= len {
        out[at..at + 8].copy_from_slice(&PATTERN);
        at += 4096 + (x as usize % 3);
        x = x.rotate_left(7);
    }
    out
}

fn count(hay: &[u8]) -> u64 {
    hay.windows(8).filter(|w| *w == PATTERN).count() as u64
}

/// Four managed nodes and a client entering at `entry`.
async fn cluster(dir: &std::path::Path, entry: usize) -> (Vec<quarry_node::NodeHandle>, Client) {
    let nodes = cluster_with(dir, &[geometry(); 4], StorageMode::Managed).await;
    let client = Client::connect(&nodes[entry].local_addr().to_string())
        .await
        .unwrap();
    (nodes, client)
}

/// A bucket of `chunk_bytes` fixed chunks.
async fn bucket(objects: &quarry_client::Objects, name: &str, chunk_bytes: u32) -> BucketName {
    let bucket = BucketName::new(name).unwrap();
    objects
        .create_bucket(&bucket, Chunking::fixed(chunk_bytes).unwrap())
        .await
        .unwrap();
    bucket
}

fn fgrep8() -> Job {
    Job::Scan(KernelSpec::Fgrep8 { pattern: PATTERN })
}

fn object(bucket: &str, key: &str) -> Target {
    Target::Object {
        bucket: bucket.into(),
        key: key.into(),
    }
}

fn counts(outcome: &Outcome) -> Vec<(String, u64)> {
    match outcome {
        Outcome::Scan(targets) => targets
            .iter()
            .map(|t| match &t.output {
                Output::Count(n) => (t.target.clone(), *n),
                other => panic!("not a count: {other:?}"),
            })
            .collect(),
        other => panic!("not a scan: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one scenario, step by step
async fn fgrep8_over_objects_volumes_and_linear_ranges_equals_a_scan_of_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, client) = cluster(dir.path(), 0).await;
    let objects = client.objects().await.unwrap();
    let fixed = BucketName::new("fixed").unwrap();
    let cdc = BucketName::new("cdc").unwrap();
    objects
        .create_bucket(&fixed, Chunking::fixed(4096).unwrap())
        .await
        .unwrap();
    objects
        .create_bucket(&cdc, Chunking::fastcdc(2048, 4096, 16384).unwrap())
        .await
        .unwrap();
    let mut want = Vec::new();
    for (i, len) in [300_000usize, 4096, 4100, 7, 0, 65_536]
        .into_iter()
        .enumerate()
    {
        let data = text(len, i as u64 + 1);
        for bucket in [&fixed, &cdc] {
            let key = ObjectKey::new(&format!("logs/{i}.txt")).unwrap();
            objects
                .put_bytes(bucket, &key, &data, Condition::Always)
                .await
                .unwrap();
        }
        want.push((format!("logs/{i}.txt"), count(&data)));
    }
    assert!(want[0].1 > 70, "the test text holds the pattern: {want:?}");

    // Entering at another node gives the same answers.
    let compute = Client::connect(&nodes[2].local_addr().to_string())
        .await
        .unwrap()
        .compute();
    for bucket in ["fixed", "cdc"] {
        let (result, _) = compute
            .run(
                fgrep8(),
                vec![Target::Prefix {
                    bucket: bucket.into(),
                    prefix: "logs/".into(),
                }],
                Limits::default(),
            )
            .await
            .unwrap();
        let mut expect: Vec<(String, u64)> = want
            .iter()
            .map(|(k, n)| (format!("{bucket}/{k}"), *n))
            .collect();
        expect.sort();
        assert_eq!(counts(&result.outcome), expect);
        let total: u64 = want
            .iter()
            .enumerate()
            .map(|(i, _)| [300_000u64, 4096, 4100, 7, 0, 65_536][i])
            .sum();
        assert_eq!(result.bytes_scanned, total);
        // What crossed back is parts, not data.
        assert!(result.bytes_from_nodes < total / 10, "{result:?}");
    }
    // Several keys, in the order named.
    let (result, _) = compute
        .run(
            fgrep8(),
            vec![object("fixed", "logs/2.txt"), object("cdc", "logs/0.txt")],
            Limits::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        counts(&result.outcome),
        vec![
            ("fixed/logs/2.txt".to_string(), want[2].1),
            ("cdc/logs/0.txt".to_string(), want[0].1)
        ]
    );

    // A block volume striped over the four nodes, a range cut mid-page.
    let volumes = client.volumes().await.unwrap();
    volumes.create("scratch", 1 << 20, None).await.unwrap();
    let volume = volumes.open("scratch").await.unwrap();
    let data = text(200_000, 99);
    volume.write_range(10_000, &data).await.unwrap();
    let range = (10_000 + 3_333, 150_000);
    let (result, _) = compute
        .run(
            fgrep8(),
            vec![Target::Volume {
                name: "scratch".into(),
                offset_bytes: range.0,
                len_bytes: Some(range.1),
            }],
            Limits::default(),
        )
        .await
        .unwrap();
    let slice = &data[3_333..3_333 + 150_000];
    assert_eq!(counts(&result.outcome)[0].1, count(slice));

    // Raw linear pages: compare with the pages read back.
    let space = client.linear_space().await.unwrap();
    let pages = 64u64;
    let bytes: Vec<u8> = client
        .read_linear(&space, 0, pages, 16)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|p| p.data.to_vec())
        .collect();
    let (result, _) = compute
        .run(
            Job::Scan(KernelSpec::Fgrep8 {
                pattern: bytes[5000..5008].try_into().unwrap(),
            }),
            vec![Target::Linear {
                first_page: 0,
                pages,
            }],
            Limits::default(),
        )
        .await
        .unwrap();
    let pat = &bytes[5000..5008];
    let expect = bytes.windows(8).filter(|w| *w == pat).count() as u64;
    assert_eq!(counts(&result.outcome)[0].1, expect);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

/// Nodes whose spare area has no room for a chunk tag keep each chunk's
/// header before its bytes (as stores written before tags did): the
/// kernels find the bytes after it, and count the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernels_read_chunks_whose_header_precedes_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let narrow = Geometry {
        oob_size_bytes: 32,
        ..geometry()
    };
    let nodes = cluster_with(dir.path(), &[narrow; 4], StorageMode::Managed).await;
    let client = Client::connect(&nodes[1].local_addr().to_string())
        .await
        .unwrap();
    let objects = client.objects().await.unwrap();
    let fixed = bucket(&objects, "fixed", 4096).await;
    let mut want = Vec::new();
    for (i, len) in [200_000usize, 4096, 4033, 4032, 1].into_iter().enumerate() {
        let data = text(len, i as u64 + 7);
        let key = ObjectKey::new(&format!("logs/{i}.txt")).unwrap();
        objects
            .put_bytes(&fixed, &key, &data, Condition::Always)
            .await
            .unwrap();
        want.push((format!("fixed/logs/{i}.txt"), count(&data)));
    }
    assert!(want[0].1 > 40, "the test text holds the pattern: {want:?}");
    let (result, _) = client
        .compute()
        .run(
            fgrep8(),
            vec![Target::Prefix {
                bucket: "fixed".into(),
                prefix: "logs/".into(),
            }],
            Limits::default(),
        )
        .await
        .unwrap();
    assert_eq!(counts(&result.outcome), want);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one scenario, step by step
async fn commands_have_status_limits_cancel_and_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, client) = cluster(dir.path(), 1).await;
    let objects = client.objects().await.unwrap();
    let bucket = bucket(&objects, "b", 16384).await;
    let data = text(4 << 20, 5);
    objects
        .put_bytes(
            &bucket,
            &ObjectKey::new("big").unwrap(),
            &data,
            Condition::Always,
        )
        .await
        .unwrap();
    let compute = client.compute();

    // Submit, await, status, list, result.
    let id = compute
        .submit(fgrep8(), vec![object("b", "big")], Limits::default())
        .await
        .unwrap();
    let status = compute.wait(id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(status.state, CommandState::Done);
    assert_eq!((status.bytes_done, status.bytes_total), (4 << 20, 4 << 20));
    assert!(status.result_bytes > 0);
    let (result, size) = compute.result(id).await.unwrap();
    // Once read whole, the encoded result is kept (with the pieces).
    assert!(compute.status(id).await.unwrap().result_bytes >= size);
    assert_eq!(counts(&result.outcome)[0].1, count(&data));
    assert!(compute.list().await.unwrap().iter().any(|s| s.id == id));

    // Many at once. Sixteen run together, so each node's runs (one per
    // command) queue for its one scan lane: a run that held the lane, a
    // thread or a buffer while it waited for another would hang here.
    let mut ids = Vec::new();
    for _ in 0..24 {
        ids.push(
            compute
                .submit(fgrep8(), vec![object("b", "big")], Limits::default())
                .await
                .unwrap(),
        );
    }
    // The last ones wait for a slot; cancel one.
    let cancelled = *ids.last().unwrap();
    let status = compute.cancel(cancelled).await.unwrap();
    assert_eq!(status.state, CommandState::Cancelled);
    for &id in &ids[..ids.len() - 1] {
        let (r, _) = compute.finish(id, Duration::from_secs(120)).await.unwrap();
        assert_eq!(counts(&r.outcome)[0].1, count(&data));
    }
    let err = compute.result(cancelled).await.unwrap_err();
    assert!(err.to_string().contains("Cancelled"), "{err}");

    // Every limit fails the command, not the node.
    let tight = |f: fn(&mut Limits)| {
        let mut l = Limits::default();
        f(&mut l);
        l
    };
    for (limits, what) in [
        (tight(|l| l.memory_bytes = 16), "memory limit"),
        (tight(|l| l.result_bytes = 8), "result size limit"),
        (tight(|l| l.time_ms = 1), "time limit"),
    ] {
        let err = compute
            .run(fgrep8(), vec![object("b", "big")], limits)
            .await
            .unwrap_err();
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    // Out-of-range limits are refused at submission.
    let err = compute
        .submit(fgrep8(), vec![object("b", "big")], tight(|l| l.time_ms = 0))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("time limit of 0 ms"), "{err}");

    // A missing object, a missing volume, a linear range past the end.
    for (target, says) in [
        (object("b", "nope"), "b/nope"),
        (object("nobucket", "x"), "nobucket"),
        (
            Target::Volume {
                name: "novol".into(),
                offset_bytes: 0,
                len_bytes: None,
            },
            "novol",
        ),
        (
            Target::Linear {
                first_page: u64::MAX - 1,
                pages: 5,
            },
            "linear space has",
        ),
    ] {
        let err = compute
            .run(fgrep8(), vec![target], Limits::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    // No such command.
    let err = compute.status(9_999_999).await.unwrap_err();
    assert!(err.to_string().contains("no command 9999999"), "{err}");

    // A malformed compute call is an error answer; the node still serves.
    let answer = client
        .call(Request::Call(Box::new(ServiceCall {
            node: ENTRY_NODE,
            service: Service::Compute,
            idempotent: true,
            body: bytes::Bytes::from_static(&[0xff, 0xff, 0xff, 0x01]),
        })))
        .await
        .unwrap();
    let Response::Reply(body) = answer else {
        panic!("{answer:?}")
    };
    let decoded: ComputeAnswer = decode("answer", &body).unwrap();
    match decoded {
        ComputeAnswer::Failed(f) => {
            assert!(f.message.contains("malformed compute message"), "{f:?}")
        }
        other => panic!("{other:?}"),
    }
    let (r, _) = compute
        .run(fgrep8(), vec![object("b", "big")], Limits::default())
        .await
        .unwrap();
    assert_eq!(counts(&r.outcome)[0].1, count(&data));
    // The data is intact.
    let (_, back) = objects
        .get(&bucket, &ObjectKey::new("big").unwrap())
        .await
        .unwrap();
    assert_eq!(&back[..], &data[..]);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_read_modify_writes_is_one_command_and_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, client) = cluster(dir.path(), 3).await;
    let volumes = client.volumes().await.unwrap();
    volumes.create("counters", 256 * 1024, None).await.unwrap();
    let volume = volumes.open("counters").await.unwrap();
    volume.write_range(0, &[0u8; 8192]).await.unwrap();
    let compute = client.compute();
    // 5000 adds over 300 counters spread over every node's pages, some
    // counters hit many times in one batch.
    let mut model = std::collections::HashMap::<u64, u64>::new();
    let mut ops = Vec::new();
    let mut want = Vec::new();
    let mut x = 12345u64;
    for _ in 0..5000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let counter = (x >> 33) % 300;
        let offset = counter * 800 % (256 * 1024 - 8);
        let delta = x >> 60;
        let v = model.entry(offset).or_default();
        *v = v.wrapping_add(delta);
        want.push(*v);
        ops.push(quarry_client::RmwOp {
            offset_bytes: offset,
            delta,
        });
    }
    let (result, _) = compute
        .run(
            Job::Rmw(quarry_client::RmwBatch {
                volume: "counters".into(),
                ops,
            }),
            Vec::new(),
            Limits::default(),
        )
        .await
        .unwrap();
    assert_eq!(result.outcome, Outcome::Rmw { values: want });
    // The counters are in the volume.
    for (&offset, &v) in &model {
        let bytes = volume.read_range(offset, 8).await.unwrap();
        assert_eq!(u64::from_le_bytes(bytes[..].try_into().unwrap()), v);
    }
    // An op across a page end fails the command and changes nothing.
    let err = compute
        .run(
            Job::Rmw(quarry_client::RmwBatch {
                volume: "counters".into(),
                ops: vec![
                    quarry_client::RmwOp {
                        offset_bytes: 0,
                        delta: 1,
                    },
                    quarry_client::RmwOp {
                        offset_bytes: 4093,
                        delta: 1,
                    },
                ],
            }),
            Vec::new(),
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("4093"), "{err}");
    let bytes = volume.read_range(0, 8).await.unwrap();
    assert_eq!(u64::from_le_bytes(bytes[..].try_into().unwrap()), model[&0]);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

/// The whole-target answer of a kernel run in this process over `bytes`.
fn local_answer(spec: &KernelSpec, bytes: &[u8]) -> Output {
    let kernel = quarry_kernels::compile(spec).unwrap();
    let part = kernel.fold(kernel.empty(0), bytes).unwrap();
    kernel.finish(part).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kernel_over_a_volume_range_cut_mid_page_equals_one_local_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, client) = cluster(dir.path(), 0).await;
    let volumes = client.volumes().await.unwrap();
    volumes.create("text", 1 << 20, None).await.unwrap();
    let volume = volumes.open("text").await.unwrap();
    // Words and lines cross every 4 KiB page, and so every node.
    let data = text(600_000, 17);
    volume.write_range(0, &data).await.unwrap();
    let compute = client.compute();
    let (offset, len) = (4096 * 3 - 5, 500_000u64);
    let slice = &data[offset as usize..(offset + len) as usize];
    for spec in [
        KernelSpec::Wc(quarry_client::WcSpec {
            words: true,
            word: Some(b"flash!".to_vec()),
            top: Some(5),
            locale: quarry_client::WcLocale::C,
        }),
        KernelSpec::Grep(quarry_client::GrepSpec::new(
            "c fl.sh",
            quarry_client::GrepSyntax::Basic,
        )),
        KernelSpec::Checksum,
        KernelSpec::Fgrep8 { pattern: PATTERN },
    ] {
        let (result, _) = compute
            .run(
                Job::Scan(spec.clone()),
                vec![Target::Volume {
                    name: "text".into(),
                    offset_bytes: offset,
                    len_bytes: Some(len),
                }],
                Limits::default(),
            )
            .await
            .unwrap();
        let Outcome::Scan(targets) = result.outcome else {
            panic!("not a scan")
        };
        assert_eq!(targets[0].output, local_answer(&spec, slice), "{spec:?}");
        assert_eq!(result.bytes_scanned, len);
    }
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_fails_the_command_with_its_name_and_the_others_still_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = cluster_with(dir.path(), &[geometry(); 4], StorageMode::Managed).await;
    let client = Client::connect(&nodes[0].local_addr().to_string())
        .await
        .unwrap()
        .with_members([0, 1, 2, 3]);
    let objects = client.objects().await.unwrap();
    let bucket = bucket(&objects, "b", 4096).await;
    let data = text(200_000, 3);
    objects
        .put_bytes(
            &bucket,
            &ObjectKey::new("k").unwrap(),
            &data,
            Condition::Always,
        )
        .await
        .unwrap();
    // A small object whose chunk and manifest avoid node 3.
    let mut small = None;
    for i in 0..64 {
        let key = ObjectKey::new(&format!("s{i}")).unwrap();
        let bytes = text(1000, 100 + i);
        let placement = objects.placement();
        let fp = quarry_store::Fingerprint::of(&bytes);
        if placement.chunk_node(&fp) != 3 && placement.manifest_node(&bucket, &key) != 3 {
            objects
                .put_bytes(&bucket, &key, &bytes, Condition::Always)
                .await
                .unwrap();
            small = Some((key, bytes));
            break;
        }
    }
    let (small_key, small_bytes) = small.expect("some key avoids node 3");
    let dead = nodes.pop().unwrap();
    dead.shutdown().await.unwrap();
    let compute = client.compute();
    let err = compute
        .run(fgrep8(), vec![object("b", "k")], Limits::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("node 3"), "{err}");
    let (r, _) = compute
        .run(
            fgrep8(),
            vec![object("b", small_key.as_str())],
            Limits::default(),
        )
        .await
        .unwrap();
    assert_eq!(counts(&r.outcome)[0].1, count(&small_bytes));
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_lines_larger_than_a_message_come_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, client) = cluster(dir.path(), 0).await;
    let objects = client.objects().await.unwrap();
    let bucket = bucket(&objects, "b", 64 * 1024).await;
    // 20 MiB of lines that all match: each node's parts (about 5 MiB of
    // lines) are larger than one protocol message.
    let mut data = Vec::new();
    let mut n = 0u64;
    while data.len() < 20 << 20 {
        data.extend_from_slice(format!("line {n} holds a flash of text\n").as_bytes());
        n += 1;
    }
    objects
        .put_bytes(
            &bucket,
            &ObjectKey::new("all").unwrap(),
            &data,
            Condition::Always,
        )
        .await
        .unwrap();
    let (result, sent) = client
        .compute()
        .run(
            Job::Scan(KernelSpec::Grep(quarry_client::GrepSpec::new(
                "flash",
                quarry_client::GrepSyntax::Fixed,
            ))),
            vec![object("b", "all")],
            Limits::default(),
        )
        .await
        .unwrap();
    let Outcome::Scan(targets) = result.outcome else {
        panic!("not a scan")
    };
    let Output::Grep(g) = &targets[0].output else {
        panic!("not grep")
    };
    assert_eq!(g.matching_lines, n);
    assert_eq!(g.match_lines().count() as u64, n);
    let mut offset = 0u64;
    for (i, line) in g.match_lines().enumerate() {
        let want = format!("line {i} holds a flash of text");
        assert_eq!(line.line_number, i as u64 + 1);
        assert_eq!(line.byte_offset, offset);
        assert_eq!(line.text, want.as_bytes());
        offset += want.len() as u64 + 1;
    }
    assert!(sent > 20 << 20, "the lines came back: {sent}");
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

/// On `file` devices a node streams a scan through a ring of its own
/// (`quarry_device::StreamReader`): what it folds is every byte of each
/// target in order, once (the checksums equal those of the bytes), for
/// objects of one page to many reads, chunks of one page to several reads,
/// and fixed and content-defined chunking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_streamed_off_file_devices_fold_every_byte_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let wide = Geometry {
        blocks_per_chip: 32,
        pages_per_block: 64,
        ..geometry()
    };
    let nodes = cluster_on(dir.path(), &[wide; 2], StorageMode::Managed, true).await;
    let client = Client::connect(&nodes[0].local_addr().to_string())
        .await
        .unwrap();
    let objects = client.objects().await.unwrap();
    let small = bucket(&objects, "small", 4096).await;
    let large = bucket(&objects, "large", 1 << 20).await;
    let cdc = BucketName::new("cdc").unwrap();
    objects
        .create_bucket(&cdc, Chunking::fastcdc(2048, 8192, 32768).unwrap())
        .await
        .unwrap();
    let compute = client.compute();
    for (i, len) in [3_000_000usize, 1_048_577, 4096, 5].into_iter().enumerate() {
        let data = text(len, i as u64 + 40);
        for bucket in [&small, &large, &cdc] {
            let key = ObjectKey::new(&format!("f{i}")).unwrap();
            objects
                .put_bytes(bucket, &key, &data, Condition::Always)
                .await
                .unwrap();
            let target = || object(bucket.as_str(), &format!("f{i}"));
            let (result, _) = compute
                .run(
                    Job::Scan(KernelSpec::Checksum),
                    vec![target()],
                    Limits::default(),
                )
                .await
                .unwrap();
            match &result.outcome {
                Outcome::Scan(t) => match &t[0].output {
                    Output::Checksum(c) => {
                        assert_eq!(
                            (c.bytes, c.crc32c),
                            (len as u64, crc32c::crc32c(&data)),
                            "{bucket}/f{i}"
                        )
                    }
                    other => panic!("not a checksum: {other:?}"),
                },
                other => panic!("not a scan: {other:?}"),
            }
            let (result, _) = compute
                .run(fgrep8(), vec![target()], Limits::default())
                .await
                .unwrap();
            assert_eq!(counts(&result.outcome)[0].1, count(&data), "{bucket}/f{i}");
        }
    }
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

/// Emulated NAND of BlueDBM's timing, one bus and one chip per node, so a
/// node streams at one bus's 25 MB/s: a run of 8192 pages of 32 KiB, the
/// most one run holds, takes `RUN_PAGES` x the page's modeled read time,
/// about 11 s. Nothing is written: erased pages cost the same modeled time,
/// and the sparse backing files stay empty.
fn slow_nand() -> quarry_device::DeviceConfig {
    quarry_device::DeviceConfig {
        backend: quarry_device::BackendKind::Nand,
        preset: Some(quarry_device::Preset::Bluedbm),
        geometry: Some(Geometry {
            buses: 1,
            chips_per_bus: 1,
            blocks_per_chip: 128,
            pages_per_block: 64,
            page_size_bytes: 32 * 1024,
            oob_size_bytes: 64,
        }),
        preallocate: Some(false),
        seed: Some(7),
        ..quarry_device::DeviceConfig::default()
    }
}

/// Pages of one node's run in [`slow_nand`] (its whole device).
const RUN_PAGES: u64 = 128 * 64;

/// A cancelled command stops where its runs are, not only at the node where
/// it entered: every node's run of it ends (its request leaves the node's
/// link) and its scan lane is free for the next command, long before the
/// runs would have ended by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_stops_at_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let device = slow_nand();
    let nodes = common::cluster_of(dir.path(), &vec![device.clone(); 4], StorageMode::Raw).await;
    let entry = 1usize;
    let client = Client::connect(&nodes[entry].local_addr().to_string())
        .await
        .unwrap();
    let compute = client.compute();
    let timing = quarry_device::NandTiming::preset(quarry_device::Preset::Bluedbm, 32 * 1024 + 64);
    let natural = timing.read_device_time_min() * RUN_PAGES as u32;
    // Half a run's modeled time: a run that went on after the cancel, or a
    // lane still held by one, cannot be done by then.
    let bound = natural / 2;

    let whole = Target::Linear {
        first_page: 0,
        pages: 4 * RUN_PAGES,
    };
    let id = compute
        .submit(fgrep8(), vec![whole], Limits::default())
        .await
        .unwrap();
    // Requests of the entry each node has taken to run: the command's runs.
    let runs_from_entry = |node: &quarry_node::NodeHandle| -> u32 {
        node.fabric()
            .routes()
            .links
            .iter()
            .filter(|l| usize::from(l.peer) == entry)
            .map(|l| l.local)
            .sum()
    };
    let others: Vec<_> = (0..4).filter(|&n| n != entry).collect();
    let started = tokio::time::Instant::now();
    while !others.iter().all(|&n| runs_from_entry(&nodes[n]) > 0) {
        assert!(
            started.elapsed() < bound,
            "the runs did not reach every node: {:?}",
            compute.status(id).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = compute.status(id).await.unwrap();
    assert_eq!(status.state, CommandState::Running, "{status:?}");

    let cancelled_at = tokio::time::Instant::now();
    let status = compute.cancel(id).await.unwrap();
    assert_eq!(status.state, CommandState::Cancelled);
    while let Some(&busy) = others.iter().find(|&&n| runs_from_entry(&nodes[n]) > 0) {
        assert!(
            cancelled_at.elapsed() < bound,
            "node {busy} still runs the cancelled command {:?} after the cancel \
             (a run takes {natural:?} by itself)",
            cancelled_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Every node's lane, the entry's own included, is free: one page of each
    // node is read within the bound.
    let one_page_each = Target::Linear {
        first_page: 0,
        pages: 4,
    };
    let limits = Limits {
        time_ms: bound.as_millis() as u64,
        ..Limits::default()
    };
    let (result, _) = compute
        .run(fgrep8(), vec![one_page_each], limits)
        .await
        .unwrap_or_else(|e| panic!("a command after the cancel: {e}"));
    assert_eq!(counts(&result.outcome)[0].1, 0);
    assert_eq!(result.bytes_scanned, 4 * 32 * 1024);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

/// A command whose output outgrows what the entry node may hold for it
/// waits for its client (it does not grow memory, nor finish on its own):
/// its output is read by pieces from a cursor, and pieces once read are
/// gone, so `result` says the output streamed. A stalled command still
/// cancels, and a command that keeps all of its output answers `result`
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one scenario, step by step
async fn output_larger_than_the_bound_waits_for_its_reader_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, client) = cluster(dir.path(), 1).await;
    let objects = client.objects().await.unwrap();
    let bucket = bucket(&objects, "b", 16 * 1024).await;
    let mut data = Vec::new();
    let mut n = 0u64;
    while data.len() < 8 << 20 {
        data.extend_from_slice(
            format!("line {n} of the text, {}\n", "x".repeat(n as usize % 50)).as_bytes(),
        );
        n += 1;
    }
    objects
        .put_bytes(
            &bucket,
            &ObjectKey::new("all").unwrap(),
            &data,
            Condition::Always,
        )
        .await
        .unwrap();
    let compute = client.compute();
    let every_line = || {
        Job::Scan(KernelSpec::Grep(quarry_client::GrepSpec::new(
            "",
            quarry_client::GrepSyntax::Basic,
        )))
    };
    let limits = Limits {
        memory_bytes: 2 << 20,
        ..Limits::default()
    };
    let id = compute
        .submit(every_line(), vec![object("b", "all")], limits)
        .await
        .unwrap();
    let status = compute.wait(id, Duration::from_secs(3)).await.unwrap();
    assert_eq!(status.state, CommandState::Running, "{status:?}");
    assert!(
        status.result_bytes > 0 && status.result_bytes <= limits.memory_bytes / 4,
        "{status:?}"
    );
    let err = compute.result(id).await.unwrap_err();
    assert!(err.to_string().contains("Running"), "{err}");
    // Read it all, piece by piece.
    let mut assembler = quarry_client::Assembler::default();
    compute
        .stream(id, Duration::from_secs(120), |piece| {
            assembler.push(piece);
            Ok(())
        })
        .await
        .unwrap();
    let result = assembler.finish().expect("the output's totals");
    let Outcome::Scan(targets) = result.outcome else {
        panic!("not a scan")
    };
    let Output::Grep(g) = &targets[0].output else {
        panic!("not grep")
    };
    assert_eq!((g.matching_lines, g.match_lines().count() as u64), (n, n));
    let printed: Vec<u8> = g
        .match_lines()
        .flat_map(|l| l.text.into_iter().chain([b'\n']))
        .collect();
    assert_eq!(printed, data);
    let status = compute.status(id).await.unwrap();
    assert_eq!(status.state, CommandState::Done);
    assert!(
        status.peak_memory_bytes > 0 && status.peak_memory_bytes <= limits.memory_bytes,
        "{status:?}"
    );
    let err = compute.result(id).await.unwrap_err();
    assert!(err.to_string().contains("streamed"), "{err}");

    // Stalled, then cancelled: its output says so.
    let id = compute
        .submit(every_line(), vec![object("b", "all")], limits)
        .await
        .unwrap();
    compute.wait(id, Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        compute.cancel(id).await.unwrap().state,
        CommandState::Cancelled
    );
    let err = compute.output(id, 0).await.unwrap_err();
    assert!(err.to_string().contains("Cancelled"), "{err}");

    // Output within the bound: kept whole for `result`, as before.
    let few = Job::Scan(KernelSpec::Grep(quarry_client::GrepSpec::new(
        "line 77",
        quarry_client::GrepSyntax::Fixed,
    )));
    let id = compute
        .submit(few, vec![object("b", "all")], limits)
        .await
        .unwrap();
    let status = compute.wait(id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(status.state, CommandState::Done);
    let (result, _) = compute.result(id).await.unwrap();
    let Outcome::Scan(targets) = result.outcome else {
        panic!("not a scan")
    };
    let Output::Grep(g) = &targets[0].output else {
        panic!("not grep")
    };
    let want = data
        .split(|&b| b == b'\n')
        .filter(|l| l.windows(7).any(|w| w == b"line 77"))
        .count();
    assert_eq!(g.match_lines().count(), want);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}
