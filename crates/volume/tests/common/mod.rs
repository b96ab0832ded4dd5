//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
use quarry_volume::{FaultPlan, LogicalPage, SpaceManager, VolumeConfig};

/// 2 buses x 2 chips x 16 blocks x 16 pages of 512 bytes: 64 blocks, 1024 pages.
pub fn small() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 16,
        pages_per_block: 16,
        page_size_bytes: 512,
        oob_size_bytes: 64,
    }
}

pub fn device_config(backend: BackendKind, geometry: Geometry) -> DeviceConfig {
    DeviceConfig {
        backend,
        geometry: Some(geometry),
        direct_io: Some(false),
        seed: Some(7),
        ..DeviceConfig::default()
    }
}

pub fn open_device(backend: BackendKind, geometry: Geometry, dir: &Path) -> Arc<Device> {
    Arc::new(Device::open(&device_config(backend, geometry), dir).expect("open device"))
}

/// A manager with background work off (deterministic) unless `config` says otherwise.
pub async fn open(
    backend: BackendKind,
    geometry: Geometry,
    dir: &Path,
    config: VolumeConfig,
) -> (SpaceManager, Weak<Device>) {
    open_faulty(backend, geometry, dir, config, FaultPlan::new()).await
}

pub async fn open_faulty(
    backend: BackendKind,
    geometry: Geometry,
    dir: &Path,
    config: VolumeConfig,
    faults: FaultPlan,
) -> (SpaceManager, Weak<Device>) {
    let device = open_device(backend, geometry, dir);
    let weak = Arc::downgrade(&device);
    let m = SpaceManager::open_with_faults(device, config, dir, faults)
        .await
        .expect("open space manager");
    (m, weak)
}

pub fn quiet() -> VolumeConfig {
    VolumeConfig {
        background: false,
        ..VolumeConfig::default()
    }
}

/// Drops a manager as a crash would (no close) and waits until its device is
/// gone, so a reopen sees only what reached the backing file.
pub async fn crash(m: SpaceManager, device: Weak<Device>) {
    drop(m);
    for _ in 0..500 {
        if device.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the device outlived its manager by 5 s");
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Page content that names its logical page and version: 4 bytes space,
/// 8 bytes index, 8 bytes version, then bytes derived from all three.
pub fn content(id: LogicalPage, version: u64, size: usize) -> Bytes {
    let mut v = Vec::with_capacity(size);
    v.extend_from_slice(&id.space.to_le_bytes());
    v.extend_from_slice(&id.index.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let mut s = splitmix(u64::from(id.space) ^ id.index.rotate_left(17) ^ version.rotate_left(40));
    while v.len() < size {
        s = splitmix(s);
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(size);
    Bytes::from(v)
}

/// The version a page's content claims, after checking that the whole page
/// is exactly that version's content for `id`.
pub fn version_of(id: LogicalPage, data: &[u8]) -> u64 {
    let version = u64::from_le_bytes(data[12..20].try_into().unwrap());
    assert_eq!(
        &content(id, version, data.len())[..],
        data,
        "page {id} is not an intact version {version}"
    );
    version
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

/// The crash test's device: 2 buses x 2 chips x 24 blocks x 16 pages of 512
/// bytes (1536 pages), shared by `volume-crash-writer` and `tests/crash.rs`.
pub fn crash_geometry() -> Geometry {
    Geometry {
        blocks_per_chip: 24,
        ..small()
    }
}
