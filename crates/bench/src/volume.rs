//! `quarry bench volume`: the space manager's write amplification, the
//! figure issue 4 asks for, next to what ideal greedy cleaning gives.

use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use quarry_device::Geometry;
use quarry_volume::{write_amplification, VictimPolicy, WaBenchOptions};

use crate::args::{BenchVolumeArgs, PolicyArg};
use crate::common::work_dir;

/// Runs the benchmark and prints its table (or JSON).
pub fn volume(args: &BenchVolumeArgs) -> Result<()> {
    let (dir, _scratch) = work_dir(args.common.dir.as_deref(), "quarry-bench-volume")?;
    let mut options = WaBenchOptions {
        policy: match args.policy {
            PolicyArg::Greedy => VictimPolicy::Greedy,
            PolicyArg::CostBenefit => VictimPolicy::CostBenefit,
        },
        dir,
        ..WaBenchOptions::default()
    };
    if args.common.quick {
        options.geometry = Geometry {
            buses: 2,
            chips_per_bus: 2,
            blocks_per_chip: 64,
            pages_per_block: 32,
            ..options.geometry
        };
        options.warmup_writes = 0.5;
        options.measured_writes = 0.5;
    }
    let g = options.geometry;
    if !args.common.json {
        eprintln!(
            "bench volume: mem device {} buses x {} chips x {} blocks x {} pages of {} B, {:?} cleaning, {} + {} random overwrites per logical page",
            g.buses,
            g.chips_per_bus,
            g.blocks_per_chip,
            g.pages_per_block,
            g.page_size_bytes,
            options.policy,
            options.warmup_writes,
            options.measured_writes
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let points = runtime.block_on(write_amplification(&options))?;
    if let Some(path) = &args.plot {
        let line = |name: &str, color: &'static str, y: fn(&quarry_volume::WaPoint) -> f64| {
            crate::plot::Series {
                name: name.to_string(),
                color,
                points: points.iter().map(|p| (p.fill * 100.0, y(p))).collect(),
            }
        };
        let plot = crate::plot::LinePlot {
            title: "Write amplification of random page overwrites vs fill".into(),
            x_label: "live data / device (%)".into(),
            y_label: "flash writes / user writes".into(),
            log2_x: false,
            x_tick: |x| format!("{x:.0}%"),
            series: vec![
                line("measured (space manager)", "crimson", |p| {
                    p.write_amplification
                }),
                line("ideal greedy, simulated", "steelblue", |p| {
                    p.greedy_simulated
                }),
                line("greedy, closed form", "gray", |p| p.greedy_theory),
            ],
            hlines: Vec::new(),
        };
        std::fs::write(path, plot.to_svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.common.json {
        println!("{}", serde_json::to_string_pretty(&points)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "fill",
        "measured WA",
        "ideal greedy (simulated)",
        "x ideal",
        "greedy closed form",
        "FIFO closed form",
        "erase spread",
        "seconds",
    ]);
    for p in &points {
        table.add_row([
            format!("{:.0}%", p.fill * 100.0),
            format!("{:.2}", p.write_amplification),
            format!("{:.2}", p.greedy_simulated),
            format!(
                "{:.2}",
                p.write_amplification / p.greedy_simulated.max(f64::MIN_POSITIVE)
            ),
            format!("{:.2}", p.greedy_theory),
            format!("{:.2}", p.fifo_theory),
            p.erase_count_spread.to_string(),
            format!("{:.1}", p.seconds),
        ]);
    }
    println!("{table}");
    Ok(())
}
