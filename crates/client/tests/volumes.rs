//! Block volumes through the client, against in-process clusters of
//! managed nodes on loopback: every call crosses the protocol and the
//! fabric to the member that holds the page.

mod common;

use common::{cluster_on, cluster_with};
use quarry_client::{BlockVolumeError, Client, ClientError, Volumes};
use quarry_device::Geometry;
use quarry_node::StorageMode;

fn geometry() -> Geometry {
    Geometry {
        buses: 2,
        chips_per_bus: 2,
        blocks_per_chip: 64,
        pages_per_block: 32,
        page_size_bytes: 4096,
        oob_size_bytes: 64,
    }
}

const PS: usize = 4096;

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    quarry_testkit::noise_bytes(len, seed)
}

async fn volumes_at(addr: std::net::SocketAddr) -> Volumes {
    Client::connect(&addr.to_string())
        .await
        .unwrap()
        .volumes()
        .await
        .unwrap()
}

fn live_pages(listing: &quarry_client::VolumeListing, node: u16) -> u64 {
    listing
        .nodes
        .iter()
        .find(|n| n.node == node)
        .map(|n| n.live_pages)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_over_three_of_four_nodes_through_any_entry_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_with(dir.path(), &[geometry(); 4], StorageMode::Managed).await;
    let a = volumes_at(nodes[0].local_addr()).await;
    let b = volumes_at(nodes[3].local_addr()).await;
    let before = a.list().await.unwrap();

    let def = a
        .create("db", 300 * PS as u64, Some(vec![1, 2, 3]))
        .await
        .unwrap();
    assert_eq!((def.size_pages, def.page_size_bytes), (300, 4096));
    // Written through node 0, which holds none of it.
    let vol = a.open("db").await.unwrap();
    let data = bytes(100 * PS, 1);
    vol.write_pages(0, &data).await.unwrap();
    vol.write_range(150 * PS as u64 + 100, b"across the fabric")
        .await
        .unwrap();
    // Read through node 3.
    let other = b.open("db").await.unwrap();
    assert_eq!(&other.read_pages(0, 100).await.unwrap()[..], &data[..]);
    assert_eq!(
        &other.read_range(150 * PS as u64 + 100, 17).await.unwrap()[..],
        b"across the fabric"
    );
    assert!(other
        .read_pages(200, 100)
        .await
        .unwrap()
        .iter()
        .all(|b| *b == 0));

    // Page L went to member L % 3: pages 0..100 give 34, 33, 33, and page
    // 150 goes to node 1 (150 % 3 = 0).
    assert_eq!(other.locate(150).unwrap(), (1, 50));
    let status = b.status("db").await.unwrap();
    let used: Vec<(u16, Option<u64>)> = status
        .members
        .iter()
        .map(|m| (m.node, m.used_pages))
        .collect();
    assert_eq!(used, vec![(1, Some(35)), (2, Some(33)), (3, Some(33))]);
    let during = b.list().await.unwrap();
    assert_eq!(live_pages(&during, 0), live_pages(&before, 0));
    for (node, pages) in [(1, 35), (2, 33), (3, 33)] {
        assert_eq!(
            live_pages(&during, node),
            live_pages(&before, node) + pages,
            "node {node}"
        );
    }
    assert_eq!(during.volumes.len(), 1);
    assert_eq!(during.volumes[0].used_pages, 101);

    // Bad input: errors that name what was wrong, carried by kind.
    let e = other.read_pages(299, 2).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::OutOfRange { .. }), "{e}");
    assert!(e
        .to_string()
        .contains("pages 299..301 are outside its 300 pages"));
    let e = b.open("nope").await.err().unwrap();
    assert!(matches!(e, BlockVolumeError::NotFound { .. }), "{e}");
    let e = b.create("db", 4096, None).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::Exists { .. }), "{e}");
    let e = b.create("x", 4097, None).await.unwrap_err();
    assert!(e.to_string().contains("not a whole number"), "{e}");
    let e = b.create("x", 4096, Some(vec![7])).await.unwrap_err();
    assert!(e.to_string().contains("node 7 is not a member"), "{e}");

    // Delete frees every page on every member.
    assert_eq!(b.delete("db").await.unwrap(), 101);
    let after = a.list().await.unwrap();
    assert!(after.volumes.is_empty());
    for node in 0..4 {
        assert_eq!(
            live_pages(&after, node),
            live_pages(&before, node),
            "node {node}"
        );
    }
    let e = vol.read_page(0).await.unwrap_err();
    assert!(matches!(e, BlockVolumeError::NotFound { .. }), "{e}");
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_survive_a_restart_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = cluster_on(dir.path(), &[geometry(); 3], StorageMode::Managed, true).await;
    let volumes = volumes_at(nodes[2].local_addr()).await;
    volumes
        .create("keep", 64 * PS as u64, Some(vec![0, 1]))
        .await
        .unwrap();
    volumes.create("other", 8 * PS as u64, None).await.unwrap();
    let keep = volumes.open("keep").await.unwrap();
    let data = bytes(40 * PS + 1000, 3);
    keep.write_range(5, &data).await.unwrap();
    drop((keep, volumes));
    for n in nodes {
        n.shutdown().await.unwrap();
    }

    let nodes = cluster_on(dir.path(), &[geometry(); 3], StorageMode::Managed, true).await;
    let volumes = volumes_at(nodes[0].local_addr()).await;
    let names: Vec<String> = volumes
        .list()
        .await
        .unwrap()
        .volumes
        .into_iter()
        .map(|v| v.def.name)
        .collect();
    assert_eq!(names, vec!["keep", "other"]);
    let keep = volumes.open("keep").await.unwrap();
    assert_eq!(
        &keep.read_range(5, data.len() as u64).await.unwrap()[..],
        &data[..]
    );
    assert_eq!(&keep.read_range(0, 5).await.unwrap()[..], &[0u8; 5]);
    for n in nodes {
        n.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_nodes_refuse_volumes_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let raw = cluster_with(dir.path(), &[geometry(); 1], StorageMode::Raw).await;
    let client = Client::connect(&raw[0].local_addr().to_string())
        .await
        .unwrap();
    let volumes = client.volumes().await.unwrap();
    let e = volumes.create("v", 4096, None).await.unwrap_err();
    assert!(
        matches!(&e, BlockVolumeError::Refused { node: 0, message } if message.contains("storage mode \"managed\"")),
        "{e}"
    );
    // A listing passes over it rather than failing.
    let listing = volumes.list().await.unwrap();
    assert_eq!(listing.not_serving, vec![0]);
    // Through ClientError, the message is unchanged.
    let e: ClientError = e.into();
    assert!(e.to_string().contains("refused the volume call"), "{e}");
}
