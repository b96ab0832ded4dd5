//! One tenant's items on one node, in memory: the index ([`ItemIndex`]: a
//! hash table in use order), the deduplicated values with their exact
//! reference counts (Multes++ Algorithm 1), the accounting, and the
//! memcached semantics of every operation. Persistence is the caller's: each
//! operation reports the record changes it made ([`Change`]).

use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use quarry_kv_api::{Expiry, FailKind, Item, ItemKind, KvAnswer, KvOp, StoreMode, MAX_VALUE_BYTES};
use sha2::{Digest, Sha256};

use crate::index::ItemIndex;

/// What an item costs beside its key and an inline value: the index slot,
/// the use-order links and the entry itself, rounded up.
pub(crate) const ITEM_OVERHEAD_BYTES: u64 = 96;

/// What a deduplicated value costs beside its bytes: its slot in the value
/// table and its count.
pub(crate) const VALUE_OVERHEAD_BYTES: u64 = 64;

/// A value's SHA-256.
pub(crate) type Fp = [u8; 32];

/// One item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub flags: u32,
    pub expiry: Expiry,
    pub cas: u64,
    pub kind: ItemKind,
    /// When it was stored (unix seconds), for a delayed flush_all.
    pub stored_at_secs: u64,
    pub value: Bytes,
    /// The value's fingerprint when it is deduplicated; inline otherwise.
    pub fp: Option<Fp>,
}

/// A deduplicated value and the number of items that hold it.
#[derive(Debug)]
struct Shared {
    value: Bytes,
    refs: u64,
}

/// A copy of a tenant's records ([`TenantTable::copy_records`]).
pub(crate) struct TableCopy {
    /// Every item.
    pub items: Vec<(Bytes, Entry)>,
    /// Every shared value.
    pub values: Vec<(Fp, Bytes)>,
}

/// A record change an operation made, for a durable tenant's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    PutItem(Bytes, Entry),
    DeleteItem(Bytes),
    PutValue(Fp, Bytes),
    DeleteValue(Fp),
}

/// The record changes of one call: kept for a durable tenant's log, not
/// made at all for a cache tenant, which has no log (making them cost a
/// key copy and a value's reference for every set, only to drop them).
#[derive(Debug)]
pub(crate) struct Changes {
    list: Vec<Change>,
    kept: bool,
}

impl Changes {
    /// Changes that are kept, for a durable tenant.
    pub(crate) fn kept() -> Self {
        Changes {
            list: Vec::new(),
            kept: true,
        }
    }

    /// Changes that are not made, for a cache tenant.
    pub(crate) fn dropped() -> Self {
        Changes {
            list: Vec::new(),
            kept: false,
        }
    }

    /// Notes the change `make` makes, if changes are kept.
    fn note(&mut self, make: impl FnOnce() -> Change) {
        if self.kept {
            self.list.push(make());
        }
    }

    /// Whether no change was kept.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The changes kept, in order.
    pub(crate) fn into_list(self) -> Vec<Change> {
        self.list
    }
}

/// The bounds of one tenant's table on one node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableLimits {
    /// Most bytes (keys, values stored once, overheads).
    pub max_bytes: u64,
    /// Most items.
    pub max_keys: u64,
    /// Evict items the CLOCK hand reaches to make room (cache mode) instead
    /// of refusing (durable mode).
    pub evict: bool,
    /// Values of at least this many bytes are deduplicated; `usize::MAX`
    /// turns dedup off.
    pub dedup_min_bytes: usize,
}

/// memcached's counters and the dedup figures, for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub cmd_get: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
    pub cmd_set: u64,
    pub cmd_touch: u64,
    pub touch_hits: u64,
    pub touch_misses: u64,
    pub delete_hits: u64,
    pub delete_misses: u64,
    pub incr_hits: u64,
    pub incr_misses: u64,
    pub decr_hits: u64,
    pub decr_misses: u64,
    pub cas_hits: u64,
    pub cas_misses: u64,
    pub cas_badval: u64,
    pub evictions: u64,
    pub reclaimed: u64,
    pub total_items: u64,
    pub dedup_hits: u64,
}

/// One tenant's items on one node.
pub(crate) struct TenantTable {
    items: ItemIndex,
    /// Hashed with foldhash, not std's SipHash: a set looks a fingerprint
    /// up two to four times, and foldhash is the cheaper of the two while
    /// still seeded per process, so a tenant cannot choose values whose
    /// fingerprints collide in the table.
    values: HashMap<Fp, Shared, foldhash::fast::RandomState>,
    limits: TableLimits,
    /// Bytes counted against `max_bytes`.
    used_bytes: u64,
    /// Sum of the items' value lengths (what clients stored).
    logical_bytes: u64,
    /// Value bytes held: inline values plus each shared value once.
    stored_bytes: u64,
    /// Items stored at or before this time are gone once it has come.
    flushed_before_secs: Option<u64>,
    pub counters: Counters,
}

/// A value's SHA-256. Callers compute it before they take the table's lock
/// where they can ([`TenantTable::apply`]'s `hint`): hashing a large value
/// under the lock would hold every other call of the tenant behind it.
pub(crate) fn fingerprint(value: &[u8]) -> Fp {
    Sha256::digest(value).into()
}

fn item_cost(key: &[u8], entry: &Entry) -> u64 {
    let inline = if entry.fp.is_none() {
        entry.value.len() as u64
    } else {
        0
    };
    ITEM_OVERHEAD_BYTES + key.len() as u64 + inline
}

fn failed(kind: FailKind, message: impl Into<String>) -> KvAnswer {
    KvAnswer::Failed {
        kind,
        message: message.into(),
    }
}

/// memcached's incr/decr: the value must be 1-20 decimal digits.
fn parse_number(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 20 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

impl TenantTable {
    pub(crate) fn new(limits: TableLimits) -> Self {
        Self {
            items: ItemIndex::new(),
            values: HashMap::default(),
            limits,
            used_bytes: 0,
            logical_bytes: 0,
            stored_bytes: 0,
            flushed_before_secs: None,
            counters: Counters::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub(crate) fn logical_bytes(&self) -> u64 {
        self.logical_bytes
    }

    pub(crate) fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    pub(crate) fn shared_values(&self) -> usize {
        self.values.len()
    }

    pub(crate) fn limits(&self) -> TableLimits {
        self.limits
    }

    /// Every (fingerprint, reference count), for checks.
    pub(crate) fn refcounts(&self) -> HashMap<Fp, u64> {
        self.values.iter().map(|(f, s)| (*f, s.refs)).collect()
    }

    /// Whether `entry` is gone at `now`: expired or flushed.
    fn dead(&self, entry: &Entry, now: u64) -> Option<bool> {
        if entry.expiry.passed(now) {
            return Some(false);
        }
        match self.flushed_before_secs {
            Some(t) if t <= now && entry.stored_at_secs <= t => Some(true),
            _ => None,
        }
    }

    /// The live item under `key`, made most recently used; an expired or
    /// flushed one is removed on the way.
    fn lookup(&mut self, key: &Bytes, now: u64, changes: &mut Changes) -> Option<&mut Entry> {
        let dead = self.items.get(key).and_then(|e| self.dead(e, now));
        if let Some(flushed) = dead {
            if flushed {
                self.counters.get_flushed += 1;
            } else {
                self.counters.get_expired += 1;
            }
            self.counters.reclaimed += 1;
            self.remove(key, changes);
            return None;
        }
        self.find_mut(key)
    }

    /// The item under `key`; in cache mode marked as used, for the
    /// eviction hand. A durable table never evicts, so it marks nothing.
    fn find_mut(&mut self, key: &Bytes) -> Option<&mut Entry> {
        self.items.get_mut(key, self.limits.evict)
    }

    /// Removes `key`'s item and lets go of its value.
    pub(crate) fn remove(&mut self, key: &Bytes, changes: &mut Changes) -> Option<Entry> {
        let entry = self.items.remove(key)?;
        self.forget(key, &entry, changes);
        changes.note(|| Change::DeleteItem(key.clone()));
        Some(entry)
    }

    /// Counts `entry`, held under `key`, in the byte figures.
    fn count(&mut self, key: &[u8], entry: &Entry) {
        self.used_bytes += item_cost(key, entry);
        self.logical_bytes += entry.value.len() as u64;
        if entry.fp.is_none() {
            self.stored_bytes += entry.value.len() as u64;
        }
    }

    /// Takes `entry`, no longer held under `key`, out of the byte figures
    /// and lets go of its value.
    fn forget(&mut self, key: &[u8], entry: &Entry, changes: &mut Changes) {
        self.used_bytes -= item_cost(key, entry);
        self.logical_bytes -= entry.value.len() as u64;
        if entry.fp.is_none() {
            self.stored_bytes -= entry.value.len() as u64;
        }
        if let Some(fp) = &entry.fp {
            self.release(fp, changes);
        }
    }

    fn release(&mut self, fp: &Fp, changes: &mut Changes) {
        // One probe of the map whether the value stays or goes.
        let MapEntry::Occupied(mut held) = self.values.entry(*fp) else {
            // An item named a value the table does not hold: the counts
            // are broken and any further step could lose data.
            panic!("an item names a deduplicated value the tenant's table does not hold");
        };
        let shared = held.get_mut();
        assert!(shared.refs > 0, "a deduplicated value with no reference");
        shared.refs -= 1;
        if shared.refs == 0 {
            let gone = held.remove();
            let n = gone.value.len() as u64;
            self.used_bytes -= n + VALUE_OVERHEAD_BYTES;
            self.stored_bytes -= n;
            changes.note(|| Change::DeleteValue(*fp));
        }
    }

    /// Takes a reference to `value` under `fp`, storing it if it is new;
    /// returns the shared bytes (the stored copy, so duplicates free theirs).
    fn acquire(&mut self, fp: Fp, value: Bytes, changes: &mut Changes) -> Bytes {
        // One probe of the map for a value held or new.
        match self.values.entry(fp) {
            MapEntry::Occupied(mut held) => {
                let shared = held.get_mut();
                shared.refs += 1;
                self.counters.dedup_hits += 1;
                shared.value.clone()
            }
            MapEntry::Vacant(room) => {
                let n = value.len() as u64;
                self.used_bytes += n + VALUE_OVERHEAD_BYTES;
                self.stored_bytes += n;
                changes.note(|| Change::PutValue(fp, value.clone()));
                room.insert(Shared {
                    value: value.clone(),
                    refs: 1,
                });
                value
            }
        }
    }

    /// What storing `value` under `key` would add to `used_bytes` and free
    /// of it (the old item, if any, gone), and whether `key` is new.
    fn growth(&self, key: &Bytes, value_len: usize, fp: Option<&Fp>) -> (u64, u64, bool) {
        let mut add = ITEM_OVERHEAD_BYTES + key.len() as u64;
        match fp {
            None => add += value_len as u64,
            Some(f) if !self.values.contains_key(f) => {
                add += value_len as u64 + VALUE_OVERHEAD_BYTES
            }
            Some(_) => {}
        }
        let Some(old) = self.items.get(key) else {
            return (add, 0, true);
        };
        let mut free = item_cost(key, old);
        if let Some(of) = &old.fp {
            let last = self.values.get(of).is_some_and(|s| s.refs == 1);
            if last && Some(of) != fp {
                free += old.value.len() as u64 + VALUE_OVERHEAD_BYTES;
            }
        }
        (add, free, false)
    }

    /// Makes room for an item adding `add` bytes and freeing `free` (a new
    /// key when `new_key`), by evicting the items the CLOCK hand reaches in cache
    /// mode; an answer if there is none.
    fn make_room(
        &mut self,
        key: &Bytes,
        (add, free, new_key): (u64, u64, bool),
        changes: &mut Changes,
    ) -> Result<(), KvAnswer> {
        loop {
            let bytes_ok =
                self.used_bytes - free.min(self.used_bytes) + add <= self.limits.max_bytes;
            let keys_ok = !new_key || (self.items.len() as u64) < self.limits.max_keys;
            if bytes_ok && keys_ok {
                return Ok(());
            }
            if !self.limits.evict {
                return Err(if keys_ok {
                    failed(
                        FailKind::QuotaBytes,
                        format!(
                            "out of memory storing object: the tenant holds {} of its {} bytes here",
                            self.used_bytes, self.limits.max_bytes
                        ),
                    )
                } else {
                    failed(
                        FailKind::QuotaKeys,
                        format!(
                            "out of memory storing object: the tenant holds {} of its {} keys here",
                            self.items.len(),
                            self.limits.max_keys
                        ),
                    )
                });
            }
            // The item the hand reaches first, other than the one being
            // replaced (whose cost `free` already counts).
            let victim = self.items.victim(key);
            match victim {
                Some(v) => {
                    self.remove(&v, changes);
                    self.counters.evictions += 1;
                }
                None => {
                    return Err(failed(
                        FailKind::OutOfMemory,
                        format!(
                            "out of memory storing object: an item of {add} bytes does not fit in \
                             the tenant's {} bytes",
                            self.limits.max_bytes
                        ),
                    ))
                }
            }
        }
    }

    /// Stores an item (whatever was under `key` is replaced).
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        key: &Bytes,
        value: Bytes,
        flags: u32,
        expiry: Expiry,
        kind: ItemKind,
        now: u64,
        (cas, hint): (u64, Option<Fp>),
        changes: &mut Changes,
    ) -> KvAnswer {
        if value.len() > MAX_VALUE_BYTES {
            return failed(
                FailKind::TooLarge,
                format!(
                    "object too large for cache: {} bytes; the limit is {MAX_VALUE_BYTES}",
                    value.len()
                ),
            );
        }
        let fp = (value.len() >= self.limits.dedup_min_bytes)
            .then(|| hint.unwrap_or_else(|| fingerprint(&value)));
        debug_assert!(fp.is_none_or(|f| hint.is_none() || f == fingerprint(&value)));
        let growth = self.growth(key, value.len(), fp.as_ref());
        if let Err(refused) = self.make_room(key, growth, changes) {
            return refused;
        }
        // The new value's reference is taken before the old one's is let
        // go, so a key set again to the bytes it holds never drops them.
        let value = match fp {
            Some(f) => self.acquire(f, value, changes),
            None => value,
        };
        let entry = Entry {
            flags,
            expiry,
            cas,
            kind,
            stored_at_secs: now,
            value,
            fp,
        };
        self.count(key, &entry);
        self.counters.total_items += 1;
        let record = changes
            .kept
            .then(|| Change::PutItem(key.clone(), entry.clone()));
        // An item replaced is replaced in its slot: one lookup, and no
        // slot freed and made again.
        if let Some(old) = self.items.insert(key, entry, self.limits.evict) {
            self.forget(key, &old, changes);
        }
        // After the old value's release, as a replay meets them.
        changes.list.extend(record);
        KvAnswer::Stored { cas }
    }

    /// Runs one operation at `now`; `next_cas` hands out CAS values;
    /// `hint` is the fingerprint of a store's value when the caller has it.
    pub(crate) fn apply(
        &mut self,
        op: KvOp,
        hint: Option<Fp>,
        now: u64,
        next_cas: &mut impl FnMut() -> u64,
        changes: &mut Changes,
    ) -> KvAnswer {
        match op {
            KvOp::Get { key, touch } => self.get(&key, touch, now, changes),
            KvOp::Store {
                key,
                mode,
                flags,
                expiry,
                kind,
                value,
            } => self.store(
                &key,
                mode,
                (flags, expiry, kind),
                (value, hint),
                now,
                next_cas,
                changes,
            ),
            KvOp::Delete { key, cas } => {
                let found = self.lookup(&key, now, changes).map(|e| e.cas);
                match (found, cas) {
                    (None, _) => {
                        self.counters.delete_misses += 1;
                        KvAnswer::NotFound
                    }
                    (Some(have), Some(want)) if have != want => KvAnswer::Exists,
                    (Some(_), _) => {
                        self.remove(&key, changes);
                        self.counters.delete_hits += 1;
                        KvAnswer::Deleted
                    }
                }
            }
            KvOp::Arith {
                key,
                decrement,
                delta,
                vivify,
                cas,
            } => self.arith(&key, decrement, delta, vivify, cas, now, next_cas, changes),
            KvOp::Touch { key, expiry } => {
                self.counters.cmd_touch += 1;
                match self.lookup(&key, now, changes) {
                    Some(e) => {
                        e.expiry = expiry;
                        changes.note(|| Change::PutItem(key, e.clone()));
                        self.counters.touch_hits += 1;
                        KvAnswer::Touched
                    }
                    None => {
                        self.counters.touch_misses += 1;
                        KvAnswer::NotFound
                    }
                }
            }
        }
    }

    fn get(
        &mut self,
        key: &Bytes,
        touch: Option<Expiry>,
        now: u64,
        changes: &mut Changes,
    ) -> KvAnswer {
        self.counters.cmd_get += 1;
        if touch.is_some() {
            self.counters.cmd_touch += 1;
        }
        let Some(e) = self.lookup(key, now, changes) else {
            self.counters.get_misses += 1;
            if touch.is_some() {
                self.counters.touch_misses += 1;
            }
            return KvAnswer::Miss;
        };
        if let Some(t) = touch {
            e.expiry = t;
            changes.note(|| Change::PutItem(key.clone(), e.clone()));
        }
        let item = Item {
            flags: e.flags,
            cas: e.cas,
            expiry: e.expiry,
            kind: e.kind,
            value: e.value.clone(),
        };
        self.counters.get_hits += 1;
        if touch.is_some() {
            self.counters.touch_hits += 1;
        }
        KvAnswer::Value(item)
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        key: &Bytes,
        mode: StoreMode,
        (flags, expiry, kind): (u32, Expiry, ItemKind),
        (value, hint): (Bytes, Option<Fp>),
        now: u64,
        next_cas: &mut impl FnMut() -> u64,
        changes: &mut Changes,
    ) -> KvAnswer {
        self.counters.cmd_set += 1;
        if mode == StoreMode::Set {
            // A set stores whatever was there, live or not: `put` replaces
            // it in its slot, with no lookup first.
            let cas = next_cas();
            return self.put(key, value, flags, expiry, kind, now, (cas, hint), changes);
        }
        let joins = matches!(mode, StoreMode::Append | StoreMode::Prepend);
        let current = self.lookup(key, now, changes).map(|e| {
            (
                e.cas,
                e.flags,
                e.expiry,
                e.kind,
                joins.then(|| e.value.clone()),
            )
        });
        // An append or prepend stores joined bytes, whose fingerprint the
        // hint is not.
        let hint = hint.filter(|_| !matches!(mode, StoreMode::Append | StoreMode::Prepend));
        let (value, flags, expiry, kind) = match (mode, current) {
            (StoreMode::Set, _) | (StoreMode::Add, None) => (value, flags, expiry, kind),
            (StoreMode::Add, Some(_)) => return KvAnswer::NotStored,
            (StoreMode::Replace, Some(_)) => (value, flags, expiry, kind),
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                return KvAnswer::NotStored
            }
            (StoreMode::Append | StoreMode::Prepend, Some((_, f, x, k, old))) => {
                debug_assert!(old.is_some(), "a join looks up the old value");
                let old = old.unwrap_or_default();
                if old.len() + value.len() > MAX_VALUE_BYTES {
                    return failed(
                        FailKind::TooLarge,
                        format!(
                            "object too large for cache: {} bytes after the {} more; the limit is \
                             {MAX_VALUE_BYTES}",
                            old.len() + value.len(),
                            value.len()
                        ),
                    );
                }
                let mut joined = BytesMut::with_capacity(old.len() + value.len());
                let (first, second) = if mode == StoreMode::Append {
                    (&old, &value)
                } else {
                    (&value, &old)
                };
                joined.extend_from_slice(first);
                joined.extend_from_slice(second);
                (joined.freeze(), f, x, k)
            }
            (StoreMode::Cas(_), None) => {
                self.counters.cas_misses += 1;
                return KvAnswer::NotFound;
            }
            (StoreMode::Cas(want), Some((have, ..))) if want != have => {
                self.counters.cas_badval += 1;
                return KvAnswer::Exists;
            }
            (StoreMode::Cas(_), Some(_)) => {
                self.counters.cas_hits += 1;
                (value, flags, expiry, kind)
            }
        };
        let cas = next_cas();
        self.put(key, value, flags, expiry, kind, now, (cas, hint), changes)
    }

    #[allow(clippy::too_many_arguments)]
    fn arith(
        &mut self,
        key: &Bytes,
        decrement: bool,
        delta: u64,
        vivify: Option<(u64, Expiry)>,
        cas: Option<u64>,
        now: u64,
        next_cas: &mut impl FnMut() -> u64,
        changes: &mut Changes,
    ) -> KvAnswer {
        let current = self
            .lookup(key, now, changes)
            .map(|e| (e.cas, e.flags, e.expiry, e.value.clone()));
        let count_miss = |c: &mut Counters| {
            if decrement {
                c.decr_misses += 1
            } else {
                c.incr_misses += 1
            }
        };
        let (number, flags, expiry) = match current {
            None => {
                count_miss(&mut self.counters);
                let Some((initial, expiry)) = vivify else {
                    return KvAnswer::NotFound;
                };
                (initial, 0, expiry)
            }
            Some((have, ..)) if cas.is_some_and(|want| want != have) => return KvAnswer::Exists,
            Some((_, flags, expiry, old)) => {
                let Some(n) = parse_number(&old) else {
                    return failed(
                        FailKind::NonNumeric,
                        "cannot increment or decrement non-numeric value",
                    );
                };
                if decrement {
                    self.counters.decr_hits += 1;
                } else {
                    self.counters.incr_hits += 1;
                }
                let n = if decrement {
                    n.saturating_sub(delta)
                } else {
                    n.wrapping_add(delta)
                };
                (n, flags, expiry)
            }
        };
        let cas = next_cas();
        let text = Bytes::from(number.to_string());
        match self.put(
            key,
            text,
            flags,
            expiry,
            ItemKind::Plain,
            now,
            (cas, None),
            changes,
        ) {
            KvAnswer::Stored { cas } => KvAnswer::Number { value: number, cas },
            other => other,
        }
    }

    /// Drops every item now, or every item stored up to `at` once `at` has
    /// come.
    pub(crate) fn flush(&mut self, at: Expiry, now: u64, changes: &mut Changes) {
        match at {
            Expiry::At(t) if t > now => self.flushed_before_secs = Some(t),
            _ => {
                let keys: Vec<Bytes> = self
                    .items
                    .oldest_first()
                    .map(|(k, _)| Bytes::copy_from_slice(k))
                    .collect();
                for k in keys {
                    self.remove(&k, changes);
                }
            }
        }
    }

    /// Removes the expired or flushed items among the `limit` at the back of
    /// the use order (the next the hand reaches in cache mode); how many it looked
    /// at. A durable table keeps no use order ([`Self::find_mut`]), so the
    /// live items looked at go to the front: the next round looks at the
    /// next `limit`, and every item is looked at in turn.
    pub(crate) fn sweep(&mut self, now: u64, limit: usize, changes: &mut Changes) -> usize {
        let looked: Vec<(Bytes, bool)> = self
            .items
            .oldest_first()
            .take(limit)
            .map(|(k, e)| (Bytes::copy_from_slice(k), self.dead(e, now).is_some()))
            .collect();
        for (key, dead) in &looked {
            if *dead {
                self.remove(key, changes);
                self.counters.reclaimed += 1;
            } else if !self.limits.evict {
                self.items.promote(key);
            }
        }
        looked.len()
    }

    /// Puts back an item read from the log at open; `value` is the shared
    /// value when `entry.fp` names one (taken from [`Self::restore_value`]).
    pub(crate) fn restore(&mut self, key: Bytes, mut entry: Entry) -> Result<(), String> {
        if let Some(fp) = entry.fp {
            let Some(shared) = self.values.get_mut(&fp) else {
                return Err("an item names a value the log does not hold".to_string());
            };
            shared.refs += 1;
            entry.value = shared.value.clone();
        }
        self.count(&key, &entry);
        self.items.insert(&key, entry, false);
        Ok(())
    }

    /// Puts back a deduplicated value read from the log at open, with no
    /// reference yet; checks its bytes against its fingerprint.
    pub(crate) fn restore_value(&mut self, fp: Fp, value: Bytes) -> Result<(), String> {
        if fingerprint(&value) != fp {
            return Err("a value whose bytes do not match its fingerprint".to_string());
        }
        let n = value.len() as u64;
        self.used_bytes += n + VALUE_OVERHEAD_BYTES;
        self.stored_bytes += n;
        self.values.insert(fp, Shared { value, refs: 0 });
        Ok(())
    }

    /// Drops restored values no item names (a crash between the two
    /// records cannot leave one, but a value record is never trusted to be
    /// referenced); returns them so the log can delete them.
    pub(crate) fn drop_unreferenced(&mut self) -> Vec<Fp> {
        let gone: Vec<Fp> = self
            .values
            .iter()
            .filter(|(_, s)| s.refs == 0)
            .map(|(f, _)| *f)
            .collect();
        for f in &gone {
            if let Some(s) = self.values.remove(f) {
                self.used_bytes -= s.value.len() as u64 + VALUE_OVERHEAD_BYTES;
                self.stored_bytes -= s.value.len() as u64;
            }
        }
        gone
    }

    /// Recounts everything from the items and checks the counts and the
    /// accounting kept along the way: exact reference counts, no value
    /// without a reference, every byte figure.
    pub(crate) fn audit(&self) -> Result<(), String> {
        let mut refs: HashMap<Fp, u64> = HashMap::new();
        let (mut used, mut logical, mut stored) = (0u64, 0u64, 0u64);
        for (k, e) in self.items.oldest_first() {
            used += item_cost(k, e);
            logical += e.value.len() as u64;
            match &e.fp {
                Some(f) => *refs.entry(*f).or_default() += 1,
                None => stored += e.value.len() as u64,
            }
        }
        for s in self.values.values() {
            used += s.value.len() as u64 + VALUE_OVERHEAD_BYTES;
            stored += s.value.len() as u64;
        }
        if refs != self.refcounts() {
            return Err(format!(
                "reference counts {:?} where the items make {:?}",
                self.refcounts(),
                refs
            ));
        }
        let kept = (self.used_bytes, self.logical_bytes, self.stored_bytes);
        if kept != (used, logical, stored) {
            return Err(format!(
                "(used, logical, stored) bytes kept as {kept:?}, recounted as {:?}",
                (used, logical, stored)
            ));
        }
        Ok(())
    }

    /// A copy of the records a durable tenant's log holds for this table
    /// (the copies share the bytes).
    pub(crate) fn copy_records(&self) -> TableCopy {
        let items = self
            .items
            .oldest_first()
            .map(|(k, e)| (Bytes::copy_from_slice(k), e.clone()))
            .collect();
        let values = self
            .values
            .iter()
            .map(|(fp, shared)| (*fp, shared.value.clone()))
            .collect();
        TableCopy { items, values }
    }

    /// The largest CAS value held.
    pub(crate) fn max_cas(&self) -> u64 {
        self.items
            .oldest_first()
            .map(|(_, e)| e.cas)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(evict: bool) -> TenantTable {
        TenantTable::new(TableLimits {
            max_bytes: 1 << 20,
            max_keys: 1 << 10,
            evict,
            dedup_min_bytes: 8,
        })
    }

    fn set(t: &mut TenantTable, key: &str, value: &str, expiry: Expiry) -> Vec<Change> {
        let mut changes = Changes::kept();
        let mut cas = 0;
        let op = KvOp::Store {
            key: Bytes::from(key.to_string()),
            mode: StoreMode::Set,
            flags: 0,
            expiry,
            kind: ItemKind::Plain,
            value: Bytes::from(value.to_string()),
        };
        let answer = t.apply(
            op,
            None,
            10,
            &mut || {
                cas += 1;
                cas
            },
            &mut changes,
        );
        assert!(matches!(answer, KvAnswer::Stored { .. }), "{answer:?}");
        changes.into_list()
    }

    fn read(t: &mut TenantTable, key: &str) -> Option<Bytes> {
        let op = KvOp::Get {
            key: Bytes::from(key.to_string()),
            touch: None,
        };
        match t.apply(op, None, 10, &mut || 0, &mut Changes::kept()) {
            KvAnswer::Value(item) => Some(item.value),
            _ => None,
        }
    }

    /// A durable table keeps no use order, so its sweep must move on by
    /// itself: expired items behind live old ones are reached in turn.
    #[test]
    fn a_durable_tables_sweep_reaches_every_item_in_turn() {
        let mut t = table(false);
        for i in 0..4 {
            set(&mut t, &format!("old{i}"), "kept", Expiry::Never);
        }
        for i in 0..6 {
            set(&mut t, &format!("new{i}"), "gone", Expiry::At(100));
        }
        let mut changes = Changes::kept();
        let mut rounds = 0;
        while t.len() > 4 {
            assert_eq!(t.sweep(200, 3, &mut changes), 3);
            rounds += 1;
            assert!(
                rounds <= 4,
                "a sweep of 3 items a round left {} items",
                t.len()
            );
        }
        assert_eq!(t.counters.reclaimed, 6);
        assert_eq!(
            changes
                .into_list()
                .iter()
                .filter(|c| matches!(c, Change::DeleteItem(_)))
                .count(),
            6
        );
        for i in 0..4 {
            assert_eq!(
                read(&mut t, &format!("old{i}")).as_deref(),
                Some(&b"kept"[..])
            );
        }
        t.audit().unwrap();
    }

    /// An item replaced in its slot lets go of its old value (the count
    /// and the records say so) and keeps the new one's.
    #[test]
    fn a_replaced_item_releases_its_old_value() {
        let mut t = table(false);
        set(&mut t, "a", "first value", Expiry::Never);
        set(&mut t, "b", "first value", Expiry::Never);
        let changes = set(&mut t, "a", "second value", Expiry::Never);
        let kinds: Vec<&str> = changes
            .iter()
            .map(|c| match c {
                Change::PutValue(..) => "put value",
                Change::DeleteValue(_) => "delete value",
                Change::PutItem(..) => "put item",
                Change::DeleteItem(_) => "delete item",
            })
            .collect();
        // The first value is still b's: only the new value and the item.
        assert_eq!(kinds, ["put value", "put item"]);
        let changes = set(&mut t, "b", "third value", Expiry::Never);
        assert!(matches!(
            changes.as_slice(),
            [Change::PutValue(..), Change::DeleteValue(fp), Change::PutItem(..)]
                if *fp == fingerprint(b"first value")
        ));
        assert_eq!(t.len(), 2);
        assert_eq!(t.shared_values(), 2);
        assert!(t.refcounts().values().all(|&n| n == 1));
        assert_eq!(read(&mut t, "a").as_deref(), Some(&b"second value"[..]));
        t.audit().unwrap();
    }

    /// In cache mode a read or a replacement marks an item as used, so
    /// eviction takes the other one.
    #[test]
    fn cache_mode_evicts_the_item_not_used_lately() {
        let mut t = TenantTable::new(TableLimits {
            max_bytes: 1 << 20,
            max_keys: 2,
            evict: true,
            dedup_min_bytes: usize::MAX,
        });
        set(&mut t, "a", "1", Expiry::Never);
        set(&mut t, "b", "2", Expiry::Never);
        assert!(read(&mut t, "a").is_some());
        set(&mut t, "c", "3", Expiry::Never);
        assert!(
            read(&mut t, "b").is_none(),
            "b was not used since a was read"
        );
        set(&mut t, "a", "4", Expiry::Never);
        set(&mut t, "d", "5", Expiry::Never);
        assert!(
            read(&mut t, "c").is_none(),
            "c was not used since a was set"
        );
        assert_eq!(read(&mut t, "a").as_deref(), Some(&b"4"[..]));
        assert_eq!(t.counters.evictions, 2);
        t.audit().unwrap();
    }
}
