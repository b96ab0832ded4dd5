//! Helpers shared by the volume-backed store's tests and `store-crash-writer`
//! (which compiles this file too, hence `allow(dead_code)`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
use quarry_store::{
    ChunkLocation, ChunkStore, Fingerprint, VolumeChunkConfig, VolumeObjectStore,
    VolumeStoreConfig, VolumeTableConfig,
};
use quarry_volume::{SpaceManager, VolumeConfig};

/// 2 buses x 2 chips x 32 blocks x 32 pages of 1 KiB: 4096 pages, 4 MiB.
pub fn geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 32,
        pages_per_block: 32,
        page_size_bytes: 1024,
        oob_size_bytes: 64,
    }
}

/// [`geometry`]'s bytes in pages of 4 KiB, four sectors each: the tables'
/// log packs small records into a page's sectors and writes a page again
/// from sector 0 when it takes no more in place, which 1 KiB pages (one
/// sector) never do.
pub fn sectored_geometry() -> Geometry {
    Geometry {
        blocks_per_chip: 8,
        page_size_bytes: 4096,
        ..geometry()
    }
}

/// The geometry named `name` ("1k": [`geometry`], "4k": [`sectored_geometry`]).
pub fn geometry_named(name: &str) -> Option<Geometry> {
    match name {
        "1k" => Some(geometry()),
        "4k" => Some(sectored_geometry()),
        _ => None,
    }
}

pub fn open_device(backend: BackendKind, dir: &Path) -> Arc<Device> {
    open_device_with(backend, dir, geometry())
}

/// The tests' device: through the page cache, seeded.
pub fn device_config(backend: BackendKind, geometry: Geometry) -> DeviceConfig {
    DeviceConfig {
        backend,
        geometry: Some(geometry),
        direct_io: Some(false),
        seed: Some(7),
        ..DeviceConfig::default()
    }
}

pub fn open_device_with(backend: BackendKind, dir: &Path, geometry: Geometry) -> Arc<Device> {
    Arc::new(Device::open(&device_config(backend, geometry), dir).expect("open device"))
}

/// A device and a space manager over it in `dir`.
pub async fn open_volume(
    backend: BackendKind,
    dir: &Path,
    config: VolumeConfig,
) -> (Arc<SpaceManager>, Weak<Device>) {
    open_volume_with(backend, dir, config, geometry()).await
}

/// [`open_volume`] of another geometry.
pub async fn open_volume_with(
    backend: BackendKind,
    dir: &Path,
    config: VolumeConfig,
    geometry: Geometry,
) -> (Arc<SpaceManager>, Weak<Device>) {
    let device = open_device_with(backend, dir, geometry);
    let weak = Arc::downgrade(&device);
    let volume = SpaceManager::open(device, config, dir)
        .await
        .expect("open space manager");
    (Arc::new(volume), weak)
}

/// Background work off: page counts move only when the test moves them.
pub fn quiet() -> VolumeConfig {
    VolumeConfig {
        background: false,
        ..VolumeConfig::default()
    }
}

/// The node's spaces as default, with compaction after 32 log pages so the
/// tests see snapshots.
pub fn store_config() -> VolumeStoreConfig {
    VolumeStoreConfig {
        tables: VolumeTableConfig {
            compact_min_log_pages: 32,
            ..VolumeTableConfig::default()
        },
        chunks: VolumeChunkConfig::default(),
    }
}

/// Waits until the device is gone (every store and task holding the space
/// manager has let go), as after a crash: a reopen then sees only what
/// reached the backing file.
pub async fn wait_released(device: Weak<Device>) {
    for _ in 0..500 {
        if device.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the device outlived its stores by 5 s");
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `len` pseudo-random bytes from `seed`.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut s = seed;
    while out.len() < len {
        s = splitmix(s);
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Object content number `c`: 1 KiB segments, the first naming `c`, the
/// others shared by every content with the same `c % 3` (so contents
/// share chunks), 1500 + 900 c bytes in all.
pub fn content(c: u64) -> Vec<u8> {
    let len = 1500 + 900 * c as usize;
    let mut out = Vec::with_capacity(len + 1024);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&noise(c << 8, 1016));
    let mut j = 1u64;
    while out.len() < len {
        out.extend_from_slice(&noise(((c % 3) << 32) | j, 1024));
        j += 1;
    }
    out.truncate(len);
    out
}

/// A deterministic random stream.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = splitmix(self.0);
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every chunk count equals the references live manifests make, every
/// chunk reads back, the chunk store holds exactly the records' extents,
/// and the volume's live pages are the chunks' pages plus the tables'.
pub async fn assert_exact(s: &VolumeObjectStore, context: &str) {
    // Per chunk and the node that must hold it: a small object's manifest
    // node when it keeps its chunk there, else the fingerprint's node.
    let mut want: HashMap<(u16, Fingerprint), u64> = HashMap::new();
    for n in s.nodes() {
        for m in n.all_manifests().await.unwrap() {
            for c in m.chunks() {
                let home = if m.chunk_at_manifest_node() {
                    n.id()
                } else {
                    s.placement().chunk_node(&c.fingerprint)
                };
                *want.entry((home, c.fingerprint)).or_default() += 1;
            }
        }
    }
    let mut have: HashMap<(u16, Fingerprint), u64> = HashMap::new();
    for n in s.nodes() {
        let chunks = n.chunks().await.unwrap();
        let mut records: Vec<(ChunkLocation, Fingerprint)> =
            chunks.iter().map(|(fp, i)| (i.location, *fp)).collect();
        let mut extents = n.data().extents().await.unwrap();
        records.sort();
        extents.sort();
        assert_eq!(
            records,
            extents,
            "{context}node {}: extents are the records'",
            n.id()
        );
        let mut pages = 0;
        for (fp, info) in chunks {
            have.insert((n.id(), fp), info.refcount);
            pages += u64::from(info.location.pages);
            n.read_chunk(fp).await.unwrap();
        }
        let volume = n.data().volume();
        let chunk_pages = volume.pages_in(n.data().space()).len() as u64;
        assert_eq!(chunk_pages, pages, "{context}node {}: chunk pages", n.id());
        assert_eq!(n.data().stats().pages, pages);
        assert_eq!(
            volume.stats().live_pages,
            chunk_pages + n.tables().pages(),
            "{context}node {}: live pages are the chunks' and the tables'",
            n.id()
        );
        volume.verify().unwrap();
    }
    assert_eq!(
        have, want,
        "{context}chunk counts are the manifests' references"
    );
}
