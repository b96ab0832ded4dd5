//! Mounts a fresh in-memory 4-node store at the directory given and serves
//! it until Ctrl-C (or an outside `umount`); everything is gone after.
//!
//! ```sh
//! mkdir -p /tmp/q && cargo run -p quarry-mount --example mem_mount /tmp/q
//! ```

use std::sync::Arc;

use quarry_mount::{run_until_signal, MountOptions};
use quarry_store::mem_object_store;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: mem_mount MOUNT_DIR")?;
    let rt = tokio::runtime::Runtime::new()?;
    let store = Arc::new(rt.block_on(mem_object_store([1, 2, 3, 4]))?);
    run_until_signal(store, None, dir, MountOptions::default())?;
    Ok(())
}
