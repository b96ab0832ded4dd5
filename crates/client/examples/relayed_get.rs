//! Reads an object through the entry node only (no direct links to the
//! members), so every chunk another member holds crosses one fabric hop:
//! what `docs/benchmarks.md` ("Fabric fragment size") sweeps the link's
//! data fragment size with.
//!
//! `cargo run --release -p quarry-client --example relayed_get -- ENTRY MEMBERS BUCKET KEY`

use std::time::Instant;

use quarry_client::{BucketName, Client, ObjectKey};
use tokio::io::AsyncWrite;

/// Counts bytes and drops them.
struct Sink(u64);

impl AsyncWrite for Sink {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0 += buf.len() as u64;
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

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
    let mut sink = Sink(0);
    let started = Instant::now();
    objects
        .get_to(&bucket, &key, 0, u64::MAX, &mut sink)
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    println!("{:.1} MiB/s", sink.0 as f64 / seconds / f64::from(1 << 20));
    Ok(())
}
