//! Runs the dedup benchmark: `cargo run --release -p quarry-store --example dedup [MiB] [region bytes]`.

use quarry_store::bench::{dedup, DedupConfig};
use quarry_store::Chunking;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let region: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(4096);
    let config = DedupConfig {
        file_bytes: mib << 20,
        region_bytes: region,
        chunkings: vec![
            Chunking::fixed(8192)?,
            Chunking::DEFAULT_FIXED,
            Chunking::fastcdc(2048, 8192, 32768)?,
            Chunking::DEFAULT_FASTCDC,
        ],
        ..DedupConfig::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let report = rt.block_on(dedup(&config))?;
    print!("{report}");
    Ok(())
}
