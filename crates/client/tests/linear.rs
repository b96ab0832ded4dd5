//! The linear page space through the client, against an in-process cluster of
//! `mem` nodes on loopback.

mod common;

use common::{cluster, small_geometry};
use quarry_client::{
    Client, ClientError, LinearSpaceError, Status, MAX_LINEAR_PAGES, MAX_LINEAR_QUEUE_DEPTH,
};
use quarry_device::Geometry;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 512) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_then_read_a_linear_stream_across_four_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster(dir.path(), &[small_geometry(); 4]).await;
    let client = Client::connect(&nodes[1].local_addr().to_string())
        .await
        .expect("connect");
    let space = client.linear_space().await.expect("linear space");
    assert_eq!(space.nodes(), &[0, 1, 2, 3]);
    assert_eq!(space.pages(), 4 * small_geometry().pages());
    assert_eq!(space.stride(), 16);

    // 3 pages per block of every chip and a short last page: the stream
    // crosses block pages in order, and the queue depth (64) is wider than
    // the stride (16), which the write must narrow to keep block order.
    let data = pattern(16 * 3 * 512 + 100);
    let written = client
        .write_linear(&space, 0, &data, 64)
        .await
        .expect("write");
    assert_eq!(written, 49);
    let pages = client
        .read_linear(&space, 0, written, 64)
        .await
        .expect("read");
    assert_eq!(pages.len(), 49);
    let mut read = Vec::new();
    for page in &pages {
        assert!(!page.erased);
        read.extend_from_slice(&page.data);
    }
    assert_eq!(&read[..data.len()], &data[..]);
    assert!(read[data.len()..].iter().all(|&b| b == 0), "zero padded");

    // Every page is where the permutation says, read by its global address.
    let mut nodes_hit = std::collections::BTreeSet::new();
    for linear in 0..written {
        let addr = space.to_global(linear).expect("in range");
        nodes_hit.insert(addr.node);
        let page = client.read_page(addr).await.expect("read global");
        assert_eq!(page.data, pages[linear as usize].data, "{addr}");
    }
    assert_eq!(nodes_hit.len(), 4);

    // The page after the stream was never programmed: it reads erased.
    let tail = client
        .read_linear(&space, written, 1, 1)
        .await
        .expect("read erased");
    assert!(tail[0].erased);

    // Programming a page twice names the linear page and its address.
    let error = client
        .write_linear(&space, 5, &[1, 2, 3], 1)
        .await
        .expect_err("already programmed");
    assert_eq!(error.status(), Some(Status::AlreadyProgrammed));
    let addr = space.to_global(5).expect("in range");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("linear page 5 ({addr}): ")),
        "{text}"
    );
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_ranges_are_checked_before_sending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster(dir.path(), &[small_geometry(); 2]).await;
    let client = Client::connect(&nodes[0].local_addr().to_string())
        .await
        .expect("connect");
    let space = client.linear_space().await.expect("linear space");
    let pages = space.pages();
    match client.read_linear(&space, pages - 1, 2, 4).await {
        Err(ClientError::LinearSpace(LinearSpaceError::OutOfRange { linear, pages: p })) => {
            assert_eq!((linear, p), (pages, pages));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client.read_linear(&space, u64::MAX, 2, 4).await,
        Err(ClientError::LinearSpace(_))
    ));
    assert!(matches!(
        client.read_linear(&space, 0, MAX_LINEAR_PAGES + 1, 4).await,
        Err(ClientError::TooManyPages { .. })
    ));
    for depth in [0, MAX_LINEAR_QUEUE_DEPTH + 1] {
        let error = client
            .read_linear(&space, 0, 1, depth)
            .await
            .expect_err("bad depth");
        assert!(
            matches!(error, ClientError::InvalidQueueDepth { .. }),
            "{error}"
        );
    }
    let too_long = vec![0u8; 512 * 3];
    assert!(matches!(
        client.write_linear(&space, pages - 2, &too_long, 4).await,
        Err(ClientError::LinearSpace(
            LinearSpaceError::OutOfRange { .. }
        ))
    ));
    assert_eq!(
        client.write_linear(&space, 0, &[], 4).await.expect("empty"),
        0
    );
    assert!(client
        .read_linear(&space, 0, 0, 4)
        .await
        .expect("empty")
        .is_empty());
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_geometry_names_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let odd = Geometry {
        chips_per_bus: 4,
        ..small_geometry()
    };
    let nodes = cluster(dir.path(), &[small_geometry(), small_geometry(), odd]).await;
    let client = Client::connect(&nodes[0].local_addr().to_string())
        .await
        .expect("connect");
    let error = client.linear_space().await.expect_err("geometries differ");
    assert_eq!(
        error.to_string(),
        "node 2's geometry differs from node 0's: chips_per_bus 4 (node 0 has 2)"
    );
    for node in nodes {
        node.shutdown().await.expect("shutdown");
    }
}

/// Kernels run on raw nodes too: a linear range written as raw pages is
/// scanned near the data, records cut at every page and node boundary
/// counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernels_scan_a_linear_range_on_raw_nodes() {
    use quarry_client::{Job, KernelSpec, Limits, Outcome, Output, Target, WcSpec};
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = cluster(dir.path(), &[small_geometry(); 4]).await;
    let client = Client::connect(&nodes[2].local_addr().to_string())
        .await
        .expect("connect");
    let space = client.linear_space().await.expect("linear space");
    let page = space.geometry().page_size_bytes as usize;
    // Words straddle every page, so every node boundary: "flash" and
    // "raw" repeat with a period that is no divisor of the page size.
    let text: Vec<u8> = b"flash raw  pages\n"
        .iter()
        .copied()
        .cycle()
        .take(page * 40)
        .collect();
    let written = client
        .write_linear(&space, 0, &text, 16)
        .await
        .expect("write");
    assert_eq!(written, 40);
    let (result, _) = client
        .compute()
        .run(
            Job::Scan(KernelSpec::Wc(WcSpec {
                words: true,
                word: Some(b"flash".to_vec()),
                top: None,
                locale: quarry_client::WcLocale::C,
            })),
            vec![Target::Linear {
                first_page: 0,
                pages: written,
            }],
            Limits::default(),
        )
        .await
        .expect("scan");
    let Outcome::Scan(targets) = result.outcome else {
        panic!("not a scan")
    };
    let Output::Wc(wc) = &targets[0].output else {
        panic!("not wc")
    };
    let words: Vec<&[u8]> = text
        .split(|b| b" \n".contains(b))
        .filter(|w| !w.is_empty())
        .collect();
    assert_eq!(wc.bytes, text.len() as u64);
    assert_eq!(
        wc.lines,
        text.iter().filter(|&&b| b == b'\n').count() as u64
    );
    assert_eq!(wc.words, words.len() as u64);
    assert_eq!(
        wc.word_count,
        Some(words.iter().filter(|w| **w == b"flash").count() as u64)
    );
    for n in nodes {
        n.shutdown().await.expect("shutdown");
    }
}
