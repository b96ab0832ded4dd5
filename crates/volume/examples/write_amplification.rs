//! Prints the write-amplification benchmark (random page overwrites at 50%,
//! 80% and 90% full) next to the theoretical figures for greedy and FIFO
//! cleaning. Until `quarry bench` calls it:
//!
//! ```text
//! cargo run --release -p quarry-volume --example write_amplification [greedy|cost-benefit]
//! ```

use quarry_volume::{write_amplification, VictimPolicy, WaBenchOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), quarry_volume::VolumeError> {
    let policy = match std::env::args().nth(1).as_deref() {
        None | Some("greedy") => VictimPolicy::Greedy,
        Some("cost-benefit") => VictimPolicy::CostBenefit,
        Some(other) => {
            eprintln!("unknown policy {other:?}: greedy | cost-benefit");
            std::process::exit(2);
        }
    };
    let opts = WaBenchOptions {
        policy,
        ..WaBenchOptions::default()
    };
    let g = opts.geometry;
    println!(
        "device: {} buses x {} chips x {} blocks x {} pages of {} B (mem); policy {policy:?}; \
         {} + {} overwrites per logical page (warm-up + measured)",
        g.buses,
        g.chips_per_bus,
        g.blocks_per_chip,
        g.pages_per_block,
        g.page_size_bytes,
        opts.warmup_writes,
        opts.measured_writes
    );
    println!(
        "| fill | logical pages | measured WA | ideal greedy (simulated) | greedy closed form | \
         FIFO closed form | erase spread | time |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for p in write_amplification(&opts).await? {
        println!(
            "| {:.0}% | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} s |",
            p.fill * 100.0,
            p.logical_pages,
            p.write_amplification,
            p.greedy_simulated,
            p.greedy_theory,
            p.fifo_theory,
            p.erase_count_spread,
            p.seconds
        );
    }
    Ok(())
}
