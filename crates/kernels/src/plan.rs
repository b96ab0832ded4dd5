//! How the entry node cuts a command's segments into local runs:
//! [`plan_runs`] for kernels whose parts merge in any order, [`chain_runs`]
//! for kernels that hand their state from run to run.
//!
//! **Staggered runs.** A node's runs share its disk evenly, so runs started
//! together end together: with runs of one size, the eight in flight ended
//! within a millisecond of each other, the disk drained, and the next eight
//! started from an empty queue. The disk lost about 15 ms at each such
//! boundary, every 200 ms (`docs/benchmarks.md`). So a node's first wave of
//! runs climbs in size (1/k, 2/k, ..., k/k of [`RUN_BYTES`] for a wave of
//! k), which spreads their ends evenly; each run that ends hands its place
//! to the next, while the others keep the queue full. The last wave falls
//! in size ((k-1)/k, ..., 1/k) so that every run of the node ends together
//! at the end of the scan, as unstaggered runs did, rather than trailing
//! off one by one.

use std::collections::{BTreeMap, VecDeque};

use quarry_proto::NodeId;

use crate::wire::{Segment, MAX_SEGMENTS_PER_RUN};

/// Bytes one local run covers at most: small enough that progress moves
/// and a cancelled command stops soon, large enough that a run's fixed
/// costs (a round trip, a thread) are noise.
pub const RUN_BYTES: u64 = 64 << 20;
/// Local runs of one command in flight at once, over all nodes.
pub const RUNS_IN_FLIGHT: usize = 8;
/// Bytes below which a node's share of a scan is not split to run in
/// parallel: a run's fixed costs would outweigh what it reads.
const MIN_SPLIT_RUN_BYTES: u64 = 4 << 20;

/// The sizes, in order, to cut `total_bytes` of one node's segments into
/// when `wave` of its runs are in flight at once (see the module doc).
/// Every size is at most [`RUN_BYTES`]; they add up to `total_bytes`
/// (before rounding to whole segments). Fewer than `wave` full runs of
/// bytes make one wave of equal runs (they all run at once anyway), of
/// [`MIN_SPLIT_RUN_BYTES`] at least.
fn run_sizes(total_bytes: u64, wave: usize) -> Vec<u64> {
    let wave = wave.max(1) as u64;
    if total_bytes == 0 {
        return Vec::new();
    }
    if total_bytes < wave * RUN_BYTES {
        let runs = wave.min(total_bytes.div_ceil(MIN_SPLIT_RUN_BYTES));
        let each = total_bytes.div_ceil(runs);
        return (0..runs)
            .map(|i| each.min(total_bytes.saturating_sub(i * each)))
            .filter(|&b| b > 0)
            .collect();
    }
    let step = RUN_BYTES / wave;
    let rising = (1..=wave).map(|i| if i == wave { RUN_BYTES } else { i * step });
    let falling: Vec<u64> = (1..wave).rev().map(|i| i * step).collect();
    let edges: u64 = rising.clone().sum::<u64>() + falling.iter().sum::<u64>();
    // The middle's runs are of one size, so the stagger the first wave set
    // up holds through them.
    let middle = total_bytes - edges;
    let middle_runs = middle.div_ceil(RUN_BYTES);
    let mut sizes: Vec<u64> = rising.collect();
    if middle_runs > 0 {
        let each = middle.div_ceil(middle_runs);
        let mut left = middle;
        for _ in 0..middle_runs {
            let size = each.min(left);
            sizes.push(size);
            left -= size;
        }
    }
    sizes.extend(falling);
    debug_assert_eq!(sizes.iter().sum::<u64>(), total_bytes);
    sizes
}

/// Cuts one node's segments, in order, into runs of the given sizes: each
/// run takes whole segments while they fit its size (one at least), and
/// at most [`MAX_SEGMENTS_PER_RUN`]. Segments left when the sizes are used
/// up (whole segments fall short of a size) go into runs of
/// [`RUN_BYTES`].
fn cut(segments: Vec<Segment>, sizes: &[u64]) -> Vec<Vec<Segment>> {
    let mut runs: Vec<Vec<Segment>> = Vec::new();
    let mut run_bytes = 0u64;
    let mut size_at = 0usize;
    let mut limit = sizes.first().copied().unwrap_or(RUN_BYTES);
    for seg in segments {
        let len = seg.source.len_bytes();
        let full = runs
            .last()
            .is_none_or(|r| r.len() >= MAX_SEGMENTS_PER_RUN || run_bytes + len > limit);
        if full {
            if !runs.is_empty() {
                size_at += 1;
                limit = sizes.get(size_at).copied().unwrap_or(RUN_BYTES);
            }
            runs.push(Vec::new());
            run_bytes = 0;
        }
        run_bytes += len;
        if let Some(run) = runs.last_mut() {
            run.push(seg);
        }
    }
    runs
}

/// Groups the targets' segments by node into runs (staggered in size, see
/// the module doc), in target order within each node; nodes' runs
/// interleave so that every node starts working at once.
pub(crate) fn plan_runs<'a>(
    targets: impl IntoIterator<Item = &'a [(NodeId, Segment)]>,
) -> Vec<(NodeId, Vec<Segment>)> {
    let mut per_node: BTreeMap<NodeId, (Vec<Segment>, u64)> = BTreeMap::new();
    for segments in targets {
        for (node, seg) in segments {
            let (list, bytes) = per_node.entry(*node).or_default();
            *bytes += seg.source.len_bytes();
            list.push(seg.clone());
        }
    }
    // The runs in flight at the start fall evenly on the nodes.
    let wave = RUNS_IN_FLIGHT.div_ceil(per_node.len().max(1));
    let mut queues: Vec<(NodeId, VecDeque<Vec<Segment>>)> = per_node
        .into_iter()
        .map(|(node, (segments, bytes))| {
            let runs = cut(segments, &run_sizes(bytes, wave));
            (node, runs.into())
        })
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
/// [`RUN_BYTES`] and [`MAX_SEGMENTS_PER_RUN`], for a chained kernel (one
/// run at a time per target: nothing to stagger).
pub(crate) fn chain_runs(segments: &[(NodeId, Segment)]) -> Vec<(NodeId, Vec<Segment>)> {
    let mut out: Vec<(NodeId, Vec<Segment>, u64)> = Vec::new();
    for (node, seg) in segments {
        let len = seg.source.len_bytes();
        match out.last_mut() {
            Some((n, run, b))
                if n == node && run.len() < MAX_SEGMENTS_PER_RUN && *b + len <= RUN_BYTES =>
            {
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
    fn a_node_s_runs_rise_then_hold_then_fall() {
        let sizes = run_sizes(4096 * MIB, 8);
        assert_eq!(sizes.iter().sum::<u64>(), 4096 * MIB);
        assert!(sizes.iter().all(|&s| s > 0 && s <= RUN_BYTES));
        let first: Vec<u64> = sizes[..8].iter().map(|s| s / MIB).collect();
        assert_eq!(first, [8, 16, 24, 32, 40, 48, 56, 64]);
        let last: Vec<u64> = sizes[sizes.len() - 7..].iter().map(|s| s / MIB).collect();
        assert_eq!(last, [56, 48, 40, 32, 24, 16, 8]);
        let middle = &sizes[8..sizes.len() - 7];
        assert!(middle.iter().all(|&s| s == middle[0]), "{middle:?}");
    }

    #[test]
    fn the_runs_in_flight_end_together_at_the_end() {
        // Eight runs in flight sharing the disk evenly: simulate which run
        // takes the next size when one ends, and when each slot finishes.
        let sizes = run_sizes(3000 * MIB, 8);
        let mut slots: Vec<u64> = sizes[..8].to_vec();
        let mut next = 8;
        let mut finished: Vec<u64> = Vec::new();
        let mut clock = 0u64;
        while !slots.is_empty() {
            let (i, &least) = slots
                .iter()
                .enumerate()
                .min_by_key(|(_, r)| **r)
                .expect("a slot");
            clock += least;
            for r in &mut slots {
                *r -= least;
            }
            if next < sizes.len() {
                slots[i] = sizes[next];
                next += 1;
            } else {
                slots.remove(i);
                finished.push(clock);
            }
        }
        let spread = finished.iter().max().unwrap() - finished.iter().min().unwrap();
        assert!(spread <= 8 * MIB, "the last runs end {spread} bytes apart");
    }

    #[test]
    fn small_scans_are_one_wave_of_equal_runs() {
        let sizes = run_sizes(100 * MIB, 8);
        assert_eq!(sizes.len(), 8);
        assert_eq!(sizes.iter().sum::<u64>(), 100 * MIB);
        assert!(sizes.iter().all(|&s| s.abs_diff(sizes[0]) <= 1));
        assert_eq!(run_sizes(10, 8), vec![10]);
        assert_eq!(run_sizes(10 * MIB, 8).len(), 3);
        assert!(run_sizes(0, 8).is_empty());
        assert_eq!(run_sizes(5 * RUN_BYTES, 1), vec![RUN_BYTES; 5]);
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
        // Two nodes: a wave of four each; node 1's first runs climb.
        let node1: Vec<u64> = runs
            .iter()
            .filter(|(n, _)| *n == 1)
            .map(|(_, run)| run_bytes(run) / MIB)
            .collect();
        assert_eq!(node1[..4], [16, 32, 48, 64]);
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
