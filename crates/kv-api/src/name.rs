use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::{KvError, Result};

/// Longest key: memcached's 250 bytes, so every key a memcached client can
/// send is a key here and the other way round.
pub const MAX_KEY_BYTES: usize = 250;

/// Longest tenant name.
pub const MAX_TENANT_BYTES: usize = 64;

/// Longest tenant secret.
pub const MAX_SECRET_BYTES: usize = 256;

/// The tenant every node serves when no tenants are configured.
pub const DEFAULT_TENANT: &str = "default";

/// A tenant: 1-64 bytes of `A-Z a-z 0-9 _ - .`, so it is a user name
/// memcached's ASCII authentication can carry and a label in logs and
/// `stats` as it is.
///
/// Shared, not copied: every call carries its tenant's name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantName(Arc<str>);

impl TenantName {
    /// Checks `name` against the rules.
    pub fn new(name: &str) -> Result<Self> {
        let refuse = |reason| KvError::InvalidTenant {
            name: name.chars().take(80).collect(),
            reason,
        };
        if name.is_empty() {
            return Err(refuse("empty"));
        }
        if name.len() > MAX_TENANT_BYTES {
            return Err(refuse("longer than 64 bytes"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(refuse("only A-Z a-z 0-9 _ - . are allowed"));
        }
        Ok(Self(Arc::from(name)))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TenantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Checks a key: 1-250 bytes. Any bytes are allowed through the Rust and
/// Python clients; the memcached face refuses spaces and control characters
/// itself, as memcached does.
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(KvError::InvalidKey("an empty key".to_string()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(KvError::InvalidKey(format!(
            "a key of {} bytes; the limit is {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

/// The 64-bit placement point of `tenant`'s `key`: the first 8 bytes of
/// SHA-256("quarry-kv\0", tenant length, tenant, key). The tenant is part of
/// it so two tenants' equal keys land independently.
pub fn key_point(tenant: &TenantName, key: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(b"quarry-kv\0");
    h.update([tenant.0.len() as u8]);
    h.update(tenant.0.as_bytes());
    h.update(key);
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// A key as the calls carry it.
pub type Key = Bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_follow_the_rules() {
        assert!(TenantName::new("team-a_1.x").is_ok());
        for bad in ["", "a b", "ü", &"x".repeat(65)] {
            let e = TenantName::new(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid tenant name"), "{e}");
        }
    }

    #[test]
    fn keys_are_one_to_250_bytes() {
        assert!(check_key(&[0u8; 250]).is_ok());
        assert!(check_key(b"").unwrap_err().to_string().contains("empty"));
        assert!(check_key(&[1u8; 251])
            .unwrap_err()
            .to_string()
            .contains("251 bytes"));
    }

    #[test]
    fn the_tenant_moves_the_point() {
        let a = TenantName::new("a").unwrap();
        let b = TenantName::new("b").unwrap();
        assert_ne!(key_point(&a, b"k"), key_point(&b, b"k"));
        assert_eq!(key_point(&a, b"k"), key_point(&a, b"k"));
    }
}
