//! Values larger than an item (slices behind a head) and arrays (elements
//! behind a directory value), Multes++'s client-side layers over plain
//! items. A version's children are named with a nonce its head or
//! directory holds, written before it, and the previous version's children
//! are deleted after it, so a reader sees one whole version or an error,
//! never a mix.

use bytes::{Bytes, BytesMut};

use crate::cluster::{child_key, nonce, set_op, Head, KvTransport, MAX_PARENT_KEY_BYTES};
use crate::{
    Expiry, Item, ItemKind, KvAnswer, KvCluster, KvError, KvOp, Result, MAX_ARRAY_ELEMENTS,
    MAX_SLICES, MAX_VALUE_BYTES,
};

const LARGE_MAGIC: &[u8; 4] = b"QLV1";
const ARRAY_MAGIC: &[u8; 4] = b"QAR1";
const SLICE: u8 = b's';
const ELEMENT: u8 = b'e';

/// A reader that finds a slice gone (a writer replaced the value between
/// the head and the slices) reads the head again, this many times.
const READ_ATTEMPTS: usize = 4;

fn check_parent(key: &[u8]) -> Result<()> {
    crate::check_key(key)?;
    if key.len() > MAX_PARENT_KEY_BYTES {
        return Err(KvError::InvalidKey(format!(
            "a key of {} bytes for a large value or array; the limit is {MAX_PARENT_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

fn all_stored(answers: Vec<KvAnswer>) -> Result<()> {
    for a in answers {
        match a {
            KvAnswer::Stored { .. } => {}
            KvAnswer::Failed { kind, message } => return Err(KvError::Failed { kind, message }),
            other => return Err(KvError::Format(format!("a slice store answered {other:?}"))),
        }
    }
    Ok(())
}

impl<X: KvTransport> KvCluster<X> {
    /// The children an item names (a large value's slices, an array's
    /// elements), to delete once it is replaced.
    fn children_of(&self, key: &[u8], item: Option<&Item>) -> Vec<Bytes> {
        let Some(item) = item else { return Vec::new() };
        let (magic, letter) = match item.kind {
            ItemKind::Plain => return Vec::new(),
            ItemKind::LargeHead => (LARGE_MAGIC, SLICE),
            ItemKind::ArrayDirectory => (ARRAY_MAGIC, ELEMENT),
        };
        match Head::decode(magic, &item.value) {
            Ok(h) => (0..h.count.min(MAX_ARRAY_ELEMENTS))
                .map(|i| child_key(key, letter, h.nonce, i))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    async fn delete_keys(&self, keys: Vec<Bytes>) {
        if keys.is_empty() {
            return;
        }
        let ops = keys
            .into_iter()
            .map(|key| KvOp::Delete { key, cas: None })
            .collect();
        // Best effort: a child left behind costs space, never a wrong read
        // (no head names its nonce any more).
        let _ = self.run(ops).await;
    }

    /// Writes `children` under fresh keys, then `head` (of `kind`, naming
    /// them by `nonce`) under `key`, then deletes what the old item named.
    async fn write_versioned(
        &self,
        key: &[u8],
        letter: u8,
        nonce: u64,
        children: Vec<Bytes>,
        head: (ItemKind, Bytes, u32, Expiry),
    ) -> Result<()> {
        let old = self.get(key).await?;
        let keys: Vec<Bytes> = (0..children.len() as u32)
            .map(|i| child_key(key, letter, nonce, i))
            .collect();
        let ops = keys
            .iter()
            .zip(children)
            .map(|(k, v)| set_op(k.clone(), v, 0, head.3, ItemKind::Plain))
            .collect();
        if let Err(e) = all_stored(self.run(ops).await) {
            self.delete_keys(keys).await;
            return Err(e);
        }
        let (kind, value, flags, expiry) = head;
        let op = set_op(Bytes::copy_from_slice(key), value, flags, expiry, kind);
        let node = self.node_of(key);
        if let Err(e) = all_stored(self.run_on(node, vec![op]).await) {
            self.delete_keys(keys).await;
            return Err(e);
        }
        self.delete_keys(self.children_of(key, old.as_ref())).await;
        Ok(())
    }

    /// Stores a value of any size under `key`: up to [`MAX_VALUE_BYTES`] as
    /// one item, beyond as slices of that size behind a head that says how
    /// many follow, written in one batch.
    pub async fn set_large(
        &self,
        key: &[u8],
        value: Bytes,
        flags: u32,
        expiry: Expiry,
    ) -> Result<()> {
        check_parent(key)?;
        let count = value.len().div_ceil(MAX_VALUE_BYTES);
        if count > MAX_SLICES as usize {
            return Err(KvError::TooLarge(format!(
                "a value of {} bytes; the limit is {MAX_SLICES} slices of {MAX_VALUE_BYTES}",
                value.len()
            )));
        }
        if value.len() <= MAX_VALUE_BYTES {
            let old = self.get(key).await?;
            self.set(key, value, flags, expiry).await?;
            self.delete_keys(self.children_of(key, old.as_ref())).await;
            return Ok(());
        }
        let nonce = nonce();
        let head = Head {
            nonce,
            count: count as u32,
            total_bytes: value.len() as u64,
        };
        let slices = (0..count)
            .map(|i| value.slice(i * MAX_VALUE_BYTES..((i + 1) * MAX_VALUE_BYTES).min(value.len())))
            .collect();
        let head = (ItemKind::LargeHead, head.encode(LARGE_MAGIC), flags, expiry);
        self.write_versioned(key, SLICE, nonce, slices, head).await
    }

    /// The value under `key` whatever its size: a plain item's bytes, or a
    /// large value's slices fetched in one batch and joined.
    pub async fn get_large(&self, key: &[u8]) -> Result<Option<Bytes>> {
        check_parent(key)?;
        for _ in 0..READ_ATTEMPTS {
            let Some(item) = self.get(key).await? else {
                return Ok(None);
            };
            match item.kind {
                ItemKind::Plain => return Ok(Some(item.value)),
                ItemKind::ArrayDirectory => {
                    return Err(KvError::Invalid(format!(
                        "key {:?} holds an array, not a value",
                        String::from_utf8_lossy(key)
                    )))
                }
                ItemKind::LargeHead => {}
            }
            let head = Head::decode(LARGE_MAGIC, &item.value)?;
            if head.count > MAX_SLICES {
                return Err(KvError::Format(format!(
                    "a head naming {} slices",
                    head.count
                )));
            }
            let keys: Vec<Bytes> = (0..head.count)
                .map(|i| child_key(key, SLICE, head.nonce, i))
                .collect();
            let slices = self.get_many(&keys).await?;
            if slices.iter().any(Option::is_none) {
                continue; // replaced meanwhile: read the new head
            }
            let mut out = BytesMut::with_capacity(head.total_bytes.min(1 << 32) as usize);
            for s in slices.into_iter().flatten() {
                out.extend_from_slice(&s.value);
            }
            if out.len() as u64 != head.total_bytes {
                return Err(KvError::Format(format!(
                    "slices of {} bytes under a head of {}",
                    out.len(),
                    head.total_bytes
                )));
            }
            return Ok(Some(out.freeze()));
        }
        Err(KvError::Format(format!(
            "key {:?} was replaced {READ_ATTEMPTS} times while being read",
            String::from_utf8_lossy(key)
        )))
    }

    /// Deletes `key` and whatever it names; whether it was there.
    pub async fn delete_large(&self, key: &[u8]) -> Result<bool> {
        check_parent(key)?;
        let old = self.get(key).await?;
        let was = self.delete(key).await?;
        self.delete_keys(self.children_of(key, old.as_ref())).await;
        Ok(was)
    }

    /// Stores `elements` as an array under `key`: each element an item, then
    /// a directory value naming them.
    pub async fn array_set(&self, key: &[u8], elements: Vec<Bytes>, expiry: Expiry) -> Result<()> {
        check_parent(key)?;
        if elements.len() > MAX_ARRAY_ELEMENTS as usize {
            return Err(KvError::TooLarge(format!(
                "an array of {} elements; the limit is {MAX_ARRAY_ELEMENTS}",
                elements.len()
            )));
        }
        if let Some(big) = elements.iter().find(|e| e.len() > MAX_VALUE_BYTES) {
            return Err(KvError::TooLarge(format!(
                "an array element of {} bytes; the limit is {MAX_VALUE_BYTES}",
                big.len()
            )));
        }
        let nonce = nonce();
        let head = Head {
            nonce,
            count: elements.len() as u32,
            total_bytes: elements.iter().map(|e| e.len() as u64).sum(),
        };
        let head = (
            ItemKind::ArrayDirectory,
            head.encode(ARRAY_MAGIC),
            0,
            expiry,
        );
        self.write_versioned(key, ELEMENT, nonce, elements, head)
            .await
    }

    /// The number of elements of the array under `key`.
    pub async fn array_len(&self, key: &[u8]) -> Result<Option<u32>> {
        Ok(self.directory(key).await?.map(|h| h.count))
    }

    async fn directory(&self, key: &[u8]) -> Result<Option<Head>> {
        check_parent(key)?;
        let Some(item) = self.get(key).await? else {
            return Ok(None);
        };
        if item.kind != ItemKind::ArrayDirectory {
            return Err(KvError::Invalid(format!(
                "key {:?} holds no array",
                String::from_utf8_lossy(key)
            )));
        }
        Head::decode(ARRAY_MAGIC, &item.value).map(Some)
    }

    /// Element `index` of the array under `key`: two round trips, the
    /// directory's and the element's.
    pub async fn array_get(&self, key: &[u8], index: u32) -> Result<Option<Bytes>> {
        Ok(self
            .array_get_many(key, &[index])
            .await?
            .and_then(|mut v| v.pop()))
    }

    /// Elements `indices` of the array under `key`, in that order: the
    /// directory, then every element in one batch, whatever their number.
    pub async fn array_get_many(&self, key: &[u8], indices: &[u32]) -> Result<Option<Vec<Bytes>>> {
        for _ in 0..READ_ATTEMPTS {
            let Some(head) = self.directory(key).await? else {
                return Ok(None);
            };
            if let Some(bad) = indices.iter().find(|&&i| i >= head.count) {
                return Err(KvError::Invalid(format!(
                    "index {bad} of an array of {} elements",
                    head.count
                )));
            }
            let keys: Vec<Bytes> = indices
                .iter()
                .map(|&i| child_key(key, ELEMENT, head.nonce, i))
                .collect();
            let got = self.get_many(&keys).await?;
            if got.iter().all(Option::is_some) {
                return Ok(Some(got.into_iter().flatten().map(|i| i.value).collect()));
            }
        }
        Err(KvError::Format(format!(
            "array {:?} was replaced {READ_ATTEMPTS} times while being read",
            String::from_utf8_lossy(key)
        )))
    }
}
