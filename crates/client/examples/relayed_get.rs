//! Reads an object through the entry node only (no direct links to the
//! members), so every chunk another member holds crosses one fabric hop:
//! what `docs/benchmarks.md` ("Fabric fragment size") sweeps the link's
//! data fragment size with.
//!
//! `cargo run --release -p quarry-client --example relayed_get -- ENTRY MEMBERS BUCKET KEY`

use std::time::Instant;

use quarry_client::{BucketName, Client, ObjectKey};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [entry, members, bucket, key] = args.as_slice() else {
        return Err("usage: relayed_get ENTRY MEMBERS BUCKET KEY".into());
    };
    let members: u16 = members.parse()?;
    let objects = Client::connect(entry)
        .await?
        .with_members(0..members)
        .objects()
        .await?;
    let (bucket, key) = (BucketName::new(bucket)?, ObjectKey::new(key)?);
    let started = Instant::now();
    let read = objects
        .get_to(&bucket, &key, 0, u64::MAX, &mut tokio::io::sink())
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{:.1} MiB/s",
        read.size() as f64 / seconds / f64::from(1 << 20)
    );
    Ok(())
}
