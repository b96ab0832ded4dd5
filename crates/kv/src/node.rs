//! One node's key-value service: its tenants, their credentials and rate
//! limits, their tables, and the durable tenants' log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_kv_api::{
    now_unix_secs, FailKind, KvAnswer, KvCall, KvError, KvOp, KvReply, KvRequest, TenantName,
    DEFAULT_TENANT, MAX_ANSWER_BYTES,
};
use quarry_store::{Batch, OwnedRecords, Table, TableOwner, TableStore};

use crate::config::{KvConfig, KvMode, TenantConfig, DEFAULT_BURST_MS};
use crate::records::{add_changes, copied_records, decode_item, tenant_prefix, value_fp};
use crate::table::{fingerprint, Change, Changes, Fp, TableLimits, TenantTable};

/// Items an expiry sweep looks at per tenant and round.
const SWEEP_ITEMS: usize = 4096;

/// Records read per step when a durable tenant is loaded at open.
const LOAD_PAGE: usize = 4096;

/// Why a node's key-value service did not open.
#[derive(Debug, thiserror::Error)]
pub enum KvOpenError {
    /// The configuration is refused.
    #[error("invalid key-value configuration: {0}")]
    Config(String),
    /// A durable tenant's records could not be read back.
    #[error("durable key-value tenant {tenant}: {reason}")]
    Load {
        /// The tenant.
        tenant: String,
        /// What went wrong.
        reason: String,
    },
}

/// A token bucket: `rate` a second, `depth` seconds' worth at most.
#[derive(Debug)]
struct Bucket {
    rate_per_sec: f64,
    most_tokens: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate_per_sec: u64, depth: Duration) -> Self {
        // At least one token, so a limit below one per depth still passes
        // single requests.
        let most_tokens = (rate_per_sec as f64 * depth.as_secs_f64()).max(1.0);
        Self {
            rate_per_sec: rate_per_sec as f64,
            most_tokens,
            tokens: most_tokens,
            at: Instant::now(),
        }
    }

    /// How long a request of `n` must wait for its tokens, refilled to now.
    fn wait_for(&mut self, n: f64, now: Instant) -> Duration {
        if self.rate_per_sec <= 0.0 {
            return Duration::ZERO;
        }
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate_per_sec).min(self.most_tokens);
        self.at = now;
        let deficit = n - self.tokens;
        if deficit <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(deficit / self.rate_per_sec)
        }
    }
}

struct Tenant {
    name: TenantName,
    /// Values of at least this many bytes are deduplicated.
    dedup_min_bytes: usize,
    prefix: Vec<u8>,
    secret: Vec<u8>,
    mode: KvMode,
    table: Mutex<TenantTable>,
    /// The table's bytes as of its last change (read without its lock by
    /// the device room check).
    used_bytes: AtomicU64,
    /// Operations and bytes per second on this node.
    limits: Mutex<(Bucket, Bucket)>,
    /// Whether either bucket has a rate: an unlimited tenant's calls skip
    /// the buckets' lock.
    limited: bool,
    throttled: AtomicU64,
    refused: AtomicU64,
}

impl Tenant {
    fn table(&self) -> MutexGuard<'_, TenantTable> {
        // A panic under the lock (a broken count) leaves the table as it
        // was at the panic; serving on would spread the damage.
        self.table
            .lock()
            .unwrap_or_else(|p| panic!("tenant {}'s table lock was poisoned: {p}", self.name))
    }

    /// Takes `ops` operations and `bytes` bytes from the tenant's buckets;
    /// how long to wait first, or None if that is beyond `max_wait`.
    fn throttle(&self, ops: u64, bytes: u64, max_wait: Duration) -> Option<Duration> {
        if !self.limited {
            return Some(Duration::ZERO);
        }
        let mut b = self
            .limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let wait =
            b.0.wait_for(ops as f64, now)
                .max(b.1.wait_for(bytes as f64, now));
        if wait > max_wait {
            return None;
        }
        b.0.tokens -= ops as f64;
        b.1.tokens -= bytes as f64;
        Some(wait)
    }
}

/// The durable tenants as the keepers of their records: their tables hold
/// every record the log does, so the node's tables keep no second copy
/// ([`TableStore::hand_over`]) and a snapshot copies them from here.
struct DurableRecords {
    /// By name: the order their locks are taken in.
    tenants: Vec<Arc<Tenant>>,
}

impl TableOwner for DurableRecords {
    fn claims(&self) -> (Vec<Table>, Vec<Vec<u8>>) {
        let prefixes = self.tenants.iter().map(|t| t.prefix.clone()).collect();
        (vec![Table::KvItems, Table::KvValues], prefixes)
    }

    fn capture(&self, drain: &mut dyn FnMut()) -> OwnedRecords {
        // Every durable change is submitted under its tenant's lock, so
        // with all of them held no batch is on its way but those `drain`
        // takes. The copies share the values' bytes; they are encoded
        // after the locks are let go.
        let copies: Vec<_> = {
            let tables: Vec<_> = self.tenants.iter().map(|t| t.table()).collect();
            drain();
            self.tenants
                .iter()
                .zip(&tables)
                .map(|(t, table)| (t.prefix.clone(), table.copy_records()))
                .collect()
        };
        Box::new(
            copies
                .into_iter()
                .flat_map(|(prefix, copy)| copied_records(prefix, copy)),
        )
    }
}

/// Compares secrets in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn refused(kind: FailKind, message: impl Into<String>) -> KvReply {
    KvReply::Refused {
        kind,
        message: message.into(),
    }
}

/// One node's key-value service over the node's tables `T` (where durable
/// tenants' records live).
pub struct KvNode<T> {
    tenants: HashMap<String, Arc<Tenant>>,
    /// No tenants configured: `default` needs no secret.
    open: bool,
    tables: Option<Arc<T>>,
    /// Some tenant is durable: its changes go to `tables`.
    durable: bool,
    /// A commit of durable changes failed: memory may then hold changes
    /// the tables do not, so the durable tenants refuse everything until a
    /// restart reloads them from what is committed.
    log_failed: AtomicBool,
    cas: AtomicU64,
    throttle_wait: Duration,
    room: Option<Room>,
}

/// Whether the device can take durable changes of `growth` more bytes
/// (their log records, and the snapshot a later compaction writes) beside
/// the durable tenants' `held` bytes: `room(growth, held)`.
pub type Room = Arc<dyn Fn(u64, u64) -> bool + Send + Sync>;

fn tenant_of(t: &TenantConfig, dedup_min_bytes: usize) -> Result<Tenant, String> {
    let name = TenantName::new(&t.name).map_err(|e| e.to_string())?;
    let limits = TableLimits {
        max_bytes: t.max_bytes,
        max_keys: t.max_keys,
        evict: t.mode == KvMode::Cache,
        dedup_min_bytes: if t.dedup { dedup_min_bytes } else { usize::MAX },
    };
    Ok(Tenant {
        dedup_min_bytes: limits.dedup_min_bytes,
        prefix: tenant_prefix(&name),
        name,
        secret: t.secret.as_bytes().to_vec(),
        mode: t.mode,
        table: Mutex::new(TenantTable::new(limits)),
        used_bytes: AtomicU64::new(0),
        limits: Mutex::new({
            let depth = Duration::from_millis(t.burst_ms);
            (
                Bucket::new(t.ops_per_sec, depth),
                Bucket::new(t.bytes_per_sec, depth),
            )
        }),
        limited: t.ops_per_sec > 0 || t.bytes_per_sec > 0,
        throttled: AtomicU64::new(0),
        refused: AtomicU64::new(0),
    })
}

impl<T: TableStore> KvNode<T> {
    /// Opens a node's service; durable tenants are loaded from `tables`
    /// (required when any tenant is durable).
    pub async fn open(config: &KvConfig, tables: Option<Arc<T>>) -> Result<Self, KvOpenError> {
        config.validate().map_err(KvOpenError::Config)?;
        let open = config.tenants.is_empty();
        let list = if open {
            vec![TenantConfig {
                name: DEFAULT_TENANT.to_string(),
                secret: String::new(),
                mode: config.default_mode,
                max_bytes: config.default_max_bytes,
                max_keys: u64::MAX,
                ops_per_sec: 0,
                bytes_per_sec: 0,
                burst_ms: DEFAULT_BURST_MS,
                dedup: true,
            }]
        } else {
            config.tenants.clone()
        };
        let mut tenants = HashMap::new();
        for t in &list {
            let tenant = tenant_of(t, config.dedup_min_bytes).map_err(KvOpenError::Config)?;
            tenants.insert(t.name.clone(), Arc::new(tenant));
        }
        let durable = list.iter().any(|t| t.mode == KvMode::Durable);
        if durable && tables.is_none() {
            return Err(KvOpenError::Config(
                "a durable tenant needs managed storage (storage mode \"managed\")".to_string(),
            ));
        }
        let mut max_cas = 0;
        if let Some(tables) = &tables {
            let mut owners: Vec<Arc<Tenant>> = tenants
                .values()
                .filter(|t| t.mode == KvMode::Durable)
                .cloned()
                .collect();
            owners.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
            for t in &owners {
                max_cas = max_cas.max(load(tables, t).await?);
            }
            if !owners.is_empty() {
                tables
                    .hand_over(Arc::new(DurableRecords { tenants: owners }))
                    .await
                    .map_err(|e| KvOpenError::Load {
                        tenant: "(all durable tenants)".to_string(),
                        reason: format!("handing their records over: {e}"),
                    })?;
            }
        }
        Ok(Self {
            tenants,
            open,
            tables,
            durable,
            log_failed: AtomicBool::new(false),
            cas: AtomicU64::new(max_cas + 1),
            throttle_wait: Duration::from_millis(config.throttle_wait_ms),
            room: None,
        })
    }

    /// Checks the device's room before durable changes: a store that would
    /// not fit is answered "out of memory" (memcached's answer) before
    /// anything changes, so the log never fails for want of space and
    /// deletes still free it.
    pub fn with_room(mut self, room: Room) -> Self {
        self.room = Some(room);
        self
    }

    /// Whether callers must name a configured tenant and its secret.
    pub fn requires_auth(&self) -> bool {
        !self.open
    }

    /// Checks credentials; the tenant's name when they are right.
    pub fn authenticate(&self, tenant: &str, secret: &[u8]) -> Result<TenantName, KvError> {
        self.tenant(tenant, secret).map(|t| t.name.clone())
    }

    fn tenant(&self, name: &str, secret: &[u8]) -> Result<&Arc<Tenant>, KvError> {
        match self.tenants.get(name) {
            Some(t) if self.open || same_secret(&t.secret, secret) => Ok(t),
            _ => Err(KvError::Denied(name.to_string())),
        }
    }

    /// Serves one encoded [`KvCall`]; the encoded [`KvReply`].
    pub async fn serve_call(&self, body: Bytes) -> Bytes {
        match KvCall::decode(&body) {
            Ok(call) => self.call(call).await.encode(),
            Err(e) => refused(FailKind::Internal, e.to_string()).encode(),
        }
    }

    /// Serves one call.
    pub async fn call(&self, call: KvCall) -> KvReply {
        // Borrowed, not cloned: every call of every connection would bump
        // one shared count, a cache line the event-loop threads pass back
        // and forth.
        let tenant: &Tenant = match self.tenant(call.tenant.as_str(), &call.secret) {
            Ok(t) => t,
            Err(e) => return refused(FailKind::Denied, e.to_string()),
        };
        match call.request {
            KvRequest::Ops(ops) => {
                let bytes: u64 = ops.iter().map(|o| o.wire_bytes() as u64).sum();
                match tenant.throttle(ops.len() as u64, bytes, self.throttle_wait) {
                    None => {
                        tenant.refused.fetch_add(1, Ordering::Relaxed);
                        return refused(
                            FailKind::Throttled,
                            format!(
                                "tenant {} is over its rate limit for longer than {} ms",
                                tenant.name,
                                self.throttle_wait.as_millis()
                            ),
                        );
                    }
                    Some(wait) if !wait.is_zero() => {
                        tenant.throttled.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(wait).await;
                    }
                    Some(_) => {}
                }
                let now = now_unix_secs();
                let stores = ops
                    .iter()
                    .any(|op| matches!(op, KvOp::Store { .. } | KvOp::Arith { .. }));
                let full = stores
                    && tenant.mode == KvMode::Durable
                    && self
                        .room
                        .as_ref()
                        .is_some_and(|room| !room(bytes, self.durable_bytes()));
                // Fingerprints before the lock (see `fingerprint`); a call
                // without stores (a batch of gets) allocates none.
                let hints: Vec<Option<Fp>> = if stores {
                    ops.iter()
                        .map(|op| match op {
                            KvOp::Store { value, .. } if value.len() >= tenant.dedup_min_bytes => {
                                Some(fingerprint(value))
                            }
                            _ => None,
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let run = |table: &mut TenantTable, changes: &mut Changes| {
                    let mut next_cas = || self.cas.fetch_add(1, Ordering::Relaxed);
                    let mut answers = Vec::with_capacity(ops.len());
                    let mut reply_bytes = 0;
                    for (i, op) in ops.into_iter().enumerate() {
                        let hint = hints.get(i).copied().flatten();
                        // The reply must fit a frame: stop before an
                        // operation whose answer might not fit, and let
                        // the caller send the rest again.
                        let most = KvAnswer::most_bytes_for(&op);
                        if !answers.is_empty() && reply_bytes + most > MAX_ANSWER_BYTES {
                            break;
                        }
                        let answer = match op {
                            KvOp::Store { .. } | KvOp::Arith { .. } if full => KvAnswer::Failed {
                                kind: FailKind::OutOfMemory,
                                message: "out of memory storing object: the node's device is full"
                                    .to_string(),
                            },
                            op => table.apply(op, hint, now, &mut next_cas, changes),
                        };
                        reply_bytes += answer.wire_bytes();
                        answers.push(answer);
                    }
                    answers
                };
                match self.change(tenant, run).await {
                    Ok(answers) => KvReply::Answers(answers),
                    Err(message) => refused(FailKind::Internal, message),
                }
            }
            KvRequest::Stats => KvReply::Stats(self.stats(tenant)),
            KvRequest::FlushAll { at } => {
                let now = now_unix_secs();
                match self
                    .change(tenant, |table, changes| table.flush(at, now, changes))
                    .await
                {
                    Ok(()) => KvReply::Flushed,
                    Err(message) => refused(FailKind::Internal, message),
                }
            }
        }
    }

    /// Runs `f` on the tenant's table; for a durable tenant, its changes
    /// are committed to the tables before the answer, and a call that
    /// changed nothing waits for the changes it may have read.
    async fn change<R>(
        &self,
        tenant: &Tenant,
        f: impl FnOnce(&mut TenantTable, &mut Changes) -> R,
    ) -> Result<R, String> {
        let tables = match (&self.tables, tenant.mode) {
            (Some(tables), KvMode::Durable) if self.durable => tables,
            _ => return Ok(f(&mut tenant.table(), &mut Changes::dropped())),
        };
        let mut changes = Changes::kept();
        if self.log_failed.load(Ordering::Acquire) {
            return Err(format!(
                "the key-value log of tenant {} failed earlier; restart the node to reload what \
                 is committed",
                tenant.name
            ));
        }
        tables
            .room()
            .await
            .map_err(|e| format!("the key-value log: {e}"))?;
        // The batch is handed in under the table's lock, so the tables'
        // order is memory's; the wait is outside it.
        let (out, pending) = {
            let mut table = tenant.table();
            let out = f(&mut table, &mut changes);
            tenant
                .used_bytes
                .store(table.used_bytes(), Ordering::Relaxed);
            if changes.is_empty() {
                (out, None)
            } else {
                let mut batch = Batch::new();
                add_changes(&mut batch, &tenant.prefix, changes.into_list());
                (out, Some(tables.submit(batch)))
            }
        };
        let committed = match pending {
            Some(commit) => commit.await,
            None => tables.settled().await,
        };
        committed.map(|()| out).map_err(|e| {
            self.log_failed.store(true, Ordering::Release);
            format!("the key-value log could not commit: {e}")
        })
    }

    /// The durable tenants' bytes as of their last changes.
    fn durable_bytes(&self) -> u64 {
        self.tenants
            .values()
            .filter(|t| t.mode == KvMode::Durable)
            .map(|t| t.used_bytes.load(Ordering::Relaxed))
            .sum()
    }

    fn stats(&self, tenant: &Tenant) -> Vec<(String, u64)> {
        let table = tenant.table();
        let c = table.counters;
        let limits = table.limits();
        let mut out: Vec<(String, u64)> = [
            ("cmd_get", c.cmd_get),
            ("cmd_set", c.cmd_set),
            ("cmd_touch", c.cmd_touch),
            ("get_hits", c.get_hits),
            ("get_misses", c.get_misses),
            ("get_expired", c.get_expired),
            ("get_flushed", c.get_flushed),
            ("delete_misses", c.delete_misses),
            ("delete_hits", c.delete_hits),
            ("incr_misses", c.incr_misses),
            ("incr_hits", c.incr_hits),
            ("decr_misses", c.decr_misses),
            ("decr_hits", c.decr_hits),
            ("cas_misses", c.cas_misses),
            ("cas_hits", c.cas_hits),
            ("cas_badval", c.cas_badval),
            ("touch_hits", c.touch_hits),
            ("touch_misses", c.touch_misses),
            ("evictions", c.evictions),
            ("reclaimed", c.reclaimed),
            ("total_items", c.total_items),
            ("curr_items", table.len() as u64),
            ("bytes", table.used_bytes()),
            ("limit_maxbytes", limits.max_bytes),
            ("limit_maxkeys", limits.max_keys),
            ("logical_bytes", table.logical_bytes()),
            ("stored_bytes", table.stored_bytes()),
            ("dedup_values", table.shared_values() as u64),
            ("dedup_hits", c.dedup_hits),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        out.push(("throttled".into(), tenant.throttled.load(Ordering::Relaxed)));
        out.push((
            "throttle_refused".into(),
            tenant.refused.load(Ordering::Relaxed),
        ));
        out.push(("durable".into(), u64::from(tenant.mode == KvMode::Durable)));
        out
    }

    /// Removes expired and flushed items (up to a bound per tenant); the
    /// node runs it every second so expiry frees memory nobody reads again.
    pub async fn sweep(&self) {
        let now = now_unix_secs();
        for tenant in self.tenants.values() {
            let _ = self
                .change(tenant, |table, changes| {
                    table.sweep(now, SWEEP_ITEMS, changes);
                })
                .await;
        }
    }

    /// Checks every tenant's counts against its items (tests).
    pub fn audit(&self) -> Result<(), String> {
        for t in self.tenants.values() {
            t.table()
                .audit()
                .map_err(|e| format!("tenant {}: {e}", t.name))?;
        }
        Ok(())
    }

    /// The tables durable tenants live in.
    pub fn tables(&self) -> Option<&Arc<T>> {
        self.tables.as_ref()
    }
}

/// Loads a durable tenant's values, then its items, from `tables`; the
/// largest CAS value found.
async fn load<T: TableStore>(tables: &T, tenant: &Tenant) -> Result<u64, KvOpenError> {
    let fail = |reason: String| KvOpenError::Load {
        tenant: tenant.name.to_string(),
        reason,
    };
    let mut table = TenantTable::new(tenant.table().limits());
    for which in [Table::KvValues, Table::KvItems] {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = tables
                .scan(which, &tenant.prefix, after.as_deref(), LOAD_PAGE)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            for (key, record) in page {
                if which == Table::KvValues {
                    let fp = value_fp(&tenant.prefix, &key)
                        .ok_or_else(|| fail("a value record with a bad key".to_string()))?;
                    table.restore_value(fp, record).map_err(fail)?;
                } else {
                    let entry = decode_item(&record).map_err(fail)?;
                    let item_key = Bytes::copy_from_slice(&key[tenant.prefix.len()..]);
                    table.restore(item_key, entry).map_err(fail)?;
                }
            }
        }
    }
    let unreferenced = table.drop_unreferenced();
    if !unreferenced.is_empty() {
        tracing::warn!(
            tenant = %tenant.name,
            values = unreferenced.len(),
            "dropping deduplicated values no item names"
        );
        let mut batch = Batch::new();
        let changes = unreferenced.into_iter().map(Change::DeleteValue).collect();
        add_changes(&mut batch, &tenant.prefix, changes);
        tables
            .commit(batch)
            .await
            .map_err(|e| fail(e.to_string()))?;
    }
    let max_cas = table.max_cas();
    tenant
        .used_bytes
        .store(table.used_bytes(), Ordering::Relaxed);
    *tenant.table() = table;
    Ok(max_cas)
}
