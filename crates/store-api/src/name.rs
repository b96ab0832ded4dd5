//! Bucket names and object keys: validated once, then carried as newtypes.

use std::fmt;

use crate::error::{shown, Result, StoreError};

/// Longest bucket name, in bytes.
pub const MAX_BUCKET_LEN: usize = 63;
/// Longest object key, in bytes (UTF-8).
pub const MAX_KEY_LEN: usize = 1024;
/// Longest `/`-separated segment of a key, in bytes (a file name in the FUSE
/// mount, whose limit is 255).
pub const MAX_KEY_SEGMENT_LEN: usize = 255;

/// A bucket name: 1 to [`MAX_BUCKET_LEN`] bytes of `a-z`, `0-9`, `-`, `_` and
/// `.`, starting with a letter or digit (so it is a valid directory name and
/// a valid host-style label).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketName(String);

impl BucketName {
    /// Checks `name` against the rules.
    pub fn new(name: &str) -> Result<Self> {
        let bad = |reason: &str| StoreError::InvalidBucket {
            name: shown(name),
            reason: reason.to_string(),
        };
        if name.is_empty() {
            return Err(bad("empty"));
        }
        if name.len() > MAX_BUCKET_LEN {
            return Err(bad(&format!(
                "{} bytes long, at most {MAX_BUCKET_LEN} allowed",
                name.len()
            )));
        }
        if let Some((i, c)) = name
            .char_indices()
            .find(|&(_, c)| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '_' | '.'))
        {
            return Err(bad(&format!(
                "character {c:?} at byte {i}; only a-z, 0-9, '-', '_' and '.' are allowed"
            )));
        }
        if !name.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(bad("must start with a letter or digit"));
        }
        Ok(Self(name.to_string()))
    }

    /// Checks raw bytes (UTF-8 first, then the rules).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let name = std::str::from_utf8(bytes).map_err(|e| StoreError::InvalidBucket {
            name: shown(&String::from_utf8_lossy(bytes)),
            reason: format!("not UTF-8 ({e})"),
        })?;
        Self::new(name)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BucketName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object key: 1 to [`MAX_KEY_LEN`] bytes of UTF-8 with no NUL, read as a
/// `/`-separated path whose segments are non-empty, at most
/// [`MAX_KEY_SEGMENT_LEN`] bytes, and neither `.` nor `..` (so every key is
/// also a valid path under a mount point).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey(String);

impl ObjectKey {
    /// Checks `key` against the rules.
    pub fn new(key: &str) -> Result<Self> {
        let bad = |reason: &str| StoreError::InvalidKey {
            key: shown(key),
            reason: reason.to_string(),
        };
        if key.is_empty() {
            return Err(bad("empty"));
        }
        if key.len() > MAX_KEY_LEN {
            return Err(bad(&format!(
                "{} bytes long, at most {MAX_KEY_LEN} allowed",
                key.len()
            )));
        }
        if let Some(i) = key.bytes().position(|b| b == 0) {
            return Err(bad(&format!("NUL byte at byte {i}")));
        }
        for (n, segment) in key.split('/').enumerate() {
            if segment.is_empty() {
                return Err(bad(&format!(
                    "empty path segment {n} (leading, trailing or doubled '/')"
                )));
            }
            if segment == "." || segment == ".." {
                return Err(bad(&format!("path segment {n} is {segment:?}")));
            }
            if segment.len() > MAX_KEY_SEGMENT_LEN {
                return Err(bad(&format!(
                    "path segment {n} is {} bytes long, at most {MAX_KEY_SEGMENT_LEN} allowed",
                    segment.len()
                )));
            }
        }
        Ok(Self(key.to_string()))
    }

    /// Checks raw bytes (UTF-8 first, then the rules).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let key = std::str::from_utf8(bytes).map_err(|e| StoreError::InvalidKey {
            key: shown(&String::from_utf8_lossy(bytes)),
            reason: format!("not UTF-8 ({e})"),
        })?;
        Self::new(key)
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_rules() {
        for ok in ["a", "logs", "my-bucket.v2_x", "0abc", &"a".repeat(63)] {
            BucketName::new(ok).unwrap();
        }
        let cases = [
            ("", "empty"),
            ("Upper", "'U'"),
            ("-x", "start with a letter"),
            (".", "start with a letter"),
            ("a/b", "'/'"),
            ("a\0b", "'\\0'"),
            ("é", "'é'"),
        ];
        for (name, want) in cases {
            let e = BucketName::new(name).unwrap_err().to_string();
            assert!(e.contains(want), "{name:?}: {e}");
            assert!(e.contains("invalid bucket name"), "{e}");
        }
        let long = "a".repeat(64);
        let e = BucketName::new(&long).unwrap_err().to_string();
        assert!(e.contains("64 bytes long, at most 63"), "{e}");
        let e = BucketName::from_bytes(&[b'a', 0xff])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn key_rules() {
        for ok in [
            "a",
            "dir/file.txt",
            "ünïcødé/файл",
            "a b/c\td",
            &"k".repeat(255),
        ] {
            ObjectKey::new(ok).unwrap();
        }
        let cases = [
            ("", "empty"),
            ("a\0b", "NUL byte at byte 1"),
            ("/abs", "empty path segment 0"),
            ("dir/", "empty path segment 1"),
            ("a//b", "empty path segment 1"),
            ("a/../b", "path segment 1 is \"..\""),
            (".", "path segment 0 is \".\""),
        ];
        for (key, want) in cases {
            let e = ObjectKey::new(key).unwrap_err().to_string();
            assert!(e.contains(want), "{key:?}: {e}");
            assert!(e.contains("invalid object key"), "{e}");
        }
        let e = ObjectKey::new(&"k".repeat(256)).unwrap_err().to_string();
        assert!(e.contains("256 bytes long, at most 255"), "{e}");
        let long = vec!["abcdefgh"; 200].join("/");
        let e = ObjectKey::new(&long).unwrap_err().to_string();
        assert!(e.contains("at most 1024"), "{e}");
        assert!(e.contains('…'), "long keys are cut in messages: {e}");
        let e = ObjectKey::from_bytes(b"a\xc3").unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }
}
