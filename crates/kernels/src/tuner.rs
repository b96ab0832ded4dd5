//! How a node reads pages into its kernels: [`ReadTuner`], which picks the
//! queue depth (pages in flight) and the block size (bytes handed to the
//! kernel at once, and so the read-ahead: two blocks are buffered) by
//! measuring, not guessing.
//!
//! The streaming paper (Chamberlain et al.) found throughput very sensitive
//! to read-ahead and block size, with the best settings differing between
//! machines. So the node measures the rate all its runs together get over
//! windows of at least [`WINDOW_BYTES`] and [`WINDOW_MIN`] (runs share the
//! disk: one run's share says little), and the tuner climbs a small grid of (depth, block)
//! settings: it keeps, per setting, the last rate seen, moves to a
//! neighbouring setting that has not been measured or that measured better,
//! and re-measures the neighbours every few windows because the disk's speed
//! drifts. What it learns carries over from run to run.

use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes a measurement window covers at least: a window of a dozen reads
/// (16 MiB at 2 GB/s) measured the noise of single requests, and the tuner
/// chased it down to tiny reads.
pub const WINDOW_BYTES: u64 = 64 << 20;
/// How long a measurement window lasts at least. The virtual disk here
/// finishes the requests in flight in bursts about 30 ms apart; a window of
/// a few bursts measured mostly where its ends fell among them (windows of
/// one setting read 1.5 to 2.9 GB/s), and the tuner wandered. Half a second
/// holds some fifteen bursts; a few GiB of scans still try every neighbour.
pub const WINDOW_MIN: std::time::Duration = std::time::Duration::from_millis(500);
/// The queue depths tried (pages in flight per run). Below 16, a run's
/// four reads are under 4 pages each: the disk here serves such reads at a
/// fraction of its rate (`docs/benchmarks.md`), and the tuner only went
/// there chasing the noise of a window.
const DEPTHS: [usize; 5] = [16, 32, 64, 128, 256];
/// The block sizes tried.
const BLOCKS: [usize; 4] = [256 << 10, 1 << 20, 4 << 20, 8 << 20];
/// Windows between re-measurements of the neighbours of the best setting.
const REPROBE_EVERY: u32 = 8;
/// How much better a neighbour's mean rate must be to move there: the disk's
/// rate swings by tens of percent from one window to the next, and a move
/// on noise walks the tuner off to poor settings.
const MOVE_GAIN: f64 = 1.10;
/// Windows a setting must have been measured in before the tuner moves to it.
const MOVE_AFTER_WINDOWS: usize = 2;

/// The last few rates measured at one setting.
#[derive(Debug, Default, Clone, Copy)]
struct Rates {
    recent: [f64; 3],
    count: usize,
}

impl Rates {
    fn push(&mut self, rate: f64) {
        self.recent.rotate_right(1);
        self.recent[0] = rate;
        self.count += 1;
    }

    fn kept(&self) -> usize {
        self.count.min(self.recent.len())
    }

    fn mean(&self) -> f64 {
        let n = self.kept();
        if n == 0 {
            return 0.0;
        }
        self.recent[..n].iter().sum::<f64>() / n as f64
    }
}

/// A read setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadSetting {
    /// Pages in flight.
    pub depth: usize,
    /// Bytes per block handed to the kernel.
    pub block_bytes: usize,
}

/// The node's read tuner: shared by every local run.
#[derive(Debug)]
pub struct ReadTuner {
    state: Mutex<TunerState>,
}

#[derive(Debug)]
struct TunerState {
    /// Index into DEPTHS and BLOCKS of the setting in use.
    at: (usize, usize),
    /// Recent rates measured per setting (bytes per second).
    rates: HashMap<(usize, usize), Rates>,
    windows: u32,
    /// Held at `at`: measures, never moves.
    pinned: bool,
    /// Setting to try next before returning to the best, if any.
    probe: Option<(usize, usize)>,
    /// The node-wide window being measured: bytes every run has read since
    /// `window_start`, and when bytes last came.
    window_bytes: u64,
    window_start: Option<std::time::Instant>,
    last_record: Option<std::time::Instant>,
}

/// A pause in reading longer than this ends a window unmeasured: idle time
/// is not the disk's.
const IDLE_GAP: std::time::Duration = std::time::Duration::from_millis(200);

impl Default for ReadTuner {
    fn default() -> ReadTuner {
        ReadTuner::new()
    }
}

impl ReadTuner {
    /// A tuner that starts at depth 128, 1 MiB blocks: in the middle of the
    /// grid, so every direction is one step away.
    pub fn new() -> ReadTuner {
        ReadTuner {
            state: Mutex::new(TunerState {
                at: (3, 1),
                rates: HashMap::new(),
                windows: 0,
                pinned: false,
                probe: None,
                window_bytes: 0,
                window_start: None,
                last_record: None,
            }),
        }
    }

    /// A tuner held at one setting (for benchmarks that sweep settings);
    /// `None` if the setting is not on the grid.
    pub fn pinned(setting: ReadSetting) -> Option<ReadTuner> {
        let at = index_of(setting)?;
        let tuner = ReadTuner::new();
        {
            let mut st = tuner.lock();
            st.at = at;
            st.pinned = true;
        }
        Some(tuner)
    }

    /// The settings the tuner chooses among.
    pub fn grid() -> Vec<ReadSetting> {
        DEPTHS
            .iter()
            .flat_map(|&depth| {
                BLOCKS
                    .iter()
                    .map(move |&block_bytes| ReadSetting { depth, block_bytes })
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TunerState> {
        // A panic while holding this lock leaves only rate estimates behind,
        // which stay usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The setting to use now.
    pub fn current(&self) -> ReadSetting {
        let st = self.lock();
        let (d, b) = st.probe.unwrap_or(st.at);
        ReadSetting {
            depth: DEPTHS[d],
            block_bytes: BLOCKS[b],
        }
    }

    /// Counts `bytes` just read by any run on the node; once a window has
    /// lasted [`WINDOW_MIN`] and held [`WINDOW_BYTES`], its rate is observed
    /// for the setting in use. Runs share the disk, so the rate that
    /// matters is the node's, not one run's share of it. Returns the setting
    /// to use now.
    pub fn record(&self, bytes: u64) -> ReadSetting {
        self.record_at(bytes, std::time::Instant::now())
    }

    /// [`record`](Self::record) at `now`.
    fn record_at(&self, bytes: u64, now: std::time::Instant) -> ReadSetting {
        let (setting, window) = {
            let mut st = self.lock();
            let idle = st
                .last_record
                .is_none_or(|t| now.saturating_duration_since(t) > IDLE_GAP);
            st.last_record = Some(now);
            if idle || st.window_start.is_none() {
                st.window_start = Some(now);
                st.window_bytes = 0;
            }
            st.window_bytes += bytes;
            let setting = self.current_locked(&st);
            let lasted = st.window_start.map_or(std::time::Duration::ZERO, |t| {
                now.saturating_duration_since(t)
            });
            if st.window_bytes < WINDOW_BYTES || lasted < WINDOW_MIN {
                return setting;
            }
            let window = (st.window_bytes, lasted.as_secs_f64());
            st.window_start = Some(now);
            st.window_bytes = 0;
            (setting, window)
        };
        self.observe(setting, window.0, window.1)
    }

    /// Reports a window read at `setting`: `bytes` in `secs`. Returns the
    /// setting to use next.
    pub fn observe(&self, setting: ReadSetting, bytes: u64, secs: f64) -> ReadSetting {
        let mut st = self.lock();
        let Some(key) = index_of(setting) else {
            return self.current_locked(&st);
        };
        if secs > 0.0 {
            st.rates.entry(key).or_default().push(bytes as f64 / secs);
            tracing::debug!(
                depth = setting.depth,
                block_bytes = setting.block_bytes,
                mib_per_s = format!("{:.0}", bytes as f64 / secs / f64::from(1 << 20)),
                probe = st.probe.is_some(),
                "read window"
            );
        }
        st.windows += 1;
        if st.pinned {
            return self.current_locked(&st);
        }
        // Move to the best measured among the current setting and its
        // neighbours; an unmeasured neighbour is tried first.
        let best = best_known(&st.rates, st.at);
        if best != st.at {
            let rate = st.rates.get(&best).map_or(0.0, Rates::mean);
            tracing::info!(
                depth = DEPTHS[best.0],
                block_bytes = BLOCKS[best.1],
                mib_per_s = format!("{:.0}", rate / f64::from(1 << 20)),
                from_depth = DEPTHS[st.at.0],
                from_block_bytes = BLOCKS[st.at.1],
                "read tuner moved"
            );
        }
        st.at = best;
        st.probe = None;
        let neighbours = neighbours(st.at);
        let here = st.rates.get(&st.at).map_or(0.0, Rates::mean);
        // A neighbour measured once that looked clearly better is measured
        // again before the tuner trusts it.
        let to_confirm = neighbours.iter().find(|n| {
            st.rates
                .get(n)
                .is_some_and(|r| r.kept() < MOVE_AFTER_WINDOWS && r.mean() > here * MOVE_GAIN)
        });
        if let Some(n) = neighbours.iter().find(|n| !st.rates.contains_key(n)) {
            st.probe = Some(*n);
        } else if let Some(n) = to_confirm {
            st.probe = Some(*n);
        } else if st.windows.is_multiple_of(REPROBE_EVERY) {
            let n = neighbours[(st.windows / REPROBE_EVERY) as usize % neighbours.len()];
            st.probe = Some(n);
        }
        self.current_locked(&st)
    }

    fn current_locked(&self, st: &TunerState) -> ReadSetting {
        let (d, b) = st.probe.unwrap_or(st.at);
        ReadSetting {
            depth: DEPTHS[d],
            block_bytes: BLOCKS[b],
        }
    }

    /// The best setting measured so far and its rate (bytes per second).
    pub fn best(&self) -> (ReadSetting, Option<f64>) {
        let st = self.lock();
        let (d, b) = st.at;
        (
            ReadSetting {
                depth: DEPTHS[d],
                block_bytes: BLOCKS[b],
            },
            st.rates.get(&st.at).map(Rates::mean),
        )
    }
}

fn index_of(s: ReadSetting) -> Option<(usize, usize)> {
    Some((
        DEPTHS.iter().position(|&d| d == s.depth)?,
        BLOCKS.iter().position(|&b| b == s.block_bytes)?,
    ))
}

fn neighbours((d, b): (usize, usize)) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(4);
    if d + 1 < DEPTHS.len() {
        out.push((d + 1, b));
    }
    if d > 0 {
        out.push((d - 1, b));
    }
    if b + 1 < BLOCKS.len() {
        out.push((d, b + 1));
    }
    if b > 0 {
        out.push((d, b - 1));
    }
    out
}

fn best_known(rates: &HashMap<(usize, usize), Rates>, at: (usize, usize)) -> (usize, usize) {
    let mut best = at;
    let mut best_rate = rates.get(&at).map_or(0.0, Rates::mean);
    for n in neighbours(at) {
        if let Some(r) = rates.get(&n) {
            if r.kept() >= MOVE_AFTER_WINDOWS && r.mean() > best_rate * MOVE_GAIN {
                best = n;
                best_rate = r.mean();
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up device whose rate peaks at depth 64 and 4 MiB blocks, with
    /// neighbouring settings further apart than the move threshold.
    fn rate(s: ReadSetting) -> f64 {
        let d = (s.depth as f64).log2();
        let b = (s.block_bytes as f64).log2();
        1000.0 - (d - 6.0).powi(2) * 150.0 - (b - 22.0).powi(2) * 90.0
    }

    #[test]
    fn one_lucky_window_does_not_move_the_tuner() {
        let tuner = ReadTuner::new();
        let start = tuner.current();
        let mut s = tuner.observe(start, 1000, 1.0);
        // The first neighbour probed has one lucky window (1.5x), then shows
        // what it is (0.3x); the others are slower than the start.
        let lucky = s;
        let mut lucky_windows = 0;
        for _ in 0..16 {
            let rate = if s == lucky {
                lucky_windows += 1;
                if lucky_windows == 1 {
                    1500
                } else {
                    300
                }
            } else if s == start {
                1000
            } else {
                900
            };
            s = tuner.observe(s, rate, 1.0);
            assert_eq!(tuner.best().0, start, "moved on one window");
        }
        assert!(
            lucky_windows >= 2,
            "a neighbour that looked better is measured again"
        );
    }

    #[test]
    fn reads_of_every_run_fill_one_window() {
        let tuner = ReadTuner::new();
        let start = tuner.current();
        assert_eq!(tuner.best().1, None);
        let t0 = std::time::Instant::now();
        let step = WINDOW_MIN / 4;
        // Runs read a window's bytes in a quarter of its time: no
        // measurement until it has lasted.
        tuner.record_at(WINDOW_BYTES / 2, t0);
        tuner.record_at(WINDOW_BYTES / 2, t0 + step);
        assert_eq!(tuner.best().1, None);
        tuner.record_at(1 << 20, t0 + 2 * step);
        tuner.record_at(1 << 20, t0 + 3 * step);
        tuner.record_at(1 << 20, t0 + 4 * step);
        let (best, rate) = tuner.best();
        assert_eq!(best, start);
        let expected = (WINDOW_BYTES + (3 << 20)) as f64 / WINDOW_MIN.as_secs_f64();
        assert!(rate.is_some_and(|r| (r - expected).abs() < expected * 1e-6));
        // A pause longer than IDLE_GAP starts a new window: idle time is
        // not the disk's.
        let tuner = ReadTuner::new();
        tuner.record_at(WINDOW_BYTES, t0);
        let after_pause = t0 + IDLE_GAP * 2;
        tuner.record_at(1 << 20, after_pause);
        tuner.record_at(1 << 20, after_pause + step);
        tuner.record_at(1 << 20, after_pause + 2 * step);
        tuner.record_at(1 << 20, after_pause + 3 * step);
        tuner.record_at(WINDOW_BYTES, after_pause + 4 * step);
        let expected = (WINDOW_BYTES + (4 << 20)) as f64 / WINDOW_MIN.as_secs_f64();
        let (_, rate) = tuner.best();
        assert!(
            rate.is_some_and(|r| (r - expected).abs() < expected * 1e-6),
            "the pause was counted: {rate:?}"
        );
    }

    #[test]
    fn climbs_to_the_best_setting_and_stays_near_it() {
        let tuner = ReadTuner::new();
        let mut s = tuner.current();
        for _ in 0..200 {
            let r = rate(s);
            s = tuner.observe(s, (r * 1000.0) as u64, 1000.0 / 1000.0);
        }
        let (best, _) = tuner.best();
        assert_eq!(
            best,
            ReadSetting {
                depth: 64,
                block_bytes: 4 << 20
            }
        );
    }
}
