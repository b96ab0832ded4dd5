//! Property tests of the parsers, run by `cargo test`: arbitrary and
//! mangled input never panics and never yields a command that breaks the
//! rules; valid commands and answers survive an encode and a parse; a
//! stream cut anywhere, or fed a byte at a time, reads the same as whole.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use quarry_memcache::{
    parse, parse_bytes, parse_reply, ArithmeticOp, Command, CommandReader, Get, ItemView, Limits,
    MetaArithmetic, MetaCode, MetaDebug, MetaDelete, MetaFlag, MetaGet, MetaReply, MetaSet, Parsed,
    ParsedReply, ProtocolError, Reply, ReturnFlag, ReturnFlags, SetMode, Store, StoreOp,
};

fn text_key() -> impl Strategy<Value = Bytes> {
    let byte = prop_oneof![8 => 0x21u8..0x7f, 1 => 0x80u8..=0xff];
    prop_oneof![
        20 => prop::collection::vec(byte.clone(), 1..12),
        1 => prop::collection::vec(byte, 240..=250),
    ]
    .prop_map(Bytes::from)
}

/// A key and whether it travels in base64 (a binary key of at most 186
/// bytes, whose base64 is at most 248: 252 would be over 250).
fn meta_key() -> impl Strategy<Value = (Bytes, bool)> {
    prop_oneof![
        3 => text_key().prop_map(|key| (key, false)),
        1 => prop::collection::vec(any::<u8>(), 1..=186).prop_map(|key| (Bytes::from(key), true)),
    ]
}

fn word() -> impl Strategy<Value = Bytes> {
    "[a-z_]{1,10}".prop_map(|w| Bytes::from(w.into_bytes()))
}

fn data() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        10 => prop::collection::vec(any::<u8>(), 0..64),
        1 => prop::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), any::<u8>()], 0..600),
    ]
    .prop_map(Bytes::from)
}

/// Return flags of `allowed` in any order, and an opaque exactly when
/// `Opaque` is among them.
fn returns(allowed: &'static [ReturnFlag]) -> impl Strategy<Value = (ReturnFlags, Option<Bytes>)> {
    (
        Just(allowed.to_vec()).prop_shuffle(),
        prop::collection::vec(any::<bool>(), allowed.len()),
        "[!-~]{0,31}",
    )
        .prop_map(|(order, keep, opaque)| {
            let flags: ReturnFlags = order
                .into_iter()
                .zip(keep)
                .filter_map(|(flag, keep)| keep.then_some(flag))
                .collect();
            let opaque = flags
                .contains(ReturnFlag::Opaque)
                .then(|| Bytes::from(opaque.into_bytes()));
            (flags, opaque)
        })
}

const GET_RETURNS: &[ReturnFlag] = &[
    ReturnFlag::Cas,
    ReturnFlag::ClientFlags,
    ReturnFlag::Hit,
    ReturnFlag::Key,
    ReturnFlag::LastAccess,
    ReturnFlag::Opaque,
    ReturnFlag::Size,
    ReturnFlag::Ttl,
];

fn classic_command() -> impl Strategy<Value = Command> {
    let store_op = prop_oneof![
        Just(StoreOp::Set),
        Just(StoreOp::Add),
        Just(StoreOp::Replace),
        Just(StoreOp::Append),
        Just(StoreOp::Prepend),
        any::<u64>().prop_map(|unique| StoreOp::Cas { unique }),
    ];
    let op = prop_oneof![Just(ArithmeticOp::Incr), Just(ArithmeticOp::Decr)];
    prop_oneof![
        (prop::collection::vec(text_key(), 1..8), any::<bool>()).prop_map(|(keys, return_cas)| {
            Command::Get(Get {
                keys,
                return_cas,
                touch_exptime: None,
            })
        }),
        (
            prop::collection::vec(text_key(), 0..8),
            any::<bool>(),
            any::<i64>()
        )
            .prop_map(|(keys, return_cas, exptime)| Command::Get(Get {
                keys,
                return_cas,
                touch_exptime: Some(exptime)
            })),
        (
            store_op,
            text_key(),
            any::<u32>(),
            any::<i64>(),
            data(),
            any::<bool>()
        )
            .prop_map(|(op, key, flags, exptime, data, noreply)| {
                Command::Store(Store {
                    op,
                    key,
                    flags,
                    exptime,
                    data,
                    noreply,
                })
            }),
        (text_key(), any::<bool>()).prop_map(|(key, noreply)| Command::Delete { key, noreply }),
        (op, text_key(), any::<u64>(), any::<bool>()).prop_map(|(op, key, delta, noreply)| {
            Command::Arithmetic {
                op,
                key,
                delta,
                noreply,
            }
        }),
        (text_key(), any::<i64>(), any::<bool>()).prop_map(|(key, exptime, noreply)| {
            Command::Touch {
                key,
                exptime,
                noreply,
            }
        }),
        (proptest::option::of(any::<i64>()), any::<bool>())
            .prop_map(|(delay, noreply)| Command::FlushAll { delay, noreply }),
        (any::<u32>(), any::<bool>())
            .prop_map(|(level, noreply)| Command::Verbosity { level, noreply }),
        prop::collection::vec(word(), 0..4).prop_map(|args| Command::Stats { args }),
        Just(Command::Version),
        Just(Command::Quit),
        Just(Command::MetaNoop),
    ]
}

fn meta_get() -> impl Strategy<Value = Command> {
    (
        meta_key(),
        returns(GET_RETURNS),
        any::<[bool; 3]>(),
        any::<[Option<i64>; 3]>(),
        any::<[Option<u64>; 2]>(),
    )
        .prop_map(
            |((key, base64_key), (returns, opaque), bools, exptimes, cas)| {
                Command::MetaGet(MetaGet {
                    key,
                    base64_key,
                    returns,
                    opaque,
                    quiet: bools[0],
                    return_value: bools[1],
                    no_lru_bump: bools[2],
                    vivify_exptime: exptimes[0],
                    recache_exptime: exptimes[1],
                    new_exptime: exptimes[2],
                    compare_cas: cas[0],
                    new_cas: cas[1],
                })
            },
        )
}

fn meta_set() -> impl Strategy<Value = Command> {
    let mode = prop_oneof![
        Just(SetMode::Set),
        Just(SetMode::Add),
        Just(SetMode::Append),
        Just(SetMode::Prepend),
        Just(SetMode::Replace),
    ];
    const SET_RETURNS: &[ReturnFlag] = &[
        ReturnFlag::Cas,
        ReturnFlag::Key,
        ReturnFlag::Opaque,
        ReturnFlag::Size,
    ];
    (
        (meta_key(), data(), returns(SET_RETURNS), any::<[bool; 2]>()),
        (
            any::<u32>(),
            any::<i64>(),
            any::<[Option<u64>; 2]>(),
            mode,
            any::<Option<i64>>(),
        ),
    )
        .prop_map(
            |(
                ((key, base64_key), data, (returns, opaque), bools),
                (flags, exptime, cas, mode, vivify),
            )| {
                Command::MetaSet(MetaSet {
                    key,
                    base64_key,
                    data,
                    returns,
                    opaque,
                    quiet: bools[0],
                    client_flags: flags,
                    exptime,
                    compare_cas: cas[0],
                    new_cas: cas[1],
                    invalidate: bools[1],
                    mode,
                    vivify_exptime: vivify,
                })
            },
        )
}

fn meta_other() -> impl Strategy<Value = Command> {
    const DELETE_RETURNS: &[ReturnFlag] = &[ReturnFlag::Key, ReturnFlag::Opaque];
    const ARITHMETIC_RETURNS: &[ReturnFlag] = &[
        ReturnFlag::Cas,
        ReturnFlag::Ttl,
        ReturnFlag::Key,
        ReturnFlag::Opaque,
    ];
    let mode = prop_oneof![Just(ArithmeticOp::Incr), Just(ArithmeticOp::Decr)];
    prop_oneof![
        (
            meta_key(),
            returns(DELETE_RETURNS),
            any::<[bool; 3]>(),
            any::<[Option<u64>; 2]>(),
            any::<Option<i64>>()
        )
            .prop_map(
                |((key, base64_key), (returns, opaque), bools, cas, exptime)| {
                    Command::MetaDelete(MetaDelete {
                        key,
                        base64_key,
                        returns,
                        opaque,
                        quiet: bools[0],
                        compare_cas: cas[0],
                        new_cas: cas[1],
                        invalidate: bools[1],
                        new_exptime: exptime,
                        remove_value: bools[2],
                    })
                }
            ),
        (
            (
                meta_key(),
                returns(ARITHMETIC_RETURNS),
                any::<[bool; 2]>(),
                any::<[Option<u64>; 2]>()
            ),
            (any::<[Option<i64>; 2]>(), any::<[u64; 2]>(), mode),
        )
            .prop_map(
                |(
                    ((key, base64_key), (returns, opaque), bools, cas),
                    (exptimes, numbers, mode),
                )| {
                    Command::MetaArithmetic(MetaArithmetic {
                        key,
                        base64_key,
                        returns,
                        opaque,
                        quiet: bools[0],
                        return_value: bools[1],
                        compare_cas: cas[0],
                        new_cas: cas[1],
                        vivify_exptime: exptimes[0],
                        initial: numbers[0],
                        delta: numbers[1],
                        new_exptime: exptimes[1],
                        mode,
                    })
                }
            ),
        meta_key().prop_map(|(key, base64_key)| Command::MetaDebug(MetaDebug { key, base64_key })),
    ]
}

fn any_command() -> impl Strategy<Value = Command> {
    prop_oneof![3 => classic_command(), 1 => meta_get(), 1 => meta_set(), 1 => meta_other()]
}

fn encoded(command: &Command) -> Vec<u8> {
    let mut out = BytesMut::new();
    command.encode(&mut out);
    out.to_vec()
}

/// A parsed command keeps every rule: its keys, opaque and data are in
/// bounds, and it encodes to bytes that parse back to it.
fn assert_keeps_the_rules(command: &Command, limits: &Limits) {
    let text_key_ok = |key: &[u8]| {
        !key.is_empty()
            && key.len() <= limits.max_key_bytes
            && key.iter().all(|&b| b > b' ' && b != 0x7f)
    };
    match command {
        Command::Get(get) => {
            assert!(get.keys.len() <= limits.max_keys_per_get);
            assert!(get.keys.iter().all(|k| text_key_ok(k)));
            assert!(!get.keys.is_empty() || get.touch_exptime.is_some());
        }
        Command::Store(store) => {
            assert!(text_key_ok(&store.key));
            assert!(store.data.len() <= limits.max_value_bytes);
        }
        Command::MetaGet(MetaGet { opaque, .. })
        | Command::MetaSet(MetaSet { opaque, .. })
        | Command::MetaDelete(MetaDelete { opaque, .. })
        | Command::MetaArithmetic(MetaArithmetic { opaque, .. }) => {
            assert!(opaque.as_ref().is_none_or(|o| o.len() < 32));
        }
        _ => {}
    }
    if let Some(data) = command.data() {
        assert!(data.len() <= limits.max_value_bytes);
    }
    let bytes = encoded(command);
    assert_eq!(
        parse(&bytes, limits),
        Parsed::Complete {
            command: command.clone(),
            consumed: bytes.len()
        },
        "a parsed command encodes to itself: {:?}",
        String::from_utf8_lossy(&bytes)
    );
}

/// What a reader makes of a stream, comparable however it arrived.
#[derive(Debug, PartialEq)]
enum Event {
    Command(Command),
    Refused {
        error: ProtocolError,
        noreply: bool,
        bytes: usize,
    },
    Closed(ProtocolError),
}

fn read_in_chunks(stream: &[u8], chunk_bytes: usize, limits: &Limits) -> Vec<Event> {
    let mut reader = CommandReader::new(*limits);
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    for chunk in stream.chunks(chunk_bytes.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            match reader.read(&mut buf) {
                Parsed::Incomplete => break,
                Parsed::Complete { command, .. } => {
                    assert_keeps_the_rules(&command, limits);
                    events.push(Event::Command(command));
                }
                Parsed::Invalid(rejection) if rejection.close => {
                    events.push(Event::Closed(rejection.error));
                    return events;
                }
                Parsed::Invalid(rejection) => {
                    assert!(rejection.consumed > 0, "a refusal always makes progress");
                    events.push(Event::Refused {
                        error: rejection.error,
                        noreply: rejection.noreply,
                        bytes: rejection.consumed + rejection.swallow_bytes,
                    });
                }
            }
        }
    }
    events
}

/// Bytes that look like the protocol more often than noise does.
fn protocol_noise() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        4 => prop::sample::select(vec![
            &b"get "[..], b"gets ", b"gat ", b"set ", b"cas ", b"add ", b"delete ", b"incr ", b"touch ",
            b"flush_all ", b"mg ", b"ms ", b"md ", b"ma ", b"me ", b"mn", b"stats ", b"noreply", b"\r\n",
            b"\n", b" ", b"0 ", b"1 ", b"5 ", b"-1 ", b"k ", b"b ", b"v ", b"q ", b"O1 ", b"T10 ", b"MA ",
            b"Zm9v ", b"4294967295 ", b"HTTP/1.1", b"\0",
        ]).prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 1..8),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn commands_round_trip(command in any_command()) {
        let limits = Limits::default();
        let bytes = encoded(&command);
        prop_assert_eq!(
            parse(&bytes, &limits),
            Parsed::Complete { command: command.clone(), consumed: bytes.len() }
        );
        let mut buf = BytesMut::from(&bytes[..]);
        prop_assert_eq!(
            parse_bytes(&mut buf, &limits),
            Parsed::Complete { command, consumed: bytes.len() }
        );
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_command_is_incomplete_until_its_last_byte(commands in prop::collection::vec(any_command(), 1..4)) {
        let limits = Limits::default();
        let first = encoded(&commands[0]);
        let stream: Vec<u8> = commands.iter().flat_map(encoded).collect();
        for cut in 0..first.len() {
            prop_assert_eq!(parse(&stream[..cut], &limits), Parsed::Incomplete, "cut at {}", cut);
        }
        for cut in [first.len(), stream.len()] {
            prop_assert_eq!(
                parse(&stream[..cut], &limits),
                Parsed::Complete { command: commands[0].clone(), consumed: first.len() }
            );
        }
    }

    #[test]
    fn a_stream_reads_the_same_in_any_chunks(
        commands in prop::collection::vec(any_command(), 1..6),
        noise in prop::collection::vec(protocol_noise(), 6),
        chunk_bytes in 1usize..17,
    ) {
        let limits = Limits::default();
        let mut stream = Vec::new();
        for (command, noise) in commands.iter().zip(&noise) {
            stream.extend(encoded(command));
            stream.extend_from_slice(noise);
            stream.extend_from_slice(b"\r\n");
        }
        let whole = read_in_chunks(&stream, stream.len(), &limits);
        prop_assert_eq!(&read_in_chunks(&stream, 1, &limits), &whole);
        prop_assert_eq!(&read_in_chunks(&stream, chunk_bytes, &limits), &whole);
        // Without noise, the commands come back in order.
        let clean: Vec<u8> = commands.iter().flat_map(encoded).collect();
        let expected: Vec<Event> = commands.into_iter().map(Event::Command).collect();
        prop_assert_eq!(read_in_chunks(&clean, 1, &limits), expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let limits = Limits::default();
        read_in_chunks(&bytes, bytes.len(), &limits);
        read_in_chunks(&bytes, 3, &limits);
        let mut rest = &bytes[..];
        while let ParsedReply::Complete { consumed, .. } = parse_reply(rest, &limits) {
            prop_assert!(consumed > 0 && consumed <= rest.len());
            rest = &rest[consumed..];
        }
    }

    #[test]
    fn protocol_noise_never_panics(bytes in protocol_noise(), chunk_bytes in 1usize..9) {
        let limits = Limits::default();
        let whole = read_in_chunks(&bytes, bytes.len(), &limits);
        prop_assert_eq!(read_in_chunks(&bytes, chunk_bytes, &limits), whole);
        let _ = parse_reply(&bytes, &limits);
    }

    #[test]
    fn changed_bytes_never_yield_a_command_that_breaks_the_rules(
        commands in prop::collection::vec(any_command(), 1..4),
        changes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let limits = Limits::default();
        let mut stream: Vec<u8> = commands.iter().flat_map(encoded).collect();
        for (at, byte) in changes {
            let at = at.index(stream.len());
            stream[at] = byte;
        }
        read_in_chunks(&stream, stream.len(), &limits);
    }

    #[test]
    fn a_data_block_of_the_wrong_length_is_refused(
        key in "[!-~]{1,250}",
        data in "[a-z]{1,50}",
        claimed_more in any::<bool>(),
    ) {
        let limits = Limits::default();
        let claimed = if claimed_more { data.len() + 1 } else { data.len() - 1 };
        let stream = format!("set {key} 0 0 {claimed}\r\n{data}\r\nxx\r\n");
        let Parsed::Invalid(rejection) = parse(stream.as_bytes(), &limits) else {
            panic!("{stream:?} was taken");
        };
        prop_assert_eq!(rejection.error, ProtocolError::BadDataChunk);
    }

    #[test]
    fn huge_claimed_lengths_are_refused(len in prop_oneof![any::<u64>(), 1_048_577u64..3_000_000_000]) {
        let limits = Limits::default();
        for command in [format!("set k 0 0 {len}\r\n"), format!("ms k {len}\r\n")] {
            let Parsed::Invalid(rejection) = parse(command.as_bytes(), &limits) else {
                panic!("{command:?} was not refused");
            };
            if len <= i32::MAX as u64 - 2 {
                prop_assert_eq!(rejection.error, ProtocolError::ObjectTooLarge);
                prop_assert_eq!(rejection.swallow_bytes as u64, len + 2);
            } else {
                prop_assert_eq!(rejection.error, ProtocolError::BadCommandLine);
                prop_assert_eq!(rejection.swallow_bytes, 0);
            }
        }
    }

    #[test]
    fn replies_round_trip(replies in prop::collection::vec(any_reply(), 1..5)) {
        let limits = Limits::default();
        let mut stream = BytesMut::new();
        for reply in &replies {
            reply.encode(&mut stream);
        }
        let mut rest = &stream[..];
        for reply in &replies {
            let ParsedReply::Complete { reply: parsed, consumed } = parse_reply(rest, &limits) else {
                panic!("{rest:?}");
            };
            prop_assert_eq!(&parsed, reply);
            for cut in 0..consumed {
                prop_assert_eq!(parse_reply(&rest[..cut], &limits), ParsedReply::Incomplete);
            }
            rest = &rest[consumed..];
        }
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn meta_get_answers_parse_as_asked(command in meta_get(), hit in proptest::option::of(item())) {
        let Command::MetaGet(request) = command else { unreachable!() };
        let mut out = BytesMut::new();
        request.encode_reply(hit.as_ref(), &mut out);
        if out.is_empty() {
            prop_assert!(hit.is_none() && request.quiet);
            return Ok(());
        }
        let ParsedReply::Complete { reply: Reply::Meta(meta), consumed } =
            parse_reply(&out, &Limits::default())
        else {
            panic!("{out:?}");
        };
        prop_assert_eq!(consumed, out.len());
        let mut returned = meta.flags.iter().filter(|f| !b"bWXZ".contains(&f.letter));
        for flag in request.returns.iter() {
            let expected = match (&hit, flag) {
                (_, ReturnFlag::Opaque) => request.opaque.as_ref().map(|o| o.to_vec()),
                (_, ReturnFlag::Key) => Some(request.key.to_vec()),
                (None, _) => None,
                (Some(item), ReturnFlag::Cas) => Some(item.cas.to_string().into_bytes()),
                (Some(item), ReturnFlag::ClientFlags) => Some(item.client_flags.to_string().into_bytes()),
                (Some(item), ReturnFlag::Hit) => Some(vec![b'0' + u8::from(item.fetched_before)]),
                (Some(item), ReturnFlag::LastAccess) => Some(item.last_access_secs.to_string().into_bytes()),
                (Some(item), ReturnFlag::Size) => Some(item.value.len().to_string().into_bytes()),
                (Some(item), ReturnFlag::Ttl) => Some(
                    item.ttl_remaining_secs.map_or("-1".to_string(), |t| t.to_string()).into_bytes(),
                ),
            };
            let Some(expected) = expected else { continue };
            let got = returned.next().expect("an asked flag comes back");
            prop_assert_eq!(got.letter, flag.letter());
            if flag == ReturnFlag::Key && request.base64_key {
                // The key comes back in base64, followed by `b`.
                let line = [&b"me "[..], &got.token, b" b\r\n"].concat();
                let Parsed::Complete { command: Command::MetaDebug(echo), .. } =
                    parse(&line, &Limits::default())
                else {
                    panic!("{line:?}");
                };
                prop_assert_eq!(&echo.key, &request.key);
                prop_assert!(meta.flags.iter().any(|f| f.letter == b'b'));
            } else {
                prop_assert_eq!(&got.token[..], &expected[..]);
            }
        }
        prop_assert!(returned.next().is_none(), "nothing unasked comes back");
        match &hit {
            None => prop_assert_eq!(meta.code, MetaCode::Miss),
            Some(item) => {
                let with_value = request.return_value && request.compare_cas != Some(item.cas);
                prop_assert_eq!(meta.value.as_ref(), with_value.then_some(&item.value));
                let extra: Vec<u8> = meta.flags.iter().map(|f| f.letter).filter(|l| b"WXZ".contains(l)).collect();
                let mut expected = Vec::new();
                for (set, letter) in [(item.recache_already_won, b'Z'), (item.stale, b'X'), (item.won_recache, b'W')] {
                    if set {
                        expected.push(letter);
                    }
                }
                prop_assert_eq!(extra, expected);
            }
        }
    }
}

fn item() -> impl Strategy<Value = ItemView> {
    (
        any::<u32>(),
        any::<u64>(),
        data(),
        any::<Option<u64>>(),
        any::<u64>(),
        any::<[bool; 4]>(),
    )
        .prop_map(
            |(client_flags, cas, value, ttl, last_access, bools)| ItemView {
                client_flags,
                cas,
                value,
                ttl_remaining_secs: ttl,
                last_access_secs: last_access,
                fetched_before: bools[0],
                won_recache: bools[1],
                stale: bools[2],
                recache_already_won: bools[3],
            },
        )
}

fn line_text() -> impl Strategy<Value = Bytes> {
    "[!-~]([ -~]{0,30}[!-~])?".prop_map(|t| Bytes::from(t.into_bytes()))
}

fn any_reply() -> impl Strategy<Value = Reply> {
    let meta_code = prop_oneof![
        Just(MetaCode::Success),
        Just(MetaCode::Value),
        Just(MetaCode::Miss),
        Just(MetaCode::NotStored),
        Just(MetaCode::Exists),
        Just(MetaCode::NotFound),
        Just(MetaCode::Noop),
    ];
    let flag = (0x21u8..0x7f, "[!-~]{0,20}").prop_map(|(letter, token)| MetaFlag {
        letter,
        token: Bytes::from(token.into_bytes()),
    });
    let meta =
        (meta_code, prop::collection::vec(flag, 0..6), data()).prop_map(|(code, flags, value)| {
            let value = (code == MetaCode::Value).then_some(value);
            Reply::Meta(MetaReply { code, flags, value })
        });
    let fixed = prop::sample::select(vec![
        Reply::End,
        Reply::Stored,
        Reply::NotStored,
        Reply::Exists,
        Reply::NotFound,
        Reply::Deleted,
        Reply::Touched,
        Reply::Ok,
        Reply::Reset,
        Reply::Error,
    ]);
    prop_oneof![
        (text_key(), any::<u32>(), any::<Option<u64>>(), data()).prop_map(
            |(key, flags, cas, data)| Reply::Value {
                key,
                flags,
                cas,
                data
            }
        ),
        fixed,
        any::<u64>().prop_map(Reply::Number),
        line_text().prop_map(Reply::Version),
        line_text().prop_map(Reply::ClientError),
        line_text().prop_map(Reply::ServerError),
        (word(), line_text()).prop_map(|(name, value)| Reply::Stat { name, value }),
        (text_key(), line_text()).prop_map(|(key, info)| Reply::MetaDebug { key, info }),
        meta,
    ]
}

#[test]
fn thousands_of_keys() {
    let limits = Limits::default();
    for count in [1, 100, 2000, 4096, 4097, 10_000] {
        let line = format!(
            "get {}\r\n",
            (0..count)
                .map(|i| format!("k{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let events = read_in_chunks(line.as_bytes(), 4096, &limits);
        let expected = if line.len() - 2 > limits.max_get_line_bytes {
            Event::Closed(ProtocolError::GetLineTooLong {
                limit_bytes: limits.max_get_line_bytes,
            })
        } else if count > limits.max_keys_per_get {
            Event::Refused {
                error: ProtocolError::TooManyKeys {
                    limit: limits.max_keys_per_get,
                },
                noreply: false,
                bytes: line.len(),
            }
        } else {
            let Parsed::Complete { command, .. } = parse(line.as_bytes(), &limits) else {
                panic!()
            };
            Event::Command(command)
        };
        assert_eq!(events, [expected], "{count} keys");
    }
}

#[test]
fn long_lines_without_a_newline_are_refused_at_the_bound() {
    let limits = Limits::default();
    for (start, bound) in [
        ("set k 0 0 1 ", limits.max_line_bytes),
        ("mg k ", limits.max_line_bytes),
        ("gat 1 ", limits.max_line_bytes),
        ("get ", limits.max_get_line_bytes),
        ("gets ", limits.max_get_line_bytes),
    ] {
        let mut line = start.as_bytes().to_vec();
        line.resize(bound, b'k');
        assert_eq!(parse(&line, &limits), Parsed::Incomplete, "{start}");
        line.push(b'k');
        let Parsed::Invalid(rejection) = parse(&line, &limits) else {
            panic!("{start}")
        };
        assert!(rejection.close, "{start}");
        // The same, read a byte at a time.
        assert_eq!(read_in_chunks(&line, 1, &limits).len(), 1, "{start}");
    }
}
