//! Dates as people read them: ISO 8601 in local time with the offset from
//! UTC, for every command that prints one (`--json` keeps the number).

/// `unix_ms` as ISO 8601 in this machine's local time, with milliseconds
/// and the offset (`2026-11-26T14:03:11.076+01:00`). The zone is `TZ`'s,
/// else /etc/localtime's, as glibc's `localtime_r` reads them; UTC if it
/// cannot tell.
pub fn local_time_text(unix_ms: u64) -> String {
    iso8601_text(unix_ms, local_offset_secs(unix_ms))
}

/// The local zone's offset from UTC at `unix_ms`, in seconds east.
fn local_offset_secs(unix_ms: u64) -> i64 {
    let Ok(secs) = libc::time_t::try_from(unix_ms / 1000) else {
        return 0;
    };
    // SAFETY: localtime_r writes only into `tm`, which lives on this stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let filled = unsafe { libc::localtime_r(&secs, &mut tm) };
    if filled.is_null() {
        0
    } else {
        tm.tm_gmtoff
    }
}

/// `unix_ms` as ISO 8601 at `offset_secs` east of UTC (proleptic
/// Gregorian, Howard Hinnant's days-to-civil).
pub fn iso8601_text(unix_ms: u64, offset_secs: i64) -> String {
    let local_ms = i128::from(unix_ms) + i128::from(offset_secs) * 1000;
    let (secs, ms) = (local_ms.div_euclid(1000) as i64, local_ms.rem_euclid(1000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let sign = if offset_secs < 0 { '-' } else { '+' };
    let offset_min = offset_secs.unsigned_abs() / 60;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}{sign}{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        offset_min / 60,
        offset_min % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_print_as_iso_8601_at_an_offset() {
        assert_eq!(iso8601_text(0, 0), "1970-01-01T00:00:00.000+00:00");
        assert_eq!(
            iso8601_text(951_782_400_000, 0),
            "2000-02-29T00:00:00.000+00:00"
        );
        assert_eq!(
            iso8601_text(1_795_699_911_076, 0),
            "2026-11-26T13:31:51.076+00:00"
        );
        // East of UTC, across midnight, and a half-hour zone.
        assert_eq!(
            iso8601_text(1_700_000_000_123, 5 * 3600 + 1800),
            "2023-11-15T03:43:20.123+05:30"
        );
        // West of UTC, back across a year's end.
        assert_eq!(
            iso8601_text(1_704_067_200_000, -8 * 3600),
            "2023-12-31T16:00:00.000-08:00"
        );
        assert_eq!(iso8601_text(0, -3600), "1969-12-31T23:00:00.000-01:00");
    }
}
