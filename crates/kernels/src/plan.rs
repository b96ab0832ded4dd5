//! How the entry node cuts a command's segments into local runs:
//! [`plan_runs`] for kernels whose parts merge in any order, [`chain_runs`]
//! for kernels that hand their state from run to run.
//!
//! Runs are cut at [`RUN_BYTES`]. Runs of staggered sizes (a node's first
//! runs climbing from 1/8 of it, its last falling, so that the runs in
//! flight end one by one rather than together) measured no faster, for
//! 4 GiB scans or for 256 MiB ones split eight ways (`docs/benchmarks.md`).

use std::collections::{BTreeMap, VecDeque};

use quarry_proto::NodeId;

use crate::wire::{Segment, MAX_SEGMENTS_PER_RUN};

/// Bytes one local run covers at most: large enough that a run's fixed
/// costs are noise, small enough that progress moves (a run takes about a
/// tenth of a second at this disk's rate; a cancelled command stops a run
/// at its next read anyway). Between two runs of a node the disk waits for
/// the next run's thread and its first read: 0.7 ms on this VM, measured
/// from the block layer's request times, which was 3% of a 64 MiB run and
/// is under 1% of one of 256 MiB. Scans of 2 GiB on one node, each after a
/// fio read: 0.79-0.84 of fio with runs of 64 MiB, 0.87-0.92 with runs of
/// 256 MiB, alternated three times (`docs/benchmarks.md`).
pub const RUN_BYTES: u64 = crate::local::MAX_RUN_BYTES;
/// Local runs of one command in flight at once, over all nodes.
pub const RUNS_IN_FLIGHT: usize = 8;

/// Whether a segment of `len` bytes joins `run`, which holds `run_bytes`.
fn fits(run: &[Segment], run_bytes: u64, len: u64) -> bool {
    run.len() < MAX_SEGMENTS_PER_RUN && run_bytes + len <= RUN_BYTES
}

/// Groups the targets' segments by node into runs of at most
/// [`RUN_BYTES`] and [`MAX_SEGMENTS_PER_RUN`] segments (one at least), in
/// target order within each node; nodes' runs interleave so that every
/// node starts working at once.
pub(crate) fn plan_runs<'a>(
    targets: impl IntoIterator<Item = &'a [(NodeId, Segment)]>,
) -> Vec<(NodeId, Vec<Segment>)> {
    let mut per_node: BTreeMap<NodeId, (Vec<Vec<Segment>>, u64)> = BTreeMap::new();
    for segments in targets {
        for (node, seg) in segments {
            let (runs, run_bytes) = per_node.entry(*node).or_default();
            let len = seg.source.len_bytes();
            let full = runs.last().is_none_or(|r| !fits(r, *run_bytes, len));
            if full {
                runs.push(Vec::new());
                *run_bytes = 0;
            }
            *run_bytes += len;
            if let Some(run) = runs.last_mut() {
                run.push(seg.clone());
            }
        }
    }
    let mut queues: Vec<(NodeId, VecDeque<Vec<Segment>>)> = per_node
        .into_iter()
        .map(|(node, (runs, _))| (node, runs.into()))
        .collect();
    let mut out = Vec::new();
    loop {
        let mut any = false;
        for (node, q) in &mut queues {
            if let Some(run) = q.pop_front() {
                out.push((*node, run));
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    out
}

/// The consecutive runs of one target's segments on one node, each within
/// [`RUN_BYTES`] and [`MAX_SEGMENTS_PER_RUN`], for a chained kernel.
pub(crate) fn chain_runs(segments: &[(NodeId, Segment)]) -> Vec<(NodeId, Vec<Segment>)> {
    let mut out: Vec<(NodeId, Vec<Segment>, u64)> = Vec::new();
    for (node, seg) in segments {
        let len = seg.source.len_bytes();
        match out.last_mut() {
            Some((n, run, b)) if n == node && fits(run, *b, len) => {
                run.push(seg.clone());
                *b += len;
            }
            _ => out.push((*node, vec![seg.clone()], len)),
        }
    }
    out.into_iter().map(|(n, run, _)| (n, run)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Source;

    const MIB: u64 = 1 << 20;

    fn chunks(target: u32, node: NodeId, count: u64, chunk_bytes: u64) -> Vec<(NodeId, Segment)> {
        (0..count)
            .map(|i| {
                let seg = Segment {
                    target,
                    offset: i * chunk_bytes,
                    source: Source::Chunk {
                        fingerprint: [i as u8; 32],
                        len: chunk_bytes as u32,
                        start: 0,
                        end: chunk_bytes as u32,
                    },
                };
                (node, seg)
            })
            .collect()
    }

    fn run_bytes(run: &[Segment]) -> u64 {
        run.iter().map(|s| s.source.len_bytes()).sum()
    }

    #[test]
    fn every_segment_runs_once_in_target_order_per_node() {
        let a = chunks(0, 1, 300, 4 * MIB);
        let b = chunks(1, 2, 7, 4 * MIB);
        let c = chunks(2, 1, 5, 3 * MIB);
        let runs = plan_runs([a.as_slice(), b.as_slice(), c.as_slice()]);
        for node in [1, 2] {
            let got: Vec<&Segment> = runs
                .iter()
                .filter(|(n, _)| *n == node)
                .flat_map(|(_, run)| run)
                .collect();
            let want: Vec<&Segment> = [&a, &b, &c]
                .into_iter()
                .flatten()
                .filter(|(n, _)| *n == node)
                .map(|(_, s)| s)
                .collect();
            assert_eq!(got, want, "node {node}");
        }
        assert!(runs.iter().all(|(_, run)| run_bytes(run) <= RUN_BYTES));
        // Node 1's 1215 MiB: full runs, then what is left.
        let node1: Vec<u64> = runs
            .iter()
            .filter(|(n, _)| *n == 1)
            .map(|(_, run)| run_bytes(run) / MIB)
            .collect();
        let full = (1215 * MIB / RUN_BYTES) as usize;
        assert_eq!(node1.len(), full + 1);
        assert!(
            node1[..full].iter().all(|&b| b == RUN_BYTES / MIB),
            "{node1:?}"
        );
        assert_eq!(runs[0].0, 1);
        assert_eq!(runs[1].0, 2);
    }

    #[test]
    fn a_segment_larger_than_its_run_still_runs() {
        let big = chunks(0, 0, 20, 48 * MIB);
        let runs = plan_runs([big.as_slice()]);
        assert_eq!(runs.iter().map(|(_, r)| r.len()).sum::<usize>(), 20);
        assert!(runs.iter().all(|(_, r)| !r.is_empty()));
    }

    #[test]
    fn chains_follow_the_target_across_nodes() {
        let mut segs = chunks(0, 0, 20, 4 * MIB);
        for (i, (node, _)) in segs.iter_mut().enumerate() {
            *node = u16::from(i >= 10);
        }
        let runs = chain_runs(&segs);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].1.len(), 10);
        assert_eq!(runs[1].0, 1);
    }
}
