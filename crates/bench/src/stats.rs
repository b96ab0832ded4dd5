//! Latency statistics for the demo and the benchmarks.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Latencies recorded in nanoseconds, up to 60 s, 3 significant digits.
pub struct LatencyStats {
    histogram: Histogram<u64>,
}

impl Default for LatencyStats {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyStats {
    /// An empty record.
    pub fn new() -> Self {
        let histogram = match Histogram::new_with_bounds(1, 60_000_000_000, 3) {
            Ok(h) => h,
            // The bounds are constants known to be valid.
            Err(e) => unreachable!("histogram bounds: {e}"),
        };
        LatencyStats { histogram }
    }

    /// Records one latency (clamped into the histogram's range).
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos())
            .unwrap_or(u64::MAX)
            .clamp(1, 60_000_000_000);
        self.histogram.saturating_record(ns);
    }

    /// Adds another record's samples to this one.
    pub fn merge(&mut self, other: &LatencyStats) {
        // Both have the same bounds, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Mean in microseconds.
    pub fn mean_us(&self) -> f64 {
        self.histogram.mean() / 1e3
    }

    /// Quantile (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.histogram.value_at_quantile(q) as f64 / 1e3
    }
}
