//! Byte counts as people type them (`64M`) and read them (`64.0 MiB`).

/// The forms a size may take, for errors.
const SIZE_FORMS: &str = "expected a whole number of bytes with an optional unit K, M, G or T \
                          (powers of 1024), as 4096, 64M or 1G";

/// A size that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No digits before the unit.
    #[error("size {0:?}: {SIZE_FORMS}")]
    NoNumber(String),
    /// A unit that is none of K, M, G, T (with or without B or iB).
    #[error("size {text:?}: unknown unit {unit:?}; {SIZE_FORMS}")]
    UnknownUnit {
        /// The size given.
        text: String,
        /// The unit in it.
        unit: String,
    },
    /// More bytes than a u64 holds.
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// Parses a size: a whole number with an optional binary unit.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    if number.is_empty() {
        return Err(SizeError::NoNumber(text.to_string()));
    }
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(SizeError::UnknownUnit {
                text: text.to_string(),
                unit: other.to_string(),
            })
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| SizeError::TooLarge(text.to_string()))
}

/// Formats a byte count with binary units.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("8KiB"), Ok(8192));
        assert_eq!(parse_size("2tb"), Ok(2 << 40));
        assert!(parse_size("1.5G")
            .unwrap_err()
            .to_string()
            .contains("unknown unit \".5G\""));
        assert!(parse_size("M")
            .unwrap_err()
            .to_string()
            .contains("expected a whole number"));
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .to_string()
            .contains("too large"));
    }

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
    }
}
