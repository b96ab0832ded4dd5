//! A put/delete load for the store's kill -9 test (`tests/volume_crash.rs`):
//! opens a file-backed device, a space manager and a volume-backed node in
//! DIR, then puts and deletes objects from three tasks forever, printing
//! each operation to stdout before it starts (`B`) and once it is
//! acknowledged (`A`):
//!
//! ```text
//! READY
//! B P <bucket> <key> <content>    a put of content number <content>
//! A P <bucket> <key> <content>
//! B D <bucket> <key> -            a delete
//! A D <bucket> <key> -
//! ```
//!
//! Each (bucket, key) belongs to one task, so at most one operation on it is
//! in flight. Usage: `store-crash-writer DIR ROUND direct|buffered 1k|4k`
//! (the backing file opened with O_DIRECT or through the page cache; pages
//! of 1 KiB or 4 KiB, the test helpers' `geometry_named`). The test kills
//! it with SIGKILL.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use common::{content, Rng};
use quarry_device::{BackendKind, Device, DeviceConfig};
use quarry_store::{
    open_volume_node, BucketName, Chunking, Condition, ObjectKey, ObjectStore, StoreError,
};
use quarry_volume::{SpaceManager, VolumeConfig};

/// Keys per bucket; key i belongs to task i % TASKS.
const KEYS: u64 = 12;
const TASKS: u64 = 3;
/// Content numbers (sizes 1.5-11 KB, sharing chunks).
const CONTENTS: u64 = 12;
/// "small": chunks larger than every content, so each put is one chunk
/// kept with its manifest, stored in one step.
const BUCKETS: [&str; 3] = ["fixed", "cdc", "small"];
/// Ends by itself after this many operations per task if nobody kills it.
const MAX_OPS_PER_TASK: u64 = 100_000;

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes()).expect("stdout");
    out.write_all(b"\n").expect("stdout");
    out.flush().expect("stdout");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let geometry = args.get(4).and_then(|g| common::geometry_named(g));
    let (true, Some(geometry)) = (
        args.len() == 5 && ["direct", "buffered"].contains(&args[3].as_str()),
        geometry,
    ) else {
        eprintln!("usage: store-crash-writer DIR ROUND direct|buffered 1k|4k");
        std::process::exit(2);
    };
    let dir = PathBuf::from(&args[1]);
    let round: u64 = args[2].parse().expect("ROUND is a number");
    let config = VolumeConfig {
        checkpoint_interval_pages: 200,
        ..VolumeConfig::default()
    };
    let device_config = DeviceConfig {
        direct_io: Some(args[3] == "direct"),
        ..common::device_config(BackendKind::File, geometry)
    };
    let device = Arc::new(Device::open(&device_config, &dir).expect("open device"));
    let volume = Arc::new(
        SpaceManager::open(device, config, &dir)
            .await
            .expect("open space manager"),
    );
    let (node, _) = open_volume_node(1, volume, &common::store_config())
        .await
        .expect("open the node");
    let store = Arc::new(ObjectStore::new([Arc::new(node)]).expect("store"));
    for (name, chunking) in [
        (BUCKETS[0], Chunking::fixed(2048).unwrap()),
        (BUCKETS[1], Chunking::fastcdc(256, 1024, 4096).unwrap()),
        (BUCKETS[2], Chunking::fixed(16 * 1024).unwrap()),
    ] {
        let bucket = BucketName::new(name).unwrap();
        match store.bucket(&bucket).await {
            Ok(_) => {}
            Err(StoreError::NoSuchBucket(_)) => {
                store
                    .create_bucket(&bucket, chunking)
                    .await
                    .expect("create bucket");
            }
            Err(e) => panic!("bucket {name}: {e}"),
        }
    }
    say("READY".into());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(round * 1000 + t);
            for _ in 0..MAX_OPS_PER_TASK {
                let name = BUCKETS[rng.below(BUCKETS.len() as u64) as usize];
                let bucket = BucketName::new(name).unwrap();
                let key = format!("k{}", rng.below(KEYS / TASKS) * TASKS + t);
                let object = ObjectKey::new(&key).unwrap();
                if rng.below(4) == 0 {
                    say(format!("B D {name} {key} -"));
                    match store.delete(&bucket, &object, Condition::Always).await {
                        Ok(_) | Err(StoreError::NoSuchObject { .. }) => {}
                        Err(e) => panic!("delete {name}/{key}: {e}"),
                    }
                    say(format!("A D {name} {key} -"));
                } else {
                    let c = rng.below(CONTENTS);
                    say(format!("B P {name} {key} {c}"));
                    store
                        .put_bytes(&bucket, &object, &content(c), Condition::Always)
                        .await
                        .unwrap_or_else(|e| panic!("put {name}/{key}: {e}"));
                    say(format!("A P {name} {key} {c}"));
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
}
