//! The arithmetic every benchmark reports with.

/// Bytes in a MiB, as the rates are reported.
pub(crate) const MIB: f64 = (1u64 << 20) as f64;

/// The median of `values` (the upper one of an even count; 0 for none),
/// sorting them in place.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// A rate in MiB/s; a run too short to time counts as a nanosecond.
pub(crate) fn mib_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / MIB / seconds.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_rates() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(mib_per_s(3 << 20, 2.0), 1.5);
        assert!(mib_per_s(1, 0.0).is_finite());
    }
}
