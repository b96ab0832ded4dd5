//! Failure injection at the manager's boundary with the device and its data
//! directory, for tests of bad-block handling and of a trim log that fails:
//! the `mem` and `file` backends never fail a program or an erase on their
//! own.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use quarry_device::BlockAddr;

/// Which device operations the manager should see fail. Cheap to clone (the
/// clones share one plan), so a test can keep a handle and arm failures while
/// the manager runs. An injected failure looks to the manager exactly like a
/// program or erase the device reported as failed (an I/O error); the device
/// itself is not touched.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    inner: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Set once anything is armed: until then the checks on the I/O path
    /// take no lock.
    armed: AtomicBool,
    faults: Mutex<Faults>,
}

#[derive(Debug, Default)]
struct Faults {
    program_blocks: HashSet<BlockAddr>,
    erase_blocks: HashSet<BlockAddr>,
    program_countdown: Option<u64>,
    erase_countdown: Option<u64>,
    trim_append_countdown: Option<u64>,
    programs_failed: u64,
    erases_failed: u64,
}

impl FaultPlan {
    /// A plan that injects nothing.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Faults) -> T) -> T {
        f(&mut self.inner.faults.lock().expect("fault plan lock"))
    }

    /// Arms a failure.
    fn arm(&self, f: impl FnOnce(&mut Faults)) {
        self.with(f);
        self.inner.armed.store(true, Ordering::Release);
    }

    /// Whether a check may fire at all (one atomic load when nothing is armed).
    fn armed(&self) -> bool {
        self.inner.armed.load(Ordering::Acquire)
    }

    /// Every program of a page of `block` fails from now on.
    pub fn fail_programs_in(&self, block: BlockAddr) {
        self.arm(|f| {
            f.program_blocks.insert(block);
        });
    }

    /// Every erase of `block` fails from now on.
    pub fn fail_erases_of(&self, block: BlockAddr) {
        self.arm(|f| {
            f.erase_blocks.insert(block);
        });
    }

    /// The program after the next `n` programs fails (once).
    pub fn fail_program_after(&self, n: u64) {
        self.arm(|f| {
            f.program_countdown = Some(n);
        });
    }

    /// The erase after the next `n` erases fails (once).
    pub fn fail_erase_after(&self, n: u64) {
        self.arm(|f| {
            f.erase_countdown = Some(n);
        });
    }

    /// The trim-log append after the next `n` appends fails (once): its
    /// records are written and the sync reports an error.
    pub fn fail_trim_append_after(&self, n: u64) {
        self.arm(|f| {
            f.trim_append_countdown = Some(n);
        });
    }

    /// Programs failed by this plan so far.
    pub fn programs_failed(&self) -> u64 {
        self.with(|f| f.programs_failed)
    }

    /// Erases failed by this plan so far.
    pub fn erases_failed(&self) -> u64 {
        self.with(|f| f.erases_failed)
    }

    fn countdown(slot: &mut Option<u64>) -> bool {
        match slot {
            Some(0) => {
                *slot = None;
                true
            }
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }

    pub(crate) fn program_fails(&self, block: BlockAddr) -> bool {
        self.armed()
            && self.with(|f| {
                let fail =
                    Self::countdown(&mut f.program_countdown) || f.program_blocks.contains(&block);
                f.programs_failed += u64::from(fail);
                fail
            })
    }

    pub(crate) fn trim_append_fails(&self) -> bool {
        self.armed() && self.with(|f| Self::countdown(&mut f.trim_append_countdown))
    }

    pub(crate) fn erase_fails(&self, block: BlockAddr) -> bool {
        self.armed()
            && self.with(|f| {
                let fail =
                    Self::countdown(&mut f.erase_countdown) || f.erase_blocks.contains(&block);
                f.erases_failed += u64::from(fail);
                fail
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdowns_fire_once_and_blocks_always() {
        let b = BlockAddr {
            bus: 0,
            chip: 1,
            block: 2,
        };
        let other = BlockAddr {
            bus: 0,
            chip: 1,
            block: 3,
        };
        let plan = FaultPlan::new();
        assert!(!plan.program_fails(b) && !plan.erase_fails(b) && !plan.trim_append_fails());
        plan.fail_program_after(2);
        let fired: Vec<bool> = (0..5).map(|_| plan.program_fails(other)).collect();
        assert_eq!(fired, vec![false, false, true, false, false]);
        plan.fail_erases_of(b);
        assert!(plan.erase_fails(b) && plan.erase_fails(b) && !plan.erase_fails(other));
        assert_eq!((plan.programs_failed(), plan.erases_failed()), (1, 2));
    }
}
