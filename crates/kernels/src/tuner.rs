//! How a node reads pages into its kernels: [`ReadTuner`], which picks the
//! queue depth (reads at the disk, for the whole node) and the read-ahead
//! (reads whose bytes are in and wait for the kernels, for the whole node)
//! by measuring, not guessing.
//!
//! The streaming paper (Chamberlain et al.) found throughput very sensitive
//! to read-ahead and block size, with the best settings differing between
//! machines. So the node measures the rate all its runs together get over
//! windows of at least [`WINDOW_BYTES`] and [`WINDOW_MIN`] (runs share the
//! disk: one run's share says little), and climbs a small grid of (depth,
//! read-ahead) settings.
//!
//! **Paired trials.** The disk's rate drifts by a fifth over minutes (fio
//! alone read 2.1 to 2.6 GB/s in one benchmark), so rates measured at
//! different times do not compare: a tuner that compared a neighbour's
//! early windows with its own setting's late ones walked down to depth 32
//! on the drift. A trial is one window at a neighbouring setting between
//! two at the setting in use; its score is the neighbour's rate over the
//! mean of those two. The tuner moves only when a neighbour's last
//! [`TRIALS_KEPT`] scores all exceed 1 and their geometric mean reaches
//! [`MOVE_GAIN`]. While a neighbour's trials are still to be had, every
//! third window is a trial; after that one window in [`TRIAL_EVERY_SETTLED`]
//! re-tries a neighbour (the best setting can change with the load). What it
//! learns carries over from run to run.

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
/// holds some fifteen bursts.
pub const WINDOW_MIN: std::time::Duration = std::time::Duration::from_millis(500);
/// The queue depths tried: reads at the disk for the whole node, each of up
/// to [`quarry_device::MAX_READ_RUN_BYTES`]. The disk here reads fastest
/// with one or two such requests in flight and slower with more (fio: 2 MiB
/// requests at 2800-2900 MiB/s with 1 or 2 in flight, 2400-2600 with 3 or
/// 4), but another disk may want more.
const DEPTHS: [usize; 5] = [1, 2, 3, 4, 8];
/// The read-aheads tried: reads in the node's buffers beyond those at the
/// disk, read and waiting to be checked and folded. Few, because every
/// buffer in circulation costs this disk: reads into the same few buffers
/// ran a fifth faster than reads cycling through a hundred.
const AHEADS: [usize; 4] = [1, 2, 4, 8];
/// Trial scores kept per neighbour, and needed before a move.
const TRIALS_KEPT: usize = 3;
/// The geometric mean of a neighbour's scores that moves the tuner there.
const MOVE_GAIN: f64 = 1.05;
/// Windows at the setting in use before a trial, while some neighbour
/// still lacks its trials: two, so each trial is sandwiched.
const WINDOWS_BEFORE_TRIAL_LEARNING: u32 = 2;
/// Windows in one cycle once every neighbour has been tried: a trial costs
/// its window the gap between the setting and the neighbour (a tenth, say),
/// so one in sixteen costs under 1%.
const TRIAL_EVERY_SETTLED: u32 = 16;
/// A pause in reading longer than this ends a window unmeasured: idle time
/// is not the disk's.
const IDLE_GAP: std::time::Duration = std::time::Duration::from_millis(200);

/// The last few scores of one neighbour.
#[derive(Debug, Default, Clone)]
struct Scores {
    recent: std::collections::VecDeque<f64>,
}

impl Scores {
    fn push(&mut self, score: f64) {
        if self.recent.len() == TRIALS_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(score);
    }

    fn is_complete(&self) -> bool {
        self.recent.len() >= TRIALS_KEPT
    }

    /// Whether the scores say: move there.
    fn wins(&self) -> bool {
        self.is_complete()
            && self.recent.iter().all(|&s| s > 1.0)
            && self.geometric_mean() >= MOVE_GAIN
    }

    fn geometric_mean(&self) -> f64 {
        if self.recent.is_empty() {
            return 0.0;
        }
        let logs: f64 = self.recent.iter().map(|s| s.ln()).sum();
        (logs / self.recent.len() as f64).exp()
    }
}

/// A read setting, for the whole node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadSetting {
    /// Reads at the disk at once.
    pub depth: usize,
    /// Reads held beyond those, read and not yet folded by the kernels.
    pub read_ahead: usize,
}

impl ReadSetting {
    /// Read buffers in use at most: at the disk, and read ahead.
    pub fn buffers(&self) -> usize {
        self.depth + self.read_ahead
    }
}

/// The node's read tuner: shared by every local run.
#[derive(Debug)]
pub struct ReadTuner {
    state: Mutex<TunerState>,
}

type At = (usize, usize);

#[derive(Debug)]
struct TunerState {
    /// Index into DEPTHS and AHEADS of the setting in use.
    at: At,
    /// Held at `at`: measures, never moves.
    pinned: bool,
    /// The neighbour the next window tries, if any.
    trial: Option<At>,
    /// A trial measured, waiting for the next window at `at` to score it:
    /// the neighbour, its rate, and the rate at `at` in the window before.
    pending: Option<(At, f64, f64)>,
    /// Scores of the neighbours of `at` (cleared on a move).
    scores: HashMap<At, Scores>,
    /// The rates of the last windows at `at`, newest last (at most
    /// [`TRIALS_KEPT`]).
    here: std::collections::VecDeque<f64>,
    /// Windows at `at` since the last trial.
    windows_here: u32,
    /// Which neighbour the next settled trial takes (round robin).
    next_neighbour: usize,
    /// The node-wide window being measured: bytes every run has read since
    /// `window_start`, and when bytes last came.
    window_bytes: u64,
    window_start: Option<std::time::Instant>,
    last_record: Option<std::time::Instant>,
}

impl Default for ReadTuner {
    fn default() -> ReadTuner {
        ReadTuner::new()
    }
}

impl ReadTuner {
    /// A tuner that starts at 1 read at the disk and 1 ahead: two buffers,
    /// one filling while the other is folded. On this VM that shape read
    /// 0.97 of fio's best in a bare reader and 0.91 in a scan, against
    /// 0.76-0.87 for any shape with a third buffer (`docs/benchmarks.md`);
    /// a disk that wants more is found by the trials.
    pub fn new() -> ReadTuner {
        ReadTuner {
            state: Mutex::new(TunerState {
                at: (0, 0),
                pinned: false,
                trial: None,
                pending: None,
                scores: HashMap::new(),
                here: std::collections::VecDeque::new(),
                windows_here: 0,
                next_neighbour: 0,
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

    /// The depths on the tuner's grid (reads at the disk), smallest first.
    pub fn depths() -> &'static [usize] {
        &DEPTHS
    }

    /// The read-aheads on the tuner's grid, smallest first.
    pub fn read_aheads() -> &'static [usize] {
        &AHEADS
    }

    /// The settings the tuner chooses among.
    pub fn grid() -> Vec<ReadSetting> {
        DEPTHS
            .iter()
            .flat_map(|&depth| {
                AHEADS
                    .iter()
                    .map(move |&read_ahead| ReadSetting { depth, read_ahead })
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
        self.lock().current()
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
            let setting = st.current();
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
            return st.current();
        };
        if secs <= 0.0 {
            return st.current();
        }
        let rate = bytes as f64 / secs;
        tracing::debug!(
            depth = setting.depth,
            read_ahead = setting.read_ahead,
            mib_per_s = format!("{:.0}", rate / f64::from(1 << 20)),
            trial = key != st.at,
            "read window"
        );
        if key == st.at {
            st.observed_here(rate);
        } else if st.trial == Some(key) {
            st.trial = None;
            // A trial is scored against the windows either side of it.
            st.pending = st.here.back().map(|&before| (key, rate, before));
        }
        // Else: a window that straddled a move; it says nothing.
        st.current()
    }

    /// The setting in use and the mean rate of its last windows (bytes per
    /// second).
    pub fn best(&self) -> (ReadSetting, Option<f64>) {
        let st = self.lock();
        let (d, b) = st.at;
        let rate =
            (!st.here.is_empty()).then(|| st.here.iter().sum::<f64>() / st.here.len() as f64);
        (
            ReadSetting {
                depth: DEPTHS[d],
                read_ahead: AHEADS[b],
            },
            rate,
        )
    }
}

impl TunerState {
    fn current(&self) -> ReadSetting {
        let (d, b) = self.trial.unwrap_or(self.at);
        ReadSetting {
            depth: DEPTHS[d],
            read_ahead: AHEADS[b],
        }
    }

    /// A window at the setting in use: scores a pending trial, moves if a
    /// neighbour has won, and schedules the next trial.
    fn observed_here(&mut self, rate: f64) {
        if let Some((n, trial_rate, before)) = self.pending.take() {
            let score = trial_rate / ((before + rate) / 2.0);
            let scores = self.scores.entry(n).or_default();
            scores.push(score);
            if scores.wins() {
                tracing::info!(
                    depth = DEPTHS[n.0],
                    read_ahead = AHEADS[n.1],
                    gain = format!("{:.3}", scores.geometric_mean()),
                    from_depth = DEPTHS[self.at.0],
                    from_read_ahead = AHEADS[self.at.1],
                    "read tuner moved"
                );
                self.at = n;
                self.scores.clear();
                self.here.clear();
                self.here.push_back(trial_rate);
                self.windows_here = 0;
                self.next_neighbour = 0;
                return;
            }
        }
        if self.here.len() == TRIALS_KEPT {
            self.here.pop_front();
        }
        self.here.push_back(rate);
        self.windows_here += 1;
        if self.pinned {
            return;
        }
        let neighbours = neighbours(self.at);
        let learning = neighbours.iter().find(|n| {
            // Still to be tried: fewer than two scores, or fewer than all
            // and not yet behind.
            self.scores.get(n).is_none_or(|s| {
                s.recent.len() < 2 || (!s.is_complete() && s.geometric_mean() >= 1.0)
            })
        });
        let (due, next) = match learning {
            Some(&n) => (self.windows_here >= WINDOWS_BEFORE_TRIAL_LEARNING, n),
            None => {
                let n = neighbours[self.next_neighbour % neighbours.len()];
                (self.windows_here + 1 >= TRIAL_EVERY_SETTLED, n)
            }
        };
        if due {
            if learning.is_none() {
                self.next_neighbour += 1;
            }
            self.trial = Some(next);
            self.windows_here = 0;
        }
    }
}

fn index_of(s: ReadSetting) -> Option<At> {
    Some((
        DEPTHS.iter().position(|&d| d == s.depth)?,
        AHEADS.iter().position(|&b| b == s.read_ahead)?,
    ))
}

fn neighbours((d, b): At) -> Vec<At> {
    let mut out = Vec::with_capacity(4);
    if d + 1 < DEPTHS.len() {
        out.push((d + 1, b));
    }
    if d > 0 {
        out.push((d - 1, b));
    }
    if b + 1 < AHEADS.len() {
        out.push((d, b + 1));
    }
    if b > 0 {
        out.push((d, b - 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up device whose rate peaks at depth 4 and 4 reads ahead, with
    /// neighbouring settings further apart than the move threshold.
    fn rate(s: ReadSetting) -> f64 {
        let (d, b) = index_of(s).expect("a setting on the grid");
        1000.0 - (d as f64 - 3.0).powi(2) * 150.0 - (b as f64 - 2.0).powi(2) * 90.0
    }

    /// Multiplicative noise, uniform in 1 ± `spread`, from a fixed seed.
    struct Noise(u64, f64);

    impl Noise {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            let unit = (self.0 >> 11) as f64 / (1u64 << 53) as f64;
            1.0 + self.1 * (2.0 * unit - 1.0)
        }
    }

    /// Runs `windows` windows of 1 s against `device` (bytes per second at
    /// a setting, given the window's number); answers the setting in use
    /// after each.
    fn drive(
        tuner: &ReadTuner,
        windows: usize,
        mut device: impl FnMut(ReadSetting, usize) -> f64,
    ) -> Vec<ReadSetting> {
        let mut s = tuner.current();
        let mut used = Vec::with_capacity(windows);
        for w in 0..windows {
            s = tuner.observe(s, device(s, w) as u64, 1.0);
            used.push(tuner.best().0);
        }
        used
    }

    #[test]
    fn one_lucky_window_does_not_move_the_tuner() {
        let tuner = ReadTuner::new();
        let start = tuner.current();
        let mut lucky = None;
        let mut lucky_windows = 0;
        let used = drive(&tuner, 40, |s, _| {
            if s == start {
                return 1000.0;
            }
            // The first neighbour tried has one lucky window (1.5x), then
            // shows what it is (0.3x); the others are slower than the start.
            if *lucky.get_or_insert(s) == s {
                lucky_windows += 1;
                if lucky_windows == 1 {
                    1500.0
                } else {
                    300.0
                }
            } else {
                900.0
            }
        });
        assert!(used.iter().all(|&s| s == start), "moved: {used:?}");
        assert!(
            lucky_windows >= 2,
            "a neighbour that looked better is tried again"
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
    fn climbs_to_the_best_setting_and_stays_there() {
        let tuner = ReadTuner::new();
        let used = drive(&tuner, 200, |s, _| rate(s) * 1000.0);
        let best = ReadSetting {
            depth: 4,
            read_ahead: 4,
        };
        assert!(used[100..].iter().all(|&s| s == best), "{used:?}");
    }

    /// The disk speeding up (or slowing down) while settings are tried is
    /// not taken for one setting being faster than another: a tuner that
    /// compared windows of different times walked down to depth 32 so.
    #[test]
    fn drift_does_not_move_the_tuner() {
        let tuner = ReadTuner::new();
        let start = tuner.current();
        // Faster by 6% a window: each trial's window is faster than the
        // one before it by more than the move threshold, and slower than
        // the one after.
        let used = drive(&tuner, 200, |_, w| 1e6 * 1.06f64.powi(w as i32));
        assert!(used.iter().all(|&s| s == start), "moved: {used:?}");
    }

    /// Under window-to-window noise of ±20% the tuner still finds a setting
    /// 15% faster than its start, and stays there most of the time.
    #[test]
    fn a_real_gain_is_found_through_noise() {
        let best = ReadSetting {
            depth: 3,
            read_ahead: 2,
        };
        let tuner = ReadTuner::new();
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15, 0.2);
        let used = drive(&tuner, 600, |s, _| {
            let base = if s == best {
                1.15e9
            } else if s == (ReadSetting { depth: 2, ..best }) {
                1e9
            } else {
                0.9e9
            };
            base * noise.next()
        });
        let at_best = used[300..].iter().filter(|&&s| s == best).count();
        assert!(
            at_best >= 240,
            "{at_best} of the last 300 windows at the best"
        );
    }
}
