//! Rebuilding the mapping after a restart: which pages to scan, and how the
//! checkpoint, the trim logs and the scanned OOB records merge. Pure
//! functions; the manager does the I/O.
//!
//! The rules (docs/volume.md, "Recovery"):
//! - a block whose erase count still equals the checkpoint's is rescanned
//!   from the checkpoint's `scan_from`; any other block from page 0. Entries
//!   of the checkpoint that point into a block erased since then have lost
//!   their location and must be found again among the scanned pages;
//! - for a logical page the highest sequence number wins, whether a write
//!   (scanned record) or a trim (log record or checkpoint tombstone);
//! - a scanned record at or below the checkpoint's `floor` was already
//!   accounted for by the checkpoint: it is taken only as a new location of
//!   the exact version the checkpoint maps (a copy made by garbage
//!   collection), never as data of its own (it may be a stale copy of a
//!   page trimmed or overwritten before the checkpoint).

use std::collections::{BTreeMap, HashMap};

use crate::blocks::Phys;
use crate::meta::{Checkpoint, TrimRecord};
use crate::LogicalPage;

/// What the device says about one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceBlock {
    pub erase_count: u32,
    pub write_pointer: u32,
    pub bad: bool,
}

/// A page found by the scan with a valid record (checksum checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub page: LogicalPage,
    pub seq: u64,
    pub phys: Phys,
}

/// A mapping entry: the version `seq` of a logical page, at `phys`, or
/// trimmed at `seq` when `phys` is `None` (a tombstone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub seq: u64,
    pub phys: Option<Phys>,
}

/// Pages `from..to` of `block` to scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScanRange {
    pub block: u32,
    pub from: u32,
    pub to: u32,
}

/// Whether the checkpoint's view of `block` still holds (same erase count).
pub(crate) fn unchanged(ckpt: Option<&Checkpoint>, block: usize, dev: &DeviceBlock) -> bool {
    ckpt.is_some_and(|c| c.blocks[block].erase_count == dev.erase_count)
}

/// The pages to scan: everything programmed since the checkpoint.
pub(crate) fn scan_ranges(ckpt: Option<&Checkpoint>, device: &[DeviceBlock]) -> Vec<ScanRange> {
    device
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let from = if unchanged(ckpt, i, d) {
                ckpt.map_or(0, |c| c.blocks[i].scan_from.min(d.write_pointer))
            } else {
                0
            };
            (from < d.write_pointer).then_some(ScanRange {
                block: i as u32,
                from,
                to: d.write_pointer,
            })
        })
        .collect()
}

/// The merged state.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    /// Live entries only (tombstones are dropped: the next checkpoint's floor
    /// covers every sequence number handed out before it).
    pub map: BTreeMap<LogicalPage, Entry>,
    /// The next sequence number to hand out.
    pub next_seq: u64,
    /// Versions the checkpoint mapped into a block erased since, with no copy
    /// found: they were acknowledged and are gone (never expected).
    pub lost: Vec<(LogicalPage, u64)>,
}

/// Merges a checkpoint, trim records and scanned candidates.
pub(crate) fn merge(
    ckpt: Option<&Checkpoint>,
    device: &[DeviceBlock],
    pages_per_block: u32,
    trims: &[TrimRecord],
    candidates: &[Candidate],
) -> Merged {
    // (entry, whether its location is still valid)
    let mut map: HashMap<LogicalPage, (Entry, bool)> = HashMap::new();
    let floor = ckpt.map_or(0, |c| c.floor);
    let mut next_seq = ckpt.map_or(1, |c| c.next_seq).max(1);
    if let Some(c) = ckpt {
        map.reserve(c.entries.len());
        for e in &c.entries {
            let valid = e.phys.is_none_or(|p| {
                let (block, page) = ((p / pages_per_block) as usize, p % pages_per_block);
                let d = &device[block];
                unchanged(ckpt, block, d) && page < d.write_pointer
            });
            map.insert(
                e.page,
                (
                    Entry {
                        seq: e.seq,
                        phys: e.phys,
                    },
                    valid,
                ),
            );
        }
    }
    for t in trims {
        next_seq = next_seq.max(t.seq.saturating_add(1));
        let tomb = (
            Entry {
                seq: t.seq,
                phys: None,
            },
            true,
        );
        map.entry(t.page)
            .and_modify(|cur| {
                if t.seq > cur.0.seq {
                    *cur = tomb;
                }
            })
            .or_insert(tomb);
    }
    for c in candidates {
        next_seq = next_seq.max(c.seq.saturating_add(1));
        let found = (
            Entry {
                seq: c.seq,
                phys: Some(c.phys),
            },
            true,
        );
        let cur = map.get(&c.page).copied();
        let take = match cur {
            // A copy of the version the checkpoint maps, whose old location is gone.
            Some((e, valid)) if e.seq == c.seq => e.phys.is_some() && !valid,
            Some((e, _)) => c.seq > floor && c.seq > e.seq,
            None => c.seq > floor,
        };
        if take {
            map.insert(c.page, found);
        }
    }
    let mut lost = Vec::new();
    let map = map
        .into_iter()
        .filter_map(|(page, (e, valid))| {
            if e.phys.is_some() && !valid {
                lost.push((page, e.seq));
                return None;
            }
            e.phys.is_some().then_some((page, e))
        })
        .collect();
    lost.sort();
    Merged {
        map,
        next_seq,
        lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{CkptBlock, CkptEntry};
    use quarry_device::Geometry;

    const PPB: u32 = 4;

    fn dev(n: usize) -> Vec<DeviceBlock> {
        vec![
            DeviceBlock {
                erase_count: 1,
                write_pointer: PPB,
                bad: false,
            };
            n
        ]
    }

    fn ckpt(floor: u64, entries: Vec<CkptEntry>, scan_from: u32) -> Checkpoint {
        Checkpoint {
            geometry: Geometry::default(),
            generation: 1,
            next_seq: floor + 1,
            floor,
            blocks: vec![
                CkptBlock {
                    erase_count: 1,
                    scan_from,
                    last_write: 0,
                };
                4
            ],
            entries,
        }
    }

    fn lp(i: u64) -> LogicalPage {
        LogicalPage::new(0, i)
    }

    fn cand(i: u64, seq: u64, phys: Phys) -> Candidate {
        Candidate {
            page: lp(i),
            seq,
            phys,
        }
    }

    #[test]
    fn without_checkpoint_the_newest_write_or_trim_wins() {
        let trims = [
            TrimRecord {
                page: lp(1),
                seq: 5,
            },
            TrimRecord {
                page: lp(2),
                seq: 3,
            },
        ];
        let cands = [
            cand(1, 2, 0),
            cand(1, 4, 1), // trimmed at 5
            cand(2, 6, 2), // written again after the trim at 3
            cand(3, 7, 3),
            cand(3, 9, 4),
            cand(3, 8, 5),
        ];
        let m = merge(None, &dev(4), PPB, &trims, &cands);
        assert_eq!(m.map.get(&lp(1)), None);
        assert_eq!(
            m.map[&lp(2)],
            Entry {
                seq: 6,
                phys: Some(2)
            }
        );
        assert_eq!(
            m.map[&lp(3)],
            Entry {
                seq: 9,
                phys: Some(4)
            }
        );
        assert_eq!(m.next_seq, 10);
        assert!(m.lost.is_empty());
    }

    #[test]
    fn scan_starts_at_the_checkpoint_unless_the_block_was_erased() {
        let c = ckpt(10, vec![], 3);
        let mut d = dev(4);
        d[1].erase_count = 2; // erased and rewritten since
        d[1].write_pointer = 2;
        d[2].write_pointer = 0;
        d[3].write_pointer = 3;
        let r = scan_ranges(Some(&c), &d);
        assert_eq!(
            r,
            vec![
                ScanRange {
                    block: 0,
                    from: 3,
                    to: 4
                },
                ScanRange {
                    block: 1,
                    from: 0,
                    to: 2
                },
            ]
        );
        assert_eq!(scan_ranges(None, &d).len(), 3);
    }

    #[test]
    fn stale_copies_at_or_below_the_floor_are_ignored() {
        // Page 1 was trimmed before the checkpoint (absent); page 2 is mapped
        // at seq 5. A GC copy of page 1 (seq 4) and an old version of page 2
        // (seq 3) turn up in the scan.
        let entries = vec![CkptEntry {
            page: lp(2),
            seq: 5,
            phys: Some(0),
        }];
        let c = ckpt(10, entries, 1);
        let m = merge(Some(&c), &dev(4), PPB, &[], &[cand(1, 4, 5), cand(2, 3, 6)]);
        assert_eq!(m.map.len(), 1);
        assert_eq!(
            m.map[&lp(2)],
            Entry {
                seq: 5,
                phys: Some(0)
            }
        );
        // Above the floor, a record is new data.
        let m = merge(Some(&c), &dev(4), PPB, &[], &[cand(1, 11, 5)]);
        assert_eq!(
            m.map[&lp(1)],
            Entry {
                seq: 11,
                phys: Some(5)
            }
        );
    }

    #[test]
    fn a_relocated_copy_replaces_a_location_in_an_erased_block() {
        let entries = vec![
            CkptEntry {
                page: lp(1),
                seq: 5,
                phys: Some(PPB + 1), // block 1
            },
            CkptEntry {
                page: lp(2),
                seq: 6,
                phys: Some(PPB + 2), // block 1, never copied
            },
            CkptEntry {
                page: lp(3),
                seq: 7,
                phys: Some(PPB + 3), // block 1, overwritten since
            },
        ];
        let c = ckpt(10, entries, 4);
        let mut d = dev(4);
        d[1].erase_count = 2;
        d[1].write_pointer = 0;
        let cands = [cand(1, 5, 9), cand(3, 12, 10)];
        let m = merge(Some(&c), &d, PPB, &[], &cands);
        assert_eq!(
            m.map[&lp(1)],
            Entry {
                seq: 5,
                phys: Some(9)
            }
        );
        assert_eq!(
            m.map[&lp(3)],
            Entry {
                seq: 12,
                phys: Some(10)
            }
        );
        assert_eq!(m.lost, vec![(lp(2), 6)]);
        assert_eq!(m.next_seq, 13);
    }

    #[test]
    fn tombstones_and_trims_above_the_floor_beat_older_writes() {
        let entries = vec![CkptEntry {
            page: lp(1),
            seq: 12,
            phys: None,
        }];
        let mut c = ckpt(10, entries, 4);
        c.next_seq = 13;
        // A write of seq 11 was in flight at the checkpoint, trimmed at 12.
        let m = merge(Some(&c), &dev(4), PPB, &[], &[cand(1, 11, 3)]);
        assert!(m.map.is_empty());
        // Order of candidates and trims does not matter.
        let trims = [TrimRecord {
            page: lp(2),
            seq: 20,
        }];
        let a = merge(
            Some(&c),
            &dev(4),
            PPB,
            &trims,
            &[cand(2, 15, 1), cand(2, 21, 2)],
        );
        let b = merge(
            Some(&c),
            &dev(4),
            PPB,
            &trims,
            &[cand(2, 21, 2), cand(2, 15, 1)],
        );
        assert_eq!(a.map, b.map);
        assert_eq!(
            a.map[&lp(2)],
            Entry {
                seq: 21,
                phys: Some(2)
            }
        );
    }
}
