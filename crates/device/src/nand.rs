//! The `nand` backend's timing model: a discrete-event scheduler thread that
//! emulates RFSA's per-bus controllers (§III.C.1, Fig. 4).
//!
//! Each bus has per-chip request FIFOs and a scoreboard (per chip: the stage of
//! its current request and a busy timer). When a bus is free the scheduler
//! grants it, round-robin over chips, to a chip whose next stage needs the bus;
//! short command/address stages win over long data transfers so chips are kept
//! busy. Stages:
//!
//! * read: command (bus, `t_cmd`) -> array read (chip, tR) -> data out (bus,
//!   transfer) -> done
//! * program: command + data in (bus, `t_cmd` + transfer) -> program (chip,
//!   tPROG) -> done
//! * erase: command (bus, `t_cmd`) -> erase (chip, tBERS) -> done
//!
//! Model time is tracked exactly (an event happens at its computed instant, not
//! when the thread noticed it); a request enters the model at the instant it
//! was submitted. Real time only gates when an event may be processed (never
//! before it is due, so later arrivals can still win arbitration).
//!
//! **Timer precision.** The thread sleeps (with `PR_SET_TIMERSLACK` = 1 ns)
//! until [`SPIN_MARGIN`] before the next event and spins the rest of the way:
//! waking a sleeping core costs ~30 us on this VM. The completion of an op is
//! signalled [`EARLY_WAKE`] before its modeled end when the device is nearly
//! idle (few ops in flight), and the caller spins until the exact end, so the
//! ~30 us it takes to wake the caller's thread is hidden and a QD1 read takes
//! the modeled time. Under load the completion is signalled at the end (the
//! caller's threads are awake then, and spinning would waste them).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::{DeviceError, Geometry, Preset};

/// How long before an event the scheduler stops sleeping and spins.
pub const SPIN_MARGIN: Duration = Duration::from_micros(60);
/// How long before its modeled end a lone op's completion is signalled.
pub const EARLY_WAKE: Duration = Duration::from_micros(35);
/// At most this many ops in the device for early completion signals.
const EARLY_WAKE_MAX_INFLIGHT: usize = 2;

/// The modeled times of an emulated NAND array (per chip and per bus).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NandTiming {
    /// Command/address cycle on the bus, ns.
    pub t_cmd_ns: u64,
    /// Array read (tR), smallest, ns.
    pub t_read_min_ns: u64,
    /// Array read (tR), largest, ns.
    pub t_read_max_ns: u64,
    /// Program (tPROG), smallest, ns.
    pub t_prog_min_ns: u64,
    /// Program (tPROG), largest, ns.
    pub t_prog_max_ns: u64,
    /// Block erase (tBERS), ns.
    pub t_erase_ns: u64,
    /// Bytes per second one bus moves.
    pub bus_bytes_per_sec: u64,
    /// Bytes moved on the bus per page (data + spare in use).
    pub transfer_bytes: u64,
    /// Raw bit error rate of a fresh block.
    pub rber_fresh: f64,
    /// Relative growth of the raw bit error rate per erase:
    /// `rber = rber_fresh * (1 + rber_growth_per_erase * erase_count)`.
    pub rber_growth_per_erase: f64,
    /// Fraction of blocks marked bad when the device is first created.
    pub factory_bad_fraction: f64,
}

impl NandTiming {
    /// The timing of a preset, for pages whose bus transfer is
    /// `transfer_bytes` (page data + spare in use).
    ///
    /// * `rfsa` (Micron MLC, RFSA §V-VI, Table II): tR 69-75 us, tPROG
    ///   0.4-2.1 ms, erase 3.5 ms, 200 MB/s per bus (8 KiB + spare in ~43 us),
    ///   2.18 bit errors per fresh page, rising ~10x over 3000 P/E cycles.
    /// * `bluedbm` (Micron SLC, BlueDBM §6-7): tR 27 us, tPROG 200-500 us,
    ///   erase 2 ms, ~25 MB/s per bus (asynchronous interface); SLC bit errors
    ///   an order of magnitude rarer.
    pub fn preset(preset: Preset, transfer_bytes: u64) -> NandTiming {
        let bits = (transfer_bytes * 8) as f64;
        match preset {
            Preset::Rfsa => NandTiming {
                t_cmd_ns: 1_000,
                t_read_min_ns: 69_000,
                t_read_max_ns: 75_000,
                t_prog_min_ns: 400_000,
                t_prog_max_ns: 2_100_000,
                t_erase_ns: 3_500_000,
                bus_bytes_per_sec: 200_000_000,
                transfer_bytes,
                rber_fresh: 2.18 / bits,
                rber_growth_per_erase: 3e-3,
                factory_bad_fraction: 0.005,
            },
            Preset::Bluedbm => NandTiming {
                t_cmd_ns: 1_000,
                t_read_min_ns: 27_000,
                t_read_max_ns: 27_000,
                t_prog_min_ns: 200_000,
                t_prog_max_ns: 500_000,
                t_erase_ns: 2_000_000,
                bus_bytes_per_sec: 25_000_000,
                transfer_bytes,
                rber_fresh: 0.2 / bits,
                rber_growth_per_erase: 1e-4,
                factory_bad_fraction: 0.005,
            },
        }
    }

    /// Every time multiplied by `factor` (and the bus rate divided by it);
    /// tests use small factors to keep the emulated device fast.
    pub fn scaled(&self, factor: f64) -> NandTiming {
        let s = |ns: u64| ((ns as f64) * factor).round().max(0.0) as u64;
        NandTiming {
            t_cmd_ns: s(self.t_cmd_ns),
            t_read_min_ns: s(self.t_read_min_ns),
            t_read_max_ns: s(self.t_read_max_ns),
            t_prog_min_ns: s(self.t_prog_min_ns),
            t_prog_max_ns: s(self.t_prog_max_ns),
            t_erase_ns: s(self.t_erase_ns),
            bus_bytes_per_sec: ((self.bus_bytes_per_sec as f64) / factor.max(1e-9)) as u64,
            ..self.clone()
        }
    }

    /// Checks the timing is usable.
    pub fn validate(&self) -> Result<(), DeviceError> {
        let bad = |reason: String| Err(DeviceError::Config { reason });
        if self.t_read_min_ns > self.t_read_max_ns || self.t_prog_min_ns > self.t_prog_max_ns {
            return bad(format!("nand timing: min above max in {self:?}"));
        }
        if self.bus_bytes_per_sec == 0 {
            return bad("nand timing: bus_bytes_per_sec must be > 0".into());
        }
        if !(0.0..=0.5).contains(&self.factory_bad_fraction) || self.rber_fresh < 0.0 {
            return bad(format!("nand timing: error model out of range in {self:?}"));
        }
        Ok(())
    }

    /// Time to move one page (data + spare) over a bus.
    pub fn transfer_time(&self) -> Duration {
        Duration::from_nanos(
            (u128::from(self.transfer_bytes) * 1_000_000_000
                / u128::from(self.bus_bytes_per_sec.max(1))) as u64,
        )
    }

    /// Modeled device time of a read on an idle device with tR at its mean:
    /// command + tR + data transfer.
    pub fn read_device_time(&self) -> Duration {
        Duration::from_nanos(self.t_cmd_ns + (self.t_read_min_ns + self.t_read_max_ns) / 2)
            + self.transfer_time()
    }

    /// Shortest modeled read on an idle device (command + smallest tR + transfer).
    pub fn read_device_time_min(&self) -> Duration {
        Duration::from_nanos(self.t_cmd_ns + self.t_read_min_ns) + self.transfer_time()
    }

    /// Peak bandwidth of all buses of `geometry`, bytes per second.
    pub fn peak_bus_bandwidth(&self, geometry: &Geometry) -> u64 {
        u64::from(geometry.buses) * self.bus_bytes_per_sec
    }

    /// Raw bit error rate of a block erased `erase_count` times.
    pub fn rber(&self, erase_count: u32) -> f64 {
        self.rber_fresh * (1.0 + self.rber_growth_per_erase * f64::from(erase_count))
    }
}

/// What an op asks of the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Read,
    Program,
    Erase,
}

pub(crate) struct NandOp {
    pub bus: u32,
    pub chip: u32,
    pub kind: OpKind,
    /// The chip's busy time for this op (sampled by the caller).
    pub chip_time: Duration,
    pub arrival: Instant,
    /// Receives the instant the op completes in the model.
    pub reply: oneshot::Sender<Instant>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for the bus for a command (short) stage.
    Cmd,
    /// Waiting for the bus for a data-out stage (long).
    DataOut,
    /// Chip busy until `busy_until`, then the next stage.
    ArrayBusy,
}

struct Current {
    op: NandOp,
    stage: Stage,
    /// Earliest model instant the stage may start / ends.
    ready: Instant,
}

struct Chip {
    queue: VecDeque<NandOp>,
    current: Option<Current>,
    /// When the chip is free for the next op.
    free_at: Instant,
}

struct Bus {
    chips: Vec<Chip>,
    free_at: Instant,
    rr: usize,
}

/// Handle to the scheduler thread.
pub(crate) struct NandScheduler {
    tx: Option<Sender<NandOp>>,
    thread: Option<JoinHandle<()>>,
}

impl NandScheduler {
    pub(crate) fn start(
        geometry: &Geometry,
        timing: &NandTiming,
        inflight: Arc<AtomicUsize>,
    ) -> Result<NandScheduler, DeviceError> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let now = Instant::now();
        let buses = (0..geometry.buses)
            .map(|_| Bus {
                chips: (0..geometry.chips_per_bus)
                    .map(|_| Chip {
                        queue: VecDeque::new(),
                        current: None,
                        free_at: now,
                    })
                    .collect(),
                free_at: now,
                rr: 0,
            })
            .collect();
        let sim = Sim {
            buses,
            t_cmd: Duration::from_nanos(timing.t_cmd_ns),
            xfer: timing.transfer_time(),
            notify: BinaryHeap::new(),
            pending_notify: Vec::new(),
            seq: 0,
            inflight,
        };
        let thread = std::thread::Builder::new()
            .name("quarry-nand-sched".into())
            .spawn(move || sim.run(rx))
            .map_err(|e| DeviceError::Io {
                context: "starting the nand scheduler thread".into(),
                source: e,
            })?;
        Ok(NandScheduler {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    pub(crate) fn submit(&self, op: NandOp) -> Result<(), DeviceError> {
        match &self.tx {
            Some(tx) => tx.send(op).map_err(|_| DeviceError::Closed),
            None => Err(DeviceError::Closed),
        }
    }

    pub(crate) fn stop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NandScheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Sim {
    buses: Vec<Bus>,
    t_cmd: Duration,
    xfer: Duration,
    /// (signal time, seq) -> index into pending_notify
    notify: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    pending_notify: Vec<Option<(oneshot::Sender<Instant>, Instant)>>,
    seq: u64,
    inflight: Arc<AtomicUsize>,
}

fn set_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and touches only this
    // thread's timer slack; it cannot affect memory safety.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

impl Sim {
    fn run(mut self, rx: Receiver<NandOp>) {
        set_timer_slack();
        let mut disconnected = false;
        loop {
            // Take every arrival.
            loop {
                match rx.try_recv() {
                    Ok(op) => self.arrive(op),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        disconnected = true;
                        break;
                    }
                }
            }
            let now = Instant::now();
            self.advance(now);
            let next = self.next_event();
            match next {
                None => {
                    if disconnected {
                        return;
                    }
                    match rx.recv() {
                        Ok(op) => self.arrive(op),
                        Err(_) => return,
                    }
                }
                Some(t) => {
                    let now = Instant::now();
                    if t > now + SPIN_MARGIN && !disconnected {
                        match rx.recv_timeout(t - now - SPIN_MARGIN) {
                            Ok(op) => self.arrive(op),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => disconnected = true,
                        }
                    } else if t > now {
                        // Spin, still accepting arrivals.
                        while Instant::now() < t {
                            if !disconnected {
                                match rx.try_recv() {
                                    Ok(op) => {
                                        self.arrive(op);
                                        break;
                                    }
                                    Err(TryRecvError::Disconnected) => disconnected = true,
                                    Err(TryRecvError::Empty) => {}
                                }
                            }
                            std::hint::spin_loop();
                        }
                    }
                }
            }
        }
    }

    fn arrive(&mut self, op: NandOp) {
        let bus = op.bus as usize;
        let chip = op.chip as usize;
        debug_assert!(bus < self.buses.len() && chip < self.buses[bus].chips.len());
        let Some(c) = self.buses.get_mut(bus).and_then(|b| b.chips.get_mut(chip)) else {
            return; // dropping the reply tells the caller the op failed
        };
        c.queue.push_back(op);
        Self::start_next(c);
    }

    /// Moves the next queued op of an idle chip into its first stage.
    fn start_next(c: &mut Chip) {
        if c.current.is_some() {
            return;
        }
        if let Some(op) = c.queue.pop_front() {
            let ready = op.arrival.max(c.free_at);
            c.current = Some(Current {
                op,
                stage: Stage::Cmd,
                ready,
            });
        }
    }

    /// Earliest instant something can happen.
    fn next_event(&self) -> Option<Instant> {
        let mut next: Option<Instant> = self.notify.peek().map(|Reverse((t, _, _))| *t);
        let mut consider = |t: Instant| {
            next = Some(next.map_or(t, |n: Instant| n.min(t)));
        };
        for bus in &self.buses {
            for c in &bus.chips {
                if let Some(cur) = &c.current {
                    match cur.stage {
                        Stage::ArrayBusy => consider(cur.ready),
                        Stage::Cmd | Stage::DataOut => consider(cur.ready.max(bus.free_at)),
                    }
                }
            }
        }
        next
    }

    /// Processes every event due at or before `now`, in model-time order.
    fn advance(&mut self, now: Instant) {
        loop {
            let Some(t) = self.next_event() else { return };
            if t > now {
                return;
            }
            self.step(t);
        }
    }

    /// Processes the events at model instant `t`.
    fn step(&mut self, t: Instant) {
        // 1. Completion signals due.
        while let Some(Reverse((when, _, idx))) = self.notify.peek().copied() {
            if when > t {
                break;
            }
            self.notify.pop();
            if let Some((reply, end)) = self.pending_notify.get_mut(idx).and_then(Option::take) {
                let _ = reply.send(end);
            }
        }
        let (t_cmd, xfer) = (self.t_cmd, self.xfer);
        let mut finished: Vec<(oneshot::Sender<Instant>, Instant)> = Vec::new();
        for bus in &mut self.buses {
            // 2. Array-busy timers that expired: next stage or done.
            for c in &mut bus.chips {
                let Some(cur) = &mut c.current else { continue };
                if cur.stage == Stage::ArrayBusy && cur.ready <= t {
                    match cur.op.kind {
                        OpKind::Read => cur.stage = Stage::DataOut,
                        OpKind::Program | OpKind::Erase => {
                            let end = cur.ready;
                            c.free_at = end;
                            if let Some(done) = c.current.take() {
                                finished.push((done.op.reply, end));
                            }
                            Self::start_next(c);
                        }
                    }
                }
            }
            // 3. Bus arbitration at t: commands first, then data, round-robin.
            if bus.free_at <= t {
                let n = bus.chips.len();
                let pick = |want: Stage, chips: &Vec<Chip>, rr: usize| {
                    (0..n).map(|k| (rr + k) % n).find(|&i| {
                        chips[i]
                            .current
                            .as_ref()
                            .is_some_and(|cur| cur.stage == want && cur.ready <= t)
                    })
                };
                let chosen = pick(Stage::Cmd, &bus.chips, bus.rr)
                    .map(|i| (i, Stage::Cmd))
                    .or_else(|| {
                        pick(Stage::DataOut, &bus.chips, bus.rr).map(|i| (i, Stage::DataOut))
                    });
                if let Some((i, stage)) = chosen {
                    bus.rr = (i + 1) % n;
                    let c = &mut bus.chips[i];
                    if let Some(cur) = &mut c.current {
                        match (stage, cur.op.kind) {
                            (Stage::Cmd, OpKind::Program) => {
                                bus.free_at = t + t_cmd + xfer;
                                cur.stage = Stage::ArrayBusy;
                                cur.ready = t + t_cmd + xfer + cur.op.chip_time;
                            }
                            (Stage::Cmd, _) => {
                                bus.free_at = t + t_cmd;
                                cur.stage = Stage::ArrayBusy;
                                cur.ready = t + t_cmd + cur.op.chip_time;
                            }
                            (_, _) => {
                                // Data out: the op ends when the transfer does.
                                let end = t + xfer;
                                bus.free_at = end;
                                c.free_at = end;
                                if let Some(done) = c.current.take() {
                                    finished.push((done.op.reply, end));
                                }
                                Self::start_next(c);
                            }
                        }
                    }
                }
            }
        }
        for (reply, end) in finished {
            self.schedule_notify(reply, end);
        }
    }

    fn schedule_notify(&mut self, reply: oneshot::Sender<Instant>, end: Instant) {
        let lone = self.inflight.load(Ordering::Relaxed) <= EARLY_WAKE_MAX_INFLIGHT;
        let when = if lone {
            end.checked_sub(EARLY_WAKE).unwrap_or(end)
        } else {
            end
        };
        // Reuse a free slot in pending_notify.
        let idx = match self.pending_notify.iter().position(Option::is_none) {
            Some(i) => {
                self.pending_notify[i] = Some((reply, end));
                i
            }
            None => {
                self.pending_notify.push(Some((reply, end)));
                self.pending_notify.len() - 1
            }
        };
        self.seq += 1;
        self.notify.push(Reverse((when, self.seq, idx)));
    }
}

/// Waits (spinning) until `deadline`; used for the last few microseconds of
/// an op whose completion was signalled early.
pub(crate) fn spin_until(deadline: Instant) {
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// A small, fast, seedable PRNG (splitmix64) for the error and timing model.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix(pub u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo + 1)
        }
    }
    /// Poisson-distributed count with mean `lambda` (Knuth; lambda is small).
    pub(crate) fn poisson(&mut self, lambda: f64) -> u32 {
        if lambda <= 0.0 {
            return 0;
        }
        let l = (-lambda.min(500.0)).exp();
        let mut k = 0u32;
        let mut p = 1.0;
        loop {
            p *= self.next_f64();
            if p <= l || k >= 10_000 {
                return k;
            }
            k += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The scheduler's arbitration checked in model time, so the answers do
    //! not depend on how busy the machine running the test is.

    use super::*;

    const T_CMD: Duration = Duration::from_micros(10);
    const T_READ: Duration = Duration::from_micros(500);
    const XFER: Duration = Duration::from_micros(400);

    fn sim(buses: usize, chips_per_bus: usize, start: Instant) -> Sim {
        Sim {
            buses: (0..buses)
                .map(|_| Bus {
                    chips: (0..chips_per_bus)
                        .map(|_| Chip {
                            queue: VecDeque::new(),
                            current: None,
                            free_at: start,
                        })
                        .collect(),
                    free_at: start,
                    rr: 0,
                })
                .collect(),
            t_cmd: T_CMD,
            xfer: XFER,
            notify: BinaryHeap::new(),
            pending_notify: Vec::new(),
            seq: 0,
            inflight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Submits one read per `(bus, chip)` at `arrival`, runs the model a
    /// second past it and returns each read's modeled end, in order.
    fn ends(sim: &mut Sim, reads: &[(u32, u32)], arrival: Instant) -> Vec<Duration> {
        let replies: Vec<_> = reads
            .iter()
            .map(|&(bus, chip)| {
                let (reply, rx) = oneshot::channel();
                sim.arrive(NandOp {
                    bus,
                    chip,
                    kind: OpKind::Read,
                    chip_time: T_READ,
                    arrival,
                    reply,
                });
                rx
            })
            .collect();
        sim.advance(arrival + Duration::from_secs(1));
        replies
            .into_iter()
            .map(|mut rx| match rx.try_recv() {
                Ok(end) => end - arrival,
                Err(e) => panic!("a read never completed in the model: {e}"),
            })
            .collect()
    }

    #[test]
    fn reads_on_separate_buses_overlap_whole() {
        let t0 = Instant::now();
        let mut sim = sim(8, 1, t0);
        let reads: Vec<_> = (0..8).map(|bus| (bus, 0)).collect();
        let alone = T_CMD + T_READ + XFER;
        assert_eq!(ends(&mut sim, &reads, t0), vec![alone; 8]);
    }

    #[test]
    fn reads_on_one_bus_overlap_their_array_reads_and_share_the_transfers() {
        let t0 = Instant::now();
        let mut sim = sim(1, 4, t0);
        let reads: Vec<_> = (0..4).map(|chip| (0, chip)).collect();
        // Commands go out back to back, the array reads overlap, and each
        // transfer waits for the one before it on the bus.
        let want: Vec<_> = (1..=4u32).map(|k| T_CMD + T_READ + XFER * k).collect();
        assert_eq!(ends(&mut sim, &reads, t0), want);
    }

    #[test]
    fn reads_of_one_chip_run_one_after_another() {
        let t0 = Instant::now();
        let mut sim = sim(2, 2, t0);
        let alone = T_CMD + T_READ + XFER;
        let want: Vec<_> = (1..=3u32).map(|k| alone * k).collect();
        assert_eq!(ends(&mut sim, &[(1, 1); 3], t0), want);
    }

    #[test]
    fn a_read_arriving_later_starts_at_its_arrival() {
        let t0 = Instant::now();
        let mut sim = sim(1, 1, t0);
        let later = t0 + Duration::from_millis(3);
        assert_eq!(
            ends(&mut sim, &[(0, 0)], later),
            vec![T_CMD + T_READ + XFER]
        );
    }
}
