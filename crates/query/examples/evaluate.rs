//! Times the engine alone on a local Parquet file, with no cluster: every
//! row group the statistics leave is evaluated on `THREADS` threads (as the
//! nodes would), and the partials merged. The seconds are the engine's CPU
//! path, the figure `perf record` and callgrind profile.
//!
//! `cargo run --release -p quarry-query --example evaluate -- FILE SQL [THREADS] [ROUNDS]`
//! (the SQL's FROM names any object; the file is what is read).

use std::time::Instant;

use bytes::Bytes;
use quarry_query::{write, Format, Merger, Query};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(sql)) = (args.get(1), args.get(2)) else {
        return Err("usage: evaluate FILE SQL [THREADS] [ROUNDS]".into());
    };
    let threads: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let rounds: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(3);
    let file = Bytes::from(std::fs::read(path)?);
    let tail: [u8; 4] = file[file.len() - 8..file.len() - 4].try_into()?;
    let footer_len = 8 + u32::from_le_bytes(tail) as usize;
    let query = Query::parse(sql)?;
    let object = query.source().to_string();
    let plan = query.bind(&object, &file[file.len() - footer_len..], file.len() as u64)?;
    let groups = plan.row_groups()?;
    let memory_bytes = 1 << 30;
    for round in 0..rounds {
        let started = Instant::now();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let partials = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&g) = groups.get(i) else { break };
                    let data = plan
                        .ranges(g)
                        .map(|rs| {
                            rs.into_iter()
                                .map(|r| (r.start, file.slice(r.start as usize..r.end as usize)))
                                .collect()
                        })
                        .and_then(|data| plan.evaluate(&[g], data, memory_bytes));
                    partials.lock().map(|mut p| p.push(data)).ok();
                });
            }
        });
        let mut merger = Merger::new(&plan, memory_bytes)?;
        for p in partials.into_inner().map_err(|_| "a thread panicked")? {
            merger.add(&p?, &object)?;
        }
        let answer = merger.finish()?;
        let seconds = started.elapsed().as_secs_f64();
        if round == 0 {
            print!("{}", String::from_utf8(write(&answer, Format::Table)?)?);
        }
        println!(
            "round {round}: {seconds:.3} s ({} row groups, {threads} threads)",
            groups.len()
        );
    }
    Ok(())
}
