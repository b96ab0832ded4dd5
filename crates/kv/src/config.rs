use quarry_kv_api::{TenantName, DEFAULT_TENANT, MAX_SECRET_BYTES};
use serde::{Deserialize, Serialize};

/// How a tenant's items live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvMode {
    /// In memory, bounded, the items not used lately evicted to make room
    /// (memcached, whose LRU is approximate too).
    #[default]
    Cache,
    /// Every acknowledged change is in the node's log on its device first;
    /// a full tenant refuses stores instead of evicting.
    Durable,
}

/// One tenant, as the `[[kv.tenants]]` tables of a node's configuration
/// give it. Limits are each node's, as memcached's are each server's: keys
/// spread evenly over the members, so a cluster of n holds n times them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant's name (its memcached user name).
    pub name: String,
    /// Its secret (its memcached password).
    pub secret: String,
    /// Cache or durable.
    #[serde(default)]
    pub mode: KvMode,
    /// Most bytes its items may take (keys, values stored once, overheads).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Most items.
    #[serde(default = "unlimited")]
    pub max_keys: u64,
    /// Operations per second (0: no limit).
    #[serde(default)]
    pub ops_per_sec: u64,
    /// Bytes of keys and values per second (0: no limit).
    #[serde(default)]
    pub bytes_per_sec: u64,
    /// How much of a second's worth of operations and bytes the tenant may
    /// spend at once after idling (its token buckets' depth). A bucket a
    /// second deep let a tenant over its limit send a second's worth in
    /// one burst and moved a quiet tenant's p99 by 3.5x
    /// (docs/benchmarks.md, "Fifth run"); a tenth of a second bounds it.
    #[serde(default = "default_burst_ms")]
    pub burst_ms: u64,
    /// Deduplicate values (Multes++); off stores every value as it comes.
    #[serde(default = "yes")]
    pub dedup: bool,
}

/// The default depth of a tenant's token buckets.
pub const DEFAULT_BURST_MS: u64 = 100;

fn default_burst_ms() -> u64 {
    DEFAULT_BURST_MS
}

fn default_max_bytes() -> u64 {
    256 << 20
}
fn unlimited() -> u64 {
    u64::MAX
}
fn yes() -> bool {
    true
}

/// A node's key-value settings (`[kv]` in its configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvConfig {
    /// The tenants. None: one tenant, `default`, that needs no
    /// authentication, with `default_mode` and `default_max_bytes`.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// The mode of the `default` tenant.
    #[serde(default)]
    pub default_mode: KvMode,
    /// The bytes of the `default` tenant on each node.
    #[serde(default = "default_max_bytes")]
    pub default_max_bytes: u64,
    /// Values shorter than this are stored inline, not deduplicated: their
    /// fingerprint and count would cost more than they save (docs/kv.md,
    /// "The dedup threshold").
    #[serde(default = "default_dedup_min")]
    pub dedup_min_bytes: usize,
    /// Longest a request waits for its tenant's rate limit before it is
    /// refused.
    #[serde(default = "default_throttle_wait")]
    pub throttle_wait_ms: u64,
}

fn default_dedup_min() -> usize {
    DEFAULT_DEDUP_MIN_BYTES
}
fn default_throttle_wait() -> u64 {
    1000
}

/// The default dedup threshold (docs/kv.md, "The dedup threshold").
pub const DEFAULT_DEDUP_MIN_BYTES: usize = 256;

impl Default for KvConfig {
    fn default() -> Self {
        Self {
            tenants: Vec::new(),
            default_mode: KvMode::Cache,
            default_max_bytes: default_max_bytes(),
            dedup_min_bytes: DEFAULT_DEDUP_MIN_BYTES,
            throttle_wait_ms: default_throttle_wait(),
        }
    }
}

impl KvConfig {
    /// Refuses a bad tenant list: a bad name, a name twice, the reserved
    /// name, a secret too long or empty, a zero limit.
    pub fn validate(&self) -> Result<(), String> {
        for (i, t) in self.tenants.iter().enumerate() {
            TenantName::new(&t.name).map_err(|e| format!("kv.tenants[{i}]: {e}"))?;
            if t.name == DEFAULT_TENANT {
                return Err(format!(
                    "kv.tenants[{i}]: \"{DEFAULT_TENANT}\" is the name of the open tenant of a \
                     node with no tenants; choose another"
                ));
            }
            if self.tenants[..i].iter().any(|o| o.name == t.name) {
                return Err(format!(
                    "kv.tenants[{i}]: tenant {:?} is listed twice",
                    t.name
                ));
            }
            if t.secret.is_empty() || t.secret.len() > MAX_SECRET_BYTES {
                return Err(format!(
                    "kv.tenants[{i}] ({}): the secret must be 1-{MAX_SECRET_BYTES} bytes",
                    t.name
                ));
            }
            if t.secret
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
            {
                return Err(format!(
                    "kv.tenants[{i}] ({}): the secret may not hold spaces or control characters \
                     (memcached's authentication sends \"user secret\" on one line)",
                    t.name
                ));
            }
            if t.max_bytes == 0 || t.max_keys == 0 {
                return Err(format!(
                    "kv.tenants[{i}] ({}): max_bytes and max_keys must be above 0",
                    t.name
                ));
            }
        }
        if self.default_max_bytes == 0 {
            return Err("kv.default_max_bytes must be above 0".to_string());
        }
        Ok(())
    }
}
