//! The bounds every parse is held to, and what an exptime means.

/// The bounds a parse is held to. The defaults are memcached 1.6's where it
/// has one; where memcached has none (a multi-key `get` line, which it lets
/// grow without bound) they are ours. Everything a parse allocates is
/// bounded by the bytes it was given and these numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest key, in bytes; memcached's `KEY_MAX_LENGTH`, 250. A
    /// base64 key (meta `b` flag) is held to it before decoding, as
    /// memcached does.
    pub max_key_bytes: usize,
    /// The longest command line, counting the bytes before its `\n` (a
    /// `\r` counts). memcached closes a connection whose buffer holds more
    /// than 2048 bytes with no newline unless it starts with `get ` or
    /// `gets ` (proto_text.c, `try_read_command_ascii`), so 2048 is the
    /// longest line it is sure to take.
    pub max_line_bytes: usize,
    /// The longest `get`/`gets` line, the one kind memcached lets run past
    /// `max_line_bytes` (it grows its read buffer for it, without bound).
    /// Ours is bounded; 64 KiB holds about 4096 keys of 15 bytes. A
    /// longer line is answered `SERVER_ERROR request too long` and the
    /// connection closed.
    pub max_get_line_bytes: usize,
    /// The most keys one `get`, `gets`, `gat` or `gats` may name. memcached
    /// has no such bound; ours keeps the key list a parse builds (32 bytes
    /// a key) under 128 KiB by default.
    pub max_keys_per_get: usize,
    /// The largest data block a storage command may carry, in bytes;
    /// memcached's `item_size_max` (`-I`), 1 MiB by default. memcached
    /// counts its item header and key against that too, so its real bound
    /// on a value is some 50 bytes plus the key lower.
    pub max_value_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 250,
            max_line_bytes: 2048,
            max_get_line_bytes: 64 * 1024,
            max_keys_per_get: 4096,
            max_value_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// The longest line any command may have: a `get` may be longer than
    /// `max_line_bytes` but never shorter.
    pub(crate) fn longest_line_bytes(&self) -> usize {
        self.max_line_bytes.max(self.max_get_line_bytes)
    }
}

/// The largest exptime that is still relative to now: 30 days in seconds
/// (memcached's `REALTIME_MAXDELTA`). A larger one is a unix time.
pub const RELATIVE_EXPTIME_MAX_SECS: i64 = 60 * 60 * 24 * 30;

/// When an item expires, in unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expiry {
    /// It does not (it may still be evicted).
    Never,
    /// It has expired once the clock reads this unix second or later.
    At(u64),
}

impl Expiry {
    /// Whether an item with this expiry is gone at `now_unix_secs`.
    pub fn is_expired(self, now_unix_secs: u64) -> bool {
        match self {
            Expiry::Never => false,
            Expiry::At(at) => at <= now_unix_secs,
        }
    }

    /// The seconds left at `now_unix_secs`, as the meta `t` flag reports
    /// them: `None` for an item that never expires (sent as `-1`).
    pub fn remaining_secs(self, now_unix_secs: u64) -> Option<u64> {
        match self {
            Expiry::Never => None,
            Expiry::At(at) => Some(at.saturating_sub(now_unix_secs)),
        }
    }
}

/// What memcached makes of an exptime (storage commands, `touch`, `gat`,
/// and the meta `T`, `N` and `R` tokens), given the time now:
///
/// - `0`: never expires;
/// - negative: already expired (memcached turns it into a time before it
///   started; here `At(0)`);
/// - 1 to 30 days ([`RELATIVE_EXPTIME_MAX_SECS`]) inclusive: that many
///   seconds from now;
/// - larger: an absolute unix time, already expired if it is not after now.
///
/// `flush_all`'s delay follows the same rule except that a negative delay
/// means now (proto_text.c, `process_flush_all_command`).
pub fn expiry_unix_secs(exptime: i64, now_unix_secs: u64) -> Expiry {
    match u64::try_from(exptime) {
        Ok(0) => Expiry::Never,
        Err(_) => Expiry::At(0),
        Ok(secs) if exptime <= RELATIVE_EXPTIME_MAX_SECS => {
            Expiry::At(now_unix_secs.saturating_add(secs))
        }
        Ok(unix_secs) => Expiry::At(unix_secs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_follows_memcached() {
        let now = 1_700_000_000;
        assert_eq!(expiry_unix_secs(0, now), Expiry::Never);
        assert_eq!(expiry_unix_secs(-1, now), Expiry::At(0));
        assert!(expiry_unix_secs(-1, now).is_expired(now));
        assert_eq!(expiry_unix_secs(10, now), Expiry::At(now + 10));
        // Exactly 30 days is still relative ("may not exceed").
        assert_eq!(
            expiry_unix_secs(RELATIVE_EXPTIME_MAX_SECS, now),
            Expiry::At(now + 2_592_000)
        );
        // One more is a unix time, here long past.
        let past = expiry_unix_secs(RELATIVE_EXPTIME_MAX_SECS + 1, now);
        assert_eq!(past, Expiry::At(2_592_001));
        assert!(past.is_expired(now));
        let future = expiry_unix_secs(1_800_000_000, now);
        assert_eq!(future, Expiry::At(1_800_000_000));
        assert_eq!(future.remaining_secs(now), Some(100_000_000));
        assert_eq!(Expiry::Never.remaining_secs(now), None);
        assert!(!Expiry::Never.is_expired(u64::MAX));
    }
}
