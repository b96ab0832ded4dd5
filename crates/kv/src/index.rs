//! The items of one tenant's table on one node, by key, in use order.
//!
//! Laid out for the few cache lines a request can afford to miss: a set or
//! get on a large table finds little of it in the CPU's caches, and each
//! pointer followed can miss (docs/benchmarks.md, "Eighth run"). The hash
//! table holds slot numbers; a slot holds the key (inline when short, as
//! memcached keeps it in the item), the entry and its links in the use
//! order. A lookup touches the table's control bytes, its bucket and the
//! slot, where `lru` also went to a boxed node and the key's own bytes.
//!
//! The use order is a CLOCK over the list, as memcached's segmented LRU
//! approximates one: a read marks its slot (a slot the lookup has just
//! read), and the eviction hand moves marked slots to the front, clearing
//! the mark, instead of every read moving its slot and so touching both
//! neighbours.

use std::hash::BuildHasher;

use bytes::Bytes;
use hashbrown::HashTable;

use crate::table::Entry;

/// Keys up to this long are kept in their slot; longer ones (memcached
/// allows 250 bytes) in bytes of their own.
const INLINE_KEY_BYTES: usize = 30;

/// No slot: the end of the use order.
const NO_SLOT: u32 = u32::MAX;

/// A key, kept where a lookup already reads.
#[derive(Debug)]
enum Key {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Long(Bytes),
}

impl Key {
    fn new(key: &Bytes) -> Key {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            Key::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            Key::Long(key.clone())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Long(b) => b,
        }
    }
}

/// One item and its place in the use order.
#[derive(Debug)]
struct Slot {
    hash: u64,
    key: Key,
    /// Read since the eviction hand last passed it.
    marked: bool,
    /// Toward the front (more recently used).
    newer: u32,
    /// Toward the back.
    older: u32,
    entry: Entry,
}

/// One tenant's items on one node: found by key, kept in use order.
pub(crate) struct ItemIndex {
    table: HashTable<u32>,
    slots: Vec<Option<Slot>>,
    /// Slots emptied by removals, used again before the vector grows.
    free: Vec<u32>,
    /// The most recently used (or inserted) slot.
    front: u32,
    /// Where the eviction hand starts.
    back: u32,
    len: usize,
    /// Seeded per process, so a client cannot choose keys that collide.
    hasher: foldhash::fast::RandomState,
}

impl ItemIndex {
    pub(crate) fn new() -> Self {
        ItemIndex {
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            front: NO_SLOT,
            back: NO_SLOT,
            len: 0,
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn slot(&self, at: u32) -> &Slot {
        match self.slots.get(at as usize) {
            Some(Some(s)) => s,
            // A link or a table entry to an empty slot: the index is
            // broken, and going on could hand one key's item to another.
            _ => panic!("the item index names slot {at}, which holds no item"),
        }
    }

    fn slot_mut(&mut self, at: u32) -> &mut Slot {
        match self.slots.get_mut(at as usize) {
            Some(Some(s)) => s,
            _ => panic!("the item index names slot {at}, which holds no item"),
        }
    }

    fn find(&self, key: &[u8]) -> Option<u32> {
        self.find_hashed(key, self.hasher.hash_one(key))
    }

    fn find_hashed(&self, key: &[u8], hash: u64) -> Option<u32> {
        self.table
            .find(hash, |&at| {
                let s = self.slot(at);
                s.hash == hash && s.key.as_slice() == key
            })
            .copied()
    }

    /// The item under `key`, its use order untouched.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.find(key).map(|at| &self.slot(at).entry)
    }

    /// The item under `key`; marked as used when `mark` (cache mode).
    pub(crate) fn get_mut(&mut self, key: &[u8], mark: bool) -> Option<&mut Entry> {
        let at = self.find(key)?;
        let slot = self.slot_mut(at);
        if mark {
            slot.marked = true;
        }
        Some(&mut slot.entry)
    }

    /// Stores `entry` under `key`: in the key's slot when it has one
    /// (marked as used when `mark`, as [`Self::get_mut`]), returning the
    /// item it replaces, else in a new slot at the front. The key is hashed
    /// once for both.
    pub(crate) fn insert(&mut self, key: &Bytes, entry: Entry, mark: bool) -> Option<Entry> {
        let hash = self.hasher.hash_one(&key[..]);
        if let Some(at) = self.find_hashed(key, hash) {
            let slot = self.slot_mut(at);
            slot.marked |= mark;
            return Some(std::mem::replace(&mut slot.entry, entry));
        }
        let slot = Slot {
            hash,
            key: Key::new(key),
            marked: false,
            newer: NO_SLOT,
            older: self.front,
            entry,
        };
        let at = match self.free.pop() {
            Some(at) => {
                debug_assert!(self.slots[at as usize].is_none());
                self.slots[at as usize] = Some(slot);
                at
            }
            None => {
                // The tenant's key quota bounds the slots long before this.
                assert!(
                    self.slots.len() < NO_SLOT as usize,
                    "a table of {} items",
                    self.slots.len()
                );
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        self.link_front(at);
        let slots = &self.slots;
        self.table
            .insert_unique(hash, at, |&i| match &slots[i as usize] {
                Some(s) => s.hash,
                None => panic!("the item index names slot {i}, which holds no item"),
            });
        self.len += 1;
        None
    }

    /// Removes and returns the item under `key`.
    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let found = self
            .table
            .find_entry(hash, |&at| match &slots[at as usize] {
                Some(s) => s.hash == hash && s.key.as_slice() == key,
                None => false,
            });
        let (at, _) = found.ok()?.remove();
        self.unlink(at);
        let slot = self.slots[at as usize].take()?;
        self.free.push(at);
        self.len -= 1;
        if self.len == 0 {
            // Nothing held: give the slots' memory back (a flush_all).
            self.slots = Vec::new();
            self.free = Vec::new();
        }
        Some(slot.entry)
    }

    /// Moves `key`'s item to the front, unmarked.
    pub(crate) fn promote(&mut self, key: &[u8]) {
        if let Some(at) = self.find(key) {
            self.unlink(at);
            self.link_front(at);
        }
    }

    /// The key to evict next, other than `except`: the CLOCK hand goes from
    /// the back, moving each marked item to the front unmarked, and stops
    /// at the first unmarked one. At most two passes: the first unmarks
    /// every item it moves.
    pub(crate) fn victim(&mut self, except: &[u8]) -> Option<Bytes> {
        let mut at = self.back;
        for _ in 0..2 * self.len + 1 {
            if at == NO_SLOT {
                return None;
            }
            let slot = self.slot(at);
            let next = slot.newer;
            if slot.key.as_slice() == except {
                at = next;
                continue;
            }
            if !slot.marked {
                return Some(Bytes::copy_from_slice(slot.key.as_slice()));
            }
            self.unlink(at);
            self.link_front(at);
            // It was the front: the hand starts again from the back.
            at = if next == NO_SLOT { self.back } else { next };
        }
        None
    }

    /// Every item, from the back of the use order (the next to evict)
    /// to the front.
    pub(crate) fn oldest_first(&self) -> impl Iterator<Item = (&[u8], &Entry)> + '_ {
        let mut at = self.back;
        std::iter::from_fn(move || {
            if at == NO_SLOT {
                return None;
            }
            let s = self.slot(at);
            at = s.newer;
            Some((s.key.as_slice(), &s.entry))
        })
        .take(self.len)
    }

    fn unlink(&mut self, at: u32) {
        let (newer, older) = {
            let s = self.slot(at);
            (s.newer, s.older)
        };
        match newer {
            NO_SLOT => self.front = older,
            n => self.slot_mut(n).older = older,
        }
        match older {
            NO_SLOT => self.back = newer,
            o => self.slot_mut(o).newer = newer,
        }
    }

    fn link_front(&mut self, at: u32) {
        let front = self.front;
        {
            let s = self.slot_mut(at);
            s.marked = false;
            s.newer = NO_SLOT;
            s.older = front;
        }
        match front {
            NO_SLOT => self.back = at,
            f => self.slot_mut(f).newer = at,
        }
        self.front = at;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use quarry_kv_api::{Expiry, ItemKind};

    use super::*;

    fn entry(cas: u64) -> Entry {
        Entry {
            flags: 0,
            expiry: Expiry::Never,
            cas,
            kind: ItemKind::Plain,
            stored_at_secs: 0,
            value: Bytes::new(),
            fp: None,
        }
    }

    fn key(k: &str) -> Bytes {
        Bytes::copy_from_slice(k.as_bytes())
    }

    fn order(index: &ItemIndex) -> Vec<String> {
        index
            .oldest_first()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    /// The hand passes over marked items once, unmarking them, and takes
    /// the oldest unmarked one; it never takes the key being stored.
    #[test]
    fn the_eviction_hand_spares_marked_items_once() {
        let mut index = ItemIndex::new();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            index.insert(&key(k), entry(i as u64), true);
        }
        assert_eq!(order(&index), ["a", "b", "c"]);
        assert!(index.get_mut(b"a", true).is_some());
        assert_eq!(index.victim(b"z").as_deref(), Some(&b"b"[..]));
        assert_eq!(order(&index), ["b", "c", "a"], "a went to the front");
        // A durable table's lookup marks nothing.
        assert!(index.get_mut(b"b", false).is_some());
        assert_eq!(index.victim(b"z").as_deref(), Some(&b"b"[..]));
        assert_eq!(index.victim(b"b").as_deref(), Some(&b"c"[..]));
        for k in ["a", "b", "c"] {
            index.get_mut(k.as_bytes(), true);
        }
        // Every item marked: one pass unmarks them all in order, and the
        // oldest goes.
        assert_eq!(index.victim(b"z").as_deref(), Some(&b"b"[..]));
        assert_eq!(index.victim(b"b").as_deref(), Some(&b"c"[..]));
        let mut only = ItemIndex::new();
        only.insert(&key("x"), entry(1), true);
        assert_eq!(only.victim(b"x"), None);
        assert_eq!(ItemIndex::new().victim(b"x"), None);
    }

    /// Keys past the inline length are kept whole: two that share their
    /// first 30 bytes are two items.
    #[test]
    fn long_keys_are_told_apart_past_the_inline_bytes() {
        let mut index = ItemIndex::new();
        let long_a = format!("{}a", "k".repeat(INLINE_KEY_BYTES));
        let long_b = format!("{}b", "k".repeat(INLINE_KEY_BYTES));
        let inline = "k".repeat(INLINE_KEY_BYTES);
        index.insert(&key(&long_a), entry(1), true);
        index.insert(&key(&long_b), entry(2), true);
        index.insert(&key(&inline), entry(3), true);
        assert_eq!(index.get(long_a.as_bytes()).map(|e| e.cas), Some(1));
        assert_eq!(index.get(long_b.as_bytes()).map(|e| e.cas), Some(2));
        assert_eq!(index.get(inline.as_bytes()).map(|e| e.cas), Some(3));
        assert_eq!(index.remove(long_a.as_bytes()).map(|e| e.cas), Some(1));
        assert!(index.get(long_a.as_bytes()).is_none());
        assert_eq!(index.len(), 2);
    }

    #[derive(Clone, Debug)]
    enum Step {
        Insert(u8),
        Remove(u8),
        Mark(u8),
        Promote(u8),
        Evict(u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => any::<u8>().prop_map(|k| Step::Insert(k % 48)),
            2 => any::<u8>().prop_map(|k| Step::Remove(k % 48)),
            2 => any::<u8>().prop_map(|k| Step::Mark(k % 48)),
            1 => any::<u8>().prop_map(|k| Step::Promote(k % 48)),
            2 => any::<u8>().prop_map(|k| Step::Evict(k % 48)),
        ]
    }

    /// Half the keys inline, half long, so both kinds share the table.
    fn name(k: u8) -> Bytes {
        if k.is_multiple_of(2) {
            key(&format!("key-{k}"))
        } else {
            key(&format!("{}-{k}", "long".repeat(10)))
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Through any sequence of steps the index holds what a plain map
        /// holds, its order lists each item once, freed slots are used
        /// again, and an eviction names a held key other than the one
        /// spared.
        #[test]
        fn the_index_agrees_with_a_map(steps in proptest::collection::vec(step(), 1..300)) {
            let mut index = ItemIndex::new();
            let mut model: HashMap<Bytes, u64> = HashMap::new();
            for (n, s) in steps.into_iter().enumerate() {
                let n = n as u64;
                match s {
                    Step::Insert(k) => {
                        let old = index.insert(&name(k), entry(n), true).map(|e| e.cas);
                        prop_assert_eq!(old, model.insert(name(k), n));
                    }
                    Step::Remove(k) => {
                        let gone = index.remove(&name(k)).map(|e| e.cas);
                        prop_assert_eq!(gone, model.remove(&name(k)));
                    }
                    Step::Mark(k) => {
                        let got = index.get_mut(&name(k), true).map(|e| e.cas);
                        prop_assert_eq!(got, model.get(&name(k)).copied());
                    }
                    Step::Promote(k) => index.promote(&name(k)),
                    Step::Evict(k) => {
                        let spared = name(k);
                        match index.victim(&spared) {
                            Some(v) => {
                                prop_assert!(v != spared && model.contains_key(&v));
                                index.remove(&v);
                                model.remove(&v);
                            }
                            None => prop_assert!(model.keys().all(|m| *m == spared)),
                        }
                    }
                }
                prop_assert_eq!(index.len(), model.len());
                let listed: Vec<(Bytes, u64)> = index
                    .oldest_first()
                    .map(|(k, e)| (Bytes::copy_from_slice(k), e.cas))
                    .collect();
                prop_assert_eq!(listed.len(), model.len());
                let as_map: HashMap<Bytes, u64> = listed.into_iter().collect();
                prop_assert_eq!(&as_map, &model);
                // Slots are only added when none is free.
                prop_assert!(index.slots.len() <= 48);
                prop_assert_eq!(index.slots.len() - index.free.len(), index.len());
                // An emptied index gives its slots back.
                if model.is_empty() {
                    prop_assert!(index.slots.is_empty() && index.free.is_empty());
                }
            }
        }
    }
}
