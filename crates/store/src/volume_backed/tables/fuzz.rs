//! The table store's on-disk decoders under hostile bytes: the snapshot,
//! the root page, the log record header and the log record payload (its
//! batches). Each gets random bytes, a valid encoding cut at every length,
//! and valid encodings with bytes changed, both as damage (checksums left
//! as they were, which must catch it) and as a hostile writer would make
//! them (checksums recomputed, so the change reaches the parser). None may
//! panic or make one allocation larger than [`ALLOC_LIMIT_BYTES`]; a
//! claimed count or length far beyond the bytes present is refused at once.

use proptest::prelude::*;
use quarry_testkit::{largest_alloc_bytes, LargestAlloc};

use super::*;

#[global_allocator]
static ALLOC: LargestAlloc = LargestAlloc;

const PAGE_BYTES: usize = 512;

/// No single allocation while one of these inputs (all under 8 KiB) is
/// decoded may be larger.
const ALLOC_LIMIT_BYTES: usize = 64 * 1024;

/// Runs `f`, asserting it made no allocation over the limit.
fn within_limit<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let (value, largest) = largest_alloc_bytes(f);
    assert!(
        largest <= ALLOC_LIMIT_BYTES,
        "{what}: an allocation of {largest} bytes"
    );
    value
}

fn sample_batches() -> Vec<Batch> {
    let mut a = Batch::new();
    a.put(Table::Chunks, b"k1".to_vec(), Bytes::from_static(b"v1"));
    a.put(Table::Buckets, b"k2".to_vec(), Bytes::new());
    a.delete(Table::Manifests, b"k3".to_vec());
    let mut b = Batch::new();
    b.put(
        Table::Manifests,
        b"k3".to_vec(),
        Bytes::from(vec![7u8; 300]),
    );
    b.delete(Table::Chunks, b"k1".to_vec());
    vec![a, b]
}

fn sample_map() -> TableMap {
    let mut map = TableMap::default();
    for b in sample_batches() {
        map.apply(b);
    }
    map.put(Table::Buckets, b"z".to_vec(), Bytes::from(vec![1u8; 900]));
    map
}

/// A log record's payload: batch count, then the batches.
fn log_payload() -> Vec<u8> {
    let batches = sample_batches();
    let mut out = (batches.len() as u32).to_le_bytes().to_vec();
    for b in &batches {
        encode_batch(b, &mut out);
    }
    out
}

fn log_header_page() -> Vec<u8> {
    let mut record = vec![0u8; LOG_HEADER];
    record.extend_from_slice(&log_payload());
    seal_log_record(3, record, PAGE_BYTES)[0].to_vec()
}

fn snapshot_bytes() -> Vec<u8> {
    let pages = encode_snapshot(9, &sample_map(), PAGE_BYTES);
    pages.iter().flat_map(|p| p.iter().copied()).collect()
}

fn root_page() -> Vec<u8> {
    Root {
        snapshot_seq: 9,
        snapshot_first: 2,
        snapshot_pages: 3,
        log_start: 4,
    }
    .encode(PAGE_BYTES)
    .to_vec()
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes a snapshot's checksums (the payload's when the claimed
/// length fits), as a writer that meant the change would.
fn reseal_snapshot(b: &mut [u8]) {
    if b.len() < SNAPSHOT_HEADER {
        return;
    }
    let len = u64_at(b, 24);
    if len <= (b.len() - SNAPSHOT_HEADER) as u64 {
        let crc = crc32c::crc32c(&b[SNAPSHOT_HEADER..SNAPSHOT_HEADER + len as usize]);
        put_u32(b, 32, crc);
    }
    let crc = crc32c::crc32c(&b[..36]);
    put_u32(b, 36, crc);
}

fn reseal_root(b: &mut [u8]) {
    if b.len() >= ROOT_BYTES {
        let crc = crc32c::crc32c(&b[..40]);
        put_u32(b, 40, crc);
    }
}

fn reseal_log_header(b: &mut [u8]) {
    if b.len() >= LOG_HEADER {
        let crc = crc32c::crc32c(&b[..28]);
        put_u32(b, 28, crc);
    }
}

fn mutate(bytes: &[u8], flips: &[(usize, u8)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, x) in flips {
        let i = at % out.len();
        out[i] ^= x;
    }
    out
}

fn apply_payload(payload: &[u8]) -> Result<TableMap> {
    let mut map = TableMap::default();
    apply_log_payload(payload, &mut map)?;
    Ok(map)
}

#[test]
fn a_snapshot_cut_at_every_length_is_refused_until_its_payload_is_whole() {
    let all = snapshot_bytes();
    let whole = SNAPSHOT_HEADER + u64_at(&all, 24) as usize;
    for cut in 0..=all.len() {
        let got = within_limit("snapshot", || decode_snapshot(&all[..cut], 9));
        if cut < whole {
            assert!(got.is_err(), "cut at {cut} of {whole}: {got:?}");
        } else {
            // What follows the payload is the last page's zero fill.
            assert_eq!(got.unwrap(), sample_map(), "cut at {cut}");
        }
    }
}

#[test]
fn a_root_cut_short_is_refused() {
    let page = root_page();
    for cut in 0..=page.len() {
        let got = within_limit("root", || Root::decode(&page[..cut]));
        assert_eq!(got.is_ok(), cut >= ROOT_BYTES, "cut at {cut}: {got:?}");
    }
}

#[test]
fn a_log_header_cut_short_is_not_a_record() {
    let page = log_header_page();
    for cut in 0..=page.len() {
        let got = within_limit("log header", || decode_log_header(&page[..cut], PAGE_BYTES));
        assert_eq!(got.is_some(), cut >= LOG_HEADER, "cut at {cut}: {got:?}");
    }
}

#[test]
fn a_log_payload_cut_at_every_length_is_refused() {
    let payload = log_payload();
    let mut expected = TableMap::default();
    for b in sample_batches() {
        expected.apply(b);
    }
    assert_eq!(apply_payload(&payload).unwrap(), expected);
    for cut in 0..payload.len() {
        let got = within_limit("log payload", || apply_payload(&payload[..cut]));
        assert!(got.is_err(), "cut at {cut}: {got:?}");
    }
}

/// Claimed counts and lengths far beyond the bytes present are refused at
/// once, checksums and all made right. The snapshot length near 2^64 used
/// to wrap its bounds check and panic (an overflow in debug builds, a
/// slice out of range in release).
#[test]
fn huge_claimed_counts_and_lengths_are_refused_at_once() {
    let mut snap = snapshot_bytes();
    for (at, claim) in [
        (16, u64::MAX),
        (24, u64::MAX - 7),
        (24, u64::MAX),
        (24, 1 << 40),
    ] {
        let mut b = snap.clone();
        b[at..at + 8].copy_from_slice(&claim.to_le_bytes());
        reseal_snapshot(&mut b);
        let got = within_limit("snapshot", || decode_snapshot(&b, 9));
        assert!(got.is_err(), "snapshot claiming {claim} at {at}: {got:?}");
    }
    // A record count beyond the records present.
    snap[16..24].copy_from_slice(&1_000_000u64.to_le_bytes());
    reseal_snapshot(&mut snap);
    assert!(within_limit("snapshot", || decode_snapshot(&snap, 9)).is_err());

    let mut header = log_header_page();
    put_u32(&mut header, 16, u32::MAX);
    reseal_log_header(&mut header);
    assert_eq!(decode_log_header(&header, PAGE_BYTES), None);

    // Batch count, op count, key length and value length, each claimed
    // as u32::MAX after a few real bytes.
    let payloads: [&[u8]; 4] = [
        &[0xFF, 0xFF, 0xFF, 0xFF],
        &[1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0],
        &[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 1],
        &[
            1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'k', 0xFF, 0xFF, 0xFF, 0xFF,
        ],
    ];
    for p in payloads {
        let got = within_limit("log payload", || apply_payload(p));
        assert!(got.is_err(), "{p:?}: {got:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A changed snapshot is refused when its checksums were left as they
    /// were, and decodes or is refused, within the limit, when they were
    /// made right.
    #[test]
    fn mutated_snapshots_are_refused_or_decoded(
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
        reseal in any::<bool>(),
    ) {
        let all = snapshot_bytes();
        let whole = SNAPSHOT_HEADER + u64_at(&all, 24) as usize;
        let mut b = mutate(&all, &flips);
        if reseal {
            reseal_snapshot(&mut b);
        }
        let got = within_limit("snapshot", || decode_snapshot(&b, 9));
        let hit_checked = flips.iter().any(|&(at, _)| at % all.len() < whole);
        if !reseal && hit_checked {
            prop_assert!(got.is_err(), "{:?}", got);
        }
    }

    #[test]
    fn mutated_roots_are_refused_or_decoded(
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
        reseal in any::<bool>(),
    ) {
        let page = root_page();
        let mut b = mutate(&page, &flips);
        if reseal {
            reseal_root(&mut b);
        }
        let got = within_limit("root", || Root::decode(&b));
        if !reseal && flips.iter().any(|&(at, _)| at % page.len() < ROOT_BYTES) {
            prop_assert!(got.is_err(), "{:?}", got);
        }
    }

    /// A changed log header is not a record unless its checksum was made
    /// right, and one taken has a length within the limit and the page
    /// count that length needs.
    #[test]
    fn mutated_log_headers_are_records_only_when_consistent(
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
        reseal in any::<bool>(),
    ) {
        let page = log_header_page();
        let mut b = mutate(&page, &flips);
        if reseal {
            reseal_log_header(&mut b);
        }
        let got = within_limit("log header", || decode_log_header(&b, PAGE_BYTES));
        if !reseal && flips.iter().any(|&(at, _)| at % page.len() < LOG_HEADER) {
            prop_assert_eq!(got, None);
        }
        if let Some((_, len, pages, _)) = got {
            prop_assert!(len <= MAX_BATCH_BYTES + 4 * MAX_GROUP + 4);
            prop_assert_eq!(pages, (LOG_HEADER + len).div_ceil(PAGE_BYTES) as u64);
        }
    }

    /// A changed log payload (its CRC is checked before this, so these are
    /// a hostile writer's) is applied or refused within the limit.
    #[test]
    fn mutated_log_payloads_are_applied_or_refused(
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
    ) {
        let b = mutate(&log_payload(), &flips);
        let _ = within_limit("log payload", || apply_payload(&b));
    }

    /// Random bytes, bare and behind a valid magic and format with
    /// checksums made right, never panic any of the four.
    #[test]
    fn random_bytes_are_refused_or_decoded(
        junk in proptest::collection::vec(any::<u8>(), 0..2048),
        seq in 0u64..12,
    ) {
        let _ = within_limit("snapshot", || decode_snapshot(&junk, seq));
        let _ = within_limit("root", || Root::decode(&junk));
        let _ = within_limit("log header", || decode_log_header(&junk, PAGE_BYTES));
        let _ = within_limit("log payload", || apply_payload(&junk));

        let mut snap = SNAPSHOT_MAGIC.to_vec();
        snap.extend_from_slice(&[FORMAT, 0, 0, 0]);
        snap.extend_from_slice(&seq.to_le_bytes());
        snap.extend_from_slice(&junk);
        reseal_snapshot(&mut snap);
        let _ = within_limit("snapshot", || decode_snapshot(&snap, seq));

        let mut root = ROOT_MAGIC.to_vec();
        root.extend_from_slice(&[FORMAT, 0, 0, 0]);
        root.extend_from_slice(&junk);
        reseal_root(&mut root);
        let got = within_limit("root", || Root::decode(&root));
        prop_assert_eq!(got.is_ok(), root.len() >= ROOT_BYTES);

        let mut header = LOG_MAGIC.to_vec();
        header.extend_from_slice(&[FORMAT, 0, 0, 0]);
        header.extend_from_slice(&junk);
        reseal_log_header(&mut header);
        let _ = within_limit("log header", || decode_log_header(&header, PAGE_BYTES));
    }
}
