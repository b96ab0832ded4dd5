//! The mount over the volume-backed store (one node on a file device):
//! files written through the mount survive closing everything and opening
//! the device again.

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use common::*;
use quarry_device::{BackendKind, Device, DeviceConfig, Geometry};
use quarry_store::{open_volume_node, ObjectStore, VolumeObjectStore, VolumeStoreConfig};
use quarry_volume::{SpaceManager, VolumeConfig};

/// One node over a file device in `dir`: 2 x 2 chips x 64 blocks x 64
/// pages of 4 KiB (64 MiB).
async fn open_store(dir: &Path) -> (Arc<SpaceManager>, Arc<VolumeObjectStore>) {
    let config = DeviceConfig {
        backend: BackendKind::File,
        geometry: Some(Geometry {
            buses: 2,
            chips_per_bus: 2,
            blocks_per_chip: 64,
            pages_per_block: 64,
            page_size_bytes: 4096,
            oob_size_bytes: 64,
        }),
        direct_io: Some(false),
        ..DeviceConfig::default()
    };
    let device = Arc::new(Device::open(&config, dir).expect("device"));
    let volume = Arc::new(
        SpaceManager::open(device, VolumeConfig::default(), dir)
            .await
            .expect("volume"),
    );
    let (node, _) = open_volume_node(1, Arc::clone(&volume), &VolumeStoreConfig::default())
        .await
        .expect("node");
    let store = ObjectStore::new([Arc::new(node)]).expect("store");
    (volume, Arc::new(store))
}

#[test]
fn files_written_through_the_mount_survive_a_reopen_of_the_volume() {
    if !fuse_available() {
        return;
    }
    init_logs();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let d = dirs(&["mnt", "device"]);
    let device_dir = d.root.path().join("device");
    let big = noise(30, 600_000);

    let (volume, store) = rt.block_on(open_store(&device_dir));
    let m = quarry_mount::mount(Arc::clone(&store), None, &d.mnt, options(&d.spool)).unwrap();
    fs::create_dir(d.mnt.join("vol")).unwrap();
    fs::create_dir_all(d.mnt.join("vol/a/b")).unwrap();
    fs::write(d.mnt.join("vol/a/b/big"), &big).unwrap();
    fs::write(d.mnt.join("vol/a/small"), b"small").unwrap();
    fs::rename(d.mnt.join("vol/a/small"), d.mnt.join("vol/small")).unwrap();
    assert!(fs::read(d.mnt.join("vol/a/b/big")).unwrap() == big);
    m.unmount().unwrap();
    drop(store);
    rt.block_on(volume.close()).unwrap();
    drop(volume);

    let (volume, store) = rt.block_on(open_store(&device_dir));
    let m = quarry_mount::mount(Arc::clone(&store), None, &d.mnt, options(&d.spool)).unwrap();
    assert!(fs::read(d.mnt.join("vol/a/b/big")).unwrap() == big);
    assert_eq!(fs::read(d.mnt.join("vol/small")).unwrap(), b"small");
    let mut names: Vec<String> = fs::read_dir(d.mnt.join("vol/a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["b"]);
    m.unmount().unwrap();
    drop(store);
    rt.block_on(volume.close()).unwrap();
}
