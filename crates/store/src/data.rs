//! Where chunk bytes live: the [`ChunkStore`] trait, and [`MemChunkStore`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use quarry_store_api::{ChunkLocation, Fingerprint};
use quarry_store_api::{Result, StoreError};

/// What a chunk read checks the bytes against before returning them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkCheck {
    /// The CRC-32C of the whole chunk ([`quarry_store_api::chunk_crc32c`]),
    /// kept in its record since it was filed.
    Crc32c(u32),
    /// Its SHA-256 fingerprint: for records written before they kept a CRC.
    Sha256,
}

/// The bytes of chunks on one node: write an extent, read it, trim it.
///
/// What an implementation must guarantee (the volume-backed one included):
/// - `write` returns only once the bytes are durable; the location it
///   returns is not handed out again until it is trimmed.
/// - `read` of a written, untrimmed location returns exactly the bytes
///   written (or an error, never other bytes). It is given the fingerprint
///   the caller expects there and fails if the extent was written for
///   another: a reader that looked a location up just before the chunk was
///   released must not get the bytes of a chunk written there later.
/// - `trim` tells the space manager the pages are dead (RFSA: the store, which
///   knows what is dead, drives garbage collection); it may be called for a
///   location after a crash twice, so it must be idempotent.
/// - `extents` lists every extent with any page written and not trimmed,
///   with the fingerprint written with it, so that after a crash the node can
///   trim extents that no chunk record names (pages written before the
///   record's commit, or a record deleted before its trim). Over the volume,
///   whose OOB names only the logical page, a chunk store can write a small
///   header (fingerprint, length, page count) at the start of each extent's
///   first page, program that page first, and enumerate the chunk space's
///   mapped pages; a mapped page that no header covers is part of an extent
///   whose first page never made it, and is trimmed as well.
pub trait ChunkStore: Send + Sync + 'static {
    /// Stores a chunk's bytes; returns where.
    fn write(
        &self,
        fingerprint: &Fingerprint,
        data: Bytes,
    ) -> impl Future<Output = Result<ChunkLocation>> + Send;

    /// Reads the first `len` bytes of the chunk `fingerprint` at `location`;
    /// an error if the extent there holds another chunk (or none), or if
    /// the whole chunk's bytes fail `check`.
    fn read(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> impl Future<Output = Result<Bytes>> + Send;

    /// [`ChunkStore::read`] as pieces whose concatenation is the bytes: a
    /// store that keeps a chunk on pages hands back each page's bytes as the
    /// device read them, so an answer can go out without joining them.
    fn read_pieces(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> impl Future<Output = Result<Vec<Bytes>>> + Send {
        async move { Ok(vec![self.read(fingerprint, location, len, check).await?]) }
    }

    /// Declares the location's pages dead.
    fn trim(&self, location: ChunkLocation) -> impl Future<Output = Result<()>> + Send;

    /// Every live extent and the fingerprint it was written for.
    fn extents(&self) -> impl Future<Output = Result<Vec<(ChunkLocation, Fingerprint)>>> + Send;
}

impl<C: ChunkStore> ChunkStore for std::sync::Arc<C> {
    fn write(
        &self,
        fingerprint: &Fingerprint,
        data: Bytes,
    ) -> impl Future<Output = Result<ChunkLocation>> + Send {
        (**self).write(fingerprint, data)
    }
    fn read(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> impl Future<Output = Result<Bytes>> + Send {
        (**self).read(fingerprint, location, len, check)
    }
    fn read_pieces(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> impl Future<Output = Result<Vec<Bytes>>> + Send {
        (**self).read_pieces(fingerprint, location, len, check)
    }
    fn trim(&self, location: ChunkLocation) -> impl Future<Output = Result<()>> + Send {
        (**self).trim(location)
    }
    fn extents(&self) -> impl Future<Output = Result<Vec<(ChunkLocation, Fingerprint)>>> + Send {
        (**self).extents()
    }
}

/// Chunk bytes in memory, laid out as if on pages of `page_size` bytes (so
/// locations look like the volume's). Writes can be made to fail
/// ([`Self::fail_writes`]) to test error paths.
#[derive(Debug)]
pub struct MemChunkStore {
    page_size: u32,
    next_page: AtomicU64,
    extents: Mutex<BTreeMap<u64, (ChunkLocation, Fingerprint, Bytes)>>,
    fail_writes: std::sync::atomic::AtomicBool,
}

impl MemChunkStore {
    /// An empty store with pages of `page_size` bytes.
    pub fn new(page_size: u32) -> Self {
        assert!(page_size > 0, "page size must be positive");
        Self {
            page_size,
            next_page: AtomicU64::new(0),
            extents: Mutex::default(),
            fail_writes: Default::default(),
        }
    }

    /// Makes every later write fail (or succeed again).
    pub fn fail_writes(&self, fail: bool) {
        self.fail_writes.store(fail, Ordering::SeqCst);
    }

    /// Pages held by live extents.
    pub fn live_pages(&self) -> u64 {
        self.extents
            .lock()
            .expect("extents lock")
            .values()
            .map(|(l, _, _)| u64::from(l.pages))
            .sum()
    }

    /// Number of live extents.
    pub fn live_extents(&self) -> usize {
        self.extents.lock().expect("extents lock").len()
    }
}

impl Default for MemChunkStore {
    fn default() -> Self {
        Self::new(8192)
    }
}

impl ChunkStore for MemChunkStore {
    async fn write(&self, fingerprint: &Fingerprint, data: Bytes) -> Result<ChunkLocation> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(StoreError::Backend("chunk write refused (test)".into()));
        }
        let pages = (data.len() as u64)
            .div_ceil(u64::from(self.page_size))
            .max(1) as u32;
        let first_page = self.next_page.fetch_add(u64::from(pages), Ordering::SeqCst);
        let location = ChunkLocation {
            space: 0,
            first_page,
            pages,
        };
        self.extents
            .lock()
            .expect("extents lock")
            .insert(first_page, (location, *fingerprint, data));
        Ok(location)
    }

    /// Memory holds what was written, so `check` has nothing to find; it
    /// is applied all the same, so a caller's wrong CRC shows here too.
    async fn read(
        &self,
        fingerprint: &Fingerprint,
        location: ChunkLocation,
        len: u32,
        check: ChunkCheck,
    ) -> Result<Bytes> {
        let extents = self.extents.lock().expect("extents lock");
        if let Some((l, f, data)) = extents.get(&location.first_page) {
            if *l == location && f == fingerprint {
                verify(fingerprint, data, check).map_err(|reason| {
                    StoreError::Backend(format!("chunk at {location:?}: {reason}"))
                })?;
            }
        }
        match extents.get(&location.first_page) {
            Some((l, f, data))
                if *l == location && f == fingerprint && data.len() >= len as usize =>
            {
                Ok(data.slice(..len as usize))
            }
            Some((l, f, _)) if *l == location && f != fingerprint => Err(StoreError::Backend(
                format!("the extent at {location:?} holds chunk {f}, not {fingerprint}"),
            )),
            _ => Err(StoreError::Backend(format!(
                "no extent of {len} bytes at {location:?} (trimmed?)"
            ))),
        }
    }

    async fn trim(&self, location: ChunkLocation) -> Result<()> {
        let mut extents = self.extents.lock().expect("extents lock");
        if matches!(extents.get(&location.first_page), Some((l, _, _)) if *l == location) {
            extents.remove(&location.first_page);
        }
        Ok(())
    }

    async fn extents(&self) -> Result<Vec<(ChunkLocation, Fingerprint)>> {
        Ok(self
            .extents
            .lock()
            .expect("extents lock")
            .values()
            .map(|(l, f, _)| (*l, *f))
            .collect())
    }
}

/// Checks a whole chunk's bytes; the error says what did not match.
pub(crate) fn verify(
    fingerprint: &Fingerprint,
    data: &[u8],
    check: ChunkCheck,
) -> std::result::Result<(), String> {
    verify_parts(fingerprint, [data], check)
}

/// [`verify`] of the concatenation of `parts`, without joining them.
pub(crate) fn verify_parts<'a>(
    fingerprint: &Fingerprint,
    parts: impl IntoIterator<Item = &'a [u8]>,
    check: ChunkCheck,
) -> std::result::Result<(), String> {
    match check {
        ChunkCheck::Crc32c(expected) => {
            let actual = quarry_store_api::chunk_crc32c_of_parts(parts);
            if actual != expected {
                return Err(format!(
                    "the bytes have CRC-32C {actual:08x}, the record says {expected:08x}"
                ));
            }
        }
        ChunkCheck::Sha256 => {
            let actual = Fingerprint::of_parts(parts);
            if actual != *fingerprint {
                return Err(format!(
                    "the bytes hash to {actual}, the header names {fingerprint}"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_name_the_chunk_they_expect() {
        let store = MemChunkStore::new(1024);
        let data = Bytes::from_static(b"chunk bytes");
        let fp = Fingerprint::of(&data);
        let loc = store.write(&fp, data.clone()).await.unwrap();
        assert_eq!(
            store.read(&fp, loc, 5, ChunkCheck::Sha256).await.unwrap(),
            data.slice(..5)
        );
        let other = Fingerprint::of(b"another chunk");
        let e = store
            .read(&other, loc, 5, ChunkCheck::Sha256)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds chunk"), "{e}");
        assert!(
            store.read(&fp, loc, 100, ChunkCheck::Sha256).await.is_err(),
            "longer than the chunk"
        );
        store.trim(loc).await.unwrap();
        assert!(
            store.read(&fp, loc, 5, ChunkCheck::Sha256).await.is_err(),
            "trimmed"
        );
    }
}
