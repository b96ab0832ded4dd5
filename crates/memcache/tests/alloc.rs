//! What a parse allocates: never what a claimed length or count asks for
//! before the bytes are there, and never more than a small multiple of the
//! bytes it was given plus a bound set by `Limits`. The test binary counts
//! every allocation of the thread that runs a parse.

use bytes::BytesMut;
use proptest::prelude::*;
use quarry_memcache::{parse, parse_bytes, parse_reply, CommandReader, Limits, Parsed};
use quarry_testkit::allocated_bytes as allocated;

#[global_allocator]
static ALLOC: quarry_testkit::LargestAlloc = quarry_testkit::LargestAlloc;

/// The most a parse of `input` may allocate: the line copied once or
/// twice (keys, flags), a data block, 32 bytes a key in a retrieval's key
/// list (a key takes at least 2 bytes of input, so at most 16 times the
/// input, and at most 32 bytes times `max_keys_per_get`), and a little for
/// `Bytes`' bookkeeping.
fn bound_bytes(input_bytes: usize, limits: &Limits) -> usize {
    let seen = input_bytes.min(limits.max_get_line_bytes + limits.max_value_bytes + 2);
    let key_list = (16 * seen).min(32 * limits.max_keys_per_get);
    3 * seen + key_list + 1024
}

fn check(input: &[u8], limits: &Limits) {
    let (_, total, largest) = allocated(|| parse(input, limits));
    let bound = bound_bytes(input.len(), limits);
    assert!(
        total <= bound,
        "parse of {} bytes allocated {total} bytes (bound {bound}): {:?}",
        input.len(),
        String::from_utf8_lossy(&input[..input.len().min(80)])
    );
    assert!(largest <= input.len().max(32 * limits.max_keys_per_get) + 64);
    let (_, total, _) = allocated(|| parse_reply(input, limits));
    assert!(
        total
            <= 3 * input
                .len()
                .min(limits.max_line_bytes + limits.max_value_bytes + 2)
                + 40 * input.len().min(limits.max_line_bytes)
                + 1024
    );
}

#[test]
fn claimed_lengths_allocate_nothing_before_the_bytes_come() {
    let limits = Limits::default();
    for input in [
        &b"set k 0 0 1048576\r\n"[..],
        b"set k 0 0 1048576\r\nabc",
        b"set k 0 0 4294967295\r\n",
        b"set k 0 0 2147483645\r\n",
        b"cas k 0 0 1048576 1\r\n",
        b"ms k 1048576\r\n",
        b"ms k 2147483645 T0 F1\r\n",
        b"VALUE k 0 1048576\r\n",
        b"VA 1048576 c1\r\n",
    ] {
        let (_, total, _) = allocated(|| parse(input, &limits));
        assert!(total < 1024, "{input:?}: {total} bytes");
        let (_, total, _) = allocated(|| parse_reply(input, &limits));
        assert!(total < 1024, "{input:?}: {total} bytes");
    }
}

#[test]
fn long_lines_and_many_keys_stay_in_bounds() {
    let limits = Limits::default();
    let keys = |count: usize, key: &str| format!("get {}\r\n", vec![key; count].join(" "));
    for input in [
        keys(4096, "k"),
        keys(4097, "k"),
        keys(2000, &"k".repeat(30)),
        format!("get {}", "k ".repeat(32_000)),
        format!("get {}", "k ".repeat(40_000)),
        format!("set k 0 0 1{}", " ".repeat(5000)),
        format!("stats {}\r\n", "a ".repeat(1000)),
        format!(
            "mg {} b k v c t s f O{}\r\n",
            "QUJD".repeat(62),
            "1".repeat(31)
        ),
        format!("HD {}\r\n", "k ".repeat(1000)),
        format!("ME k {}\r\n", "a=b ".repeat(500)),
    ] {
        check(input.as_bytes(), &limits);
    }
    // The key list of the largest retrieval, against its absolute bound.
    let largest = keys(4096, "k");
    let (_, total, _) = allocated(|| parse(largest.as_bytes(), &limits));
    assert!(total <= 2 * largest.len() + 32 * 4096 + 1024, "{total}");
}

#[test]
fn a_reader_allocates_only_what_it_hands_out() {
    let limits = Limits::default();
    let mut reader = CommandReader::new(limits);
    let mut buf = BytesMut::with_capacity(4 << 20);
    let mut value = b"set k 0 0 1048576\r\n".to_vec();
    value.resize(value.len() + 1_048_576, b'x');
    value.extend_from_slice(b"\r\n");
    // Fed a byte at a time, the line is parsed when it is whole and again
    // when the data is: a key each time, never the claimed length, and
    // nothing while bytes trickle in (the data block is split off the
    // buffer).
    let mut all_reads_bytes = 0;
    for (i, &byte) in value.iter().enumerate() {
        buf.extend_from_slice(&[byte]);
        let (parsed, total, _) = allocated(|| reader.read(&mut buf));
        all_reads_bytes += total;
        if i + 1 < value.len() {
            assert_eq!(parsed, Parsed::Incomplete);
        } else {
            assert!(matches!(parsed, Parsed::Complete { .. }));
        }
    }
    assert!(all_reads_bytes < 256, "{all_reads_bytes}");
    let mut buf = BytesMut::from(&value[..]);
    let (_, total, _) = allocated(|| parse_bytes(&mut buf, &limits));
    assert!(total < 256, "{total}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_input_stays_in_bounds(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        check(&bytes, &Limits::default());
    }

    #[test]
    fn command_shaped_input_stays_in_bounds(
        name in prop::sample::select(vec!["get", "gets", "gat 1", "set", "ms", "mg", "md", "ma", "me", "stats", "VA", "VALUE"]),
        words in prop::collection::vec("[a-zA-Z0-9=+/]{0,12}", 0..200),
        tail in prop::collection::vec(any::<u8>(), 0..64),
        small in any::<bool>(),
    ) {
        let limits = if small {
            Limits { max_line_bytes: 64, max_get_line_bytes: 256, max_keys_per_get: 8, max_value_bytes: 16, ..Limits::default() }
        } else {
            Limits::default()
        };
        let mut input = format!("{name} {}\r\n", words.join(" ")).into_bytes();
        input.extend_from_slice(&tail);
        check(&input, &limits);
    }
}
