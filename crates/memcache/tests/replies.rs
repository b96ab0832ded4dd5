//! The server's answers, byte for byte. The meta answers' expected bytes
//! are what Debian's memcached 1.6.18 sent to the same requests (the flag
//! order, `b` after a base64 key, `Z X W`, `q`).

use bytes::{Bytes, BytesMut};
use quarry_memcache::{
    parse, parse_reply, parse_reply_bytes, ArithmeticOutcome, Command, DebugView, DeleteStatus,
    ItemView, Limits, MetaCode, MetaFlag, MetaReply, MetaSetOutcome, Parsed, ParsedReply, Reply,
    ReplyError, StoreStatus,
};

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn encoded(reply: &Reply) -> String {
    let mut out = BytesMut::new();
    reply.encode(&mut out);
    String::from_utf8(out.to_vec()).unwrap()
}

fn request(line: &str) -> Command {
    match parse(line.as_bytes(), &Limits::default()) {
        Parsed::Complete { command, .. } => command,
        other => panic!("{line:?}: {other:?}"),
    }
}

/// Runs `answer` on a fresh buffer and returns what it wrote.
fn written(answer: impl FnOnce(&mut BytesMut)) -> String {
    let mut out = BytesMut::new();
    answer(&mut out);
    String::from_utf8(out.to_vec()).unwrap()
}

#[test]
fn classic_answers() {
    let value = Reply::Value {
        key: b("k"),
        flags: 5,
        cas: None,
        data: b("hello"),
    };
    assert_eq!(encoded(&value), "VALUE k 5 5\r\nhello\r\n");
    let with_cas = Reply::Value {
        key: b("k"),
        flags: 0,
        cas: Some(24),
        data: b("x"),
    };
    assert_eq!(encoded(&with_cas), "VALUE k 0 1 24\r\nx\r\n");
    for (reply, text) in [
        (Reply::End, "END\r\n"),
        (Reply::Stored, "STORED\r\n"),
        (Reply::NotStored, "NOT_STORED\r\n"),
        (Reply::Exists, "EXISTS\r\n"),
        (Reply::NotFound, "NOT_FOUND\r\n"),
        (Reply::Deleted, "DELETED\r\n"),
        (Reply::Touched, "TOUCHED\r\n"),
        (Reply::Ok, "OK\r\n"),
        (Reply::Reset, "RESET\r\n"),
        (Reply::Error, "ERROR\r\n"),
        (
            Reply::Number(18446744073709551615),
            "18446744073709551615\r\n",
        ),
        (Reply::Version(b("1.6.18")), "VERSION 1.6.18\r\n"),
        (
            Reply::Stat {
                name: b("libevent"),
                value: b("2.1.12-stable"),
            },
            "STAT libevent 2.1.12-stable\r\n",
        ),
        (
            Reply::client_error("cannot increment or decrement non-numeric value"),
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        (
            Reply::server_error("out of memory storing object"),
            "SERVER_ERROR out of memory storing object\r\n",
        ),
        (StoreStatus::Stored.reply(), "STORED\r\n"),
        (StoreStatus::Exists.reply(), "EXISTS\r\n"),
        (Reply::Meta(MetaReply::noop()), "MN\r\n"),
    ] {
        assert_eq!(encoded(&reply), text);
    }
}

fn item(value: &str) -> ItemView {
    ItemView {
        client_flags: 5,
        cas: 7,
        value: b(value),
        ttl_remaining_secs: None,
        last_access_secs: 3,
        fetched_before: true,
        ..ItemView::default()
    }
}

fn mg(line: &str, found: Option<&ItemView>) -> String {
    let Command::MetaGet(get) = request(line) else {
        panic!("{line}")
    };
    written(|out| get.encode_reply(found, out))
}

#[test]
fn meta_get_answers() {
    // Flags come back in request order; `b` follows a base64 key.
    assert_eq!(
        mg("mg Zm9v b k v f t s c O2\r\n", Some(&item("bar"))),
        "VA 3 kZm9v b f5 t-1 s3 c7 O2\r\nbar\r\n"
    );
    let mut expiring = item("x");
    expiring.ttl_remaining_secs = Some(100);
    expiring.fetched_before = false;
    assert_eq!(
        mg("mg k t h l v\r\n", Some(&expiring)),
        "VA 1 t100 h0 l3\r\nx\r\n"
    );
    assert_eq!(mg("mg k c\r\n", Some(&item("x"))), "HD c7\r\n");
    assert_eq!(mg("mg k\r\n", Some(&item("x"))), "HD\r\n");
    // q hides only the miss.
    assert_eq!(mg("mg k v q\r\n", Some(&item("a"))), "VA 1\r\na\r\n");
    assert_eq!(mg("mg k v q k O1\r\n", None), "");
    // A miss sends back `O` and `k`, in order, and nothing else.
    assert_eq!(mg("mg nokey k Oxx v c t\r\n", None), "EN knokey Oxx\r\n");
    assert_eq!(mg("mg Zm9v b O1 k\r\n", None), "EN O1 kZm9v b\r\n");
    // C matching the cas drops the value (1.6.21's conditional fetch).
    assert_eq!(mg("mg k v C7 c\r\n", Some(&item("x"))), "HD c7\r\n");
    assert_eq!(mg("mg k v C8\r\n", Some(&item("x"))), "VA 1\r\nx\r\n");
    // Z, X, W follow the asked flags in that order.
    let mut stale = item("x");
    stale.stale = true;
    stale.won_recache = true;
    assert_eq!(mg("mg st v c\r\n", Some(&stale)), "VA 1 c7 X W\r\nx\r\n");
    stale.won_recache = false;
    stale.recache_already_won = true;
    assert_eq!(mg("mg st v c\r\n", Some(&stale)), "VA 1 c7 Z X\r\nx\r\n");
    let vivified = ItemView {
        cas: 22,
        ttl_remaining_secs: Some(30),
        won_recache: true,
        ..ItemView::default()
    };
    assert_eq!(
        mg("mg miss N30 v c t\r\n", Some(&vivified)),
        "VA 0 c22 t30 W\r\n\r\n"
    );
}

fn ms(line: &str, outcome: MetaSetOutcome) -> String {
    let Command::MetaSet(set) = request(line) else {
        panic!("{line}")
    };
    written(|out| set.encode_reply(&outcome, out))
}

#[test]
fn meta_set_answers() {
    let stored = MetaSetOutcome {
        status: StoreStatus::Stored,
        cas: 7,
        size_bytes: 3,
    };
    assert_eq!(
        ms("ms Zm9v 3 b c k O1 T0 F5\r\nbar\r\n", stored),
        "HD c7 kZm9v b O1\r\n"
    );
    assert_eq!(ms("ms k 3 s\r\nbar\r\n", stored), "HD s3\r\n");
    assert_eq!(ms("ms k 3 q k\r\nbar\r\n", stored), "");
    let not_stored = MetaSetOutcome {
        status: StoreStatus::NotStored,
        cas: 0,
        size_bytes: 0,
    };
    assert_eq!(
        ms("ms nokey 3 MR k O9 c\r\nbar\r\n", not_stored),
        "NS knokey O9 c0\r\n"
    );
    for (status, code) in [(StoreStatus::Exists, "EX"), (StoreStatus::NotFound, "NF")] {
        let outcome = MetaSetOutcome {
            status,
            ..not_stored
        };
        assert_eq!(ms("ms k 0 q\r\n\r\n", outcome), format!("{code}\r\n"));
    }
}

fn md(line: &str, status: DeleteStatus) -> String {
    let Command::MetaDelete(delete) = request(line) else {
        panic!("{line}")
    };
    written(|out| delete.encode_reply(status, out))
}

#[test]
fn meta_delete_answers() {
    assert_eq!(
        md("md nokey k O1 q\r\n", DeleteStatus::NotFound),
        "NF knokey O1\r\n"
    );
    assert_eq!(
        md("md Zm9v b O2 k\r\n", DeleteStatus::Deleted),
        "HD O2 kZm9v b\r\n"
    );
    assert_eq!(md("md k q\r\n", DeleteStatus::Deleted), "");
    assert_eq!(md("md k q C1\r\n", DeleteStatus::Exists), "EX\r\n");
}

fn ma(line: &str, outcome: ArithmeticOutcome) -> String {
    let Command::MetaArithmetic(arithmetic) = request(line) else {
        panic!("{line}")
    };
    written(|out| arithmetic.encode_reply(&outcome, out))
}

#[test]
fn meta_arithmetic_answers() {
    let done = ArithmeticOutcome::Done {
        value: 6,
        cas: 11,
        ttl_remaining_secs: None,
    };
    assert_eq!(
        ma("ma n v t c k O1\r\n", done),
        "VA 1 t-1 c11 kn O1\r\n6\r\n"
    );
    assert_eq!(ma("ma n\r\n", done), "HD\r\n");
    // q hides every success, with a value or without.
    assert_eq!(ma("ma n q\r\n", done), "");
    assert_eq!(ma("ma n q v\r\n", done), "");
    assert_eq!(
        ma("ma nokey q O3 k\r\n", ArithmeticOutcome::NotFound),
        "NF O3 knokey\r\n"
    );
    assert_eq!(ma("ma n C1 v c t\r\n", ArithmeticOutcome::Exists), "EX\r\n");
    assert_eq!(
        ma("ma n N0 k\r\n", ArithmeticOutcome::NotStored),
        "NS kn\r\n"
    );
    let vivified = ArithmeticOutcome::Done {
        value: 10,
        cas: 1,
        ttl_remaining_secs: Some(0),
    };
    assert_eq!(
        ma("ma nokey2 N0 J10 v t\r\n", vivified),
        "VA 2 t0\r\n10\r\n"
    );
    for (value, text) in [
        (0, "VA 1\r\n0\r\n"),
        (u64::MAX, "VA 20\r\n18446744073709551615\r\n"),
    ] {
        let done = ArithmeticOutcome::Done {
            value,
            cas: 1,
            ttl_remaining_secs: None,
        };
        assert_eq!(ma("ma n v\r\n", done), text);
    }
}

#[test]
fn meta_debug_answers() {
    let Command::MetaDebug(me) = request("me k2\r\n") else {
        panic!()
    };
    let view = DebugView {
        ttl_remaining_secs: None,
        last_access_secs: 0,
        cas: 23,
        fetched: false,
        slab_class: 1,
        size_bytes: 62,
    };
    assert_eq!(
        written(|out| me.encode_reply(Some(&view), out)),
        "ME k2 exp=-1 la=0 cas=23 fetch=no cls=1 size=62\r\n"
    );
    assert_eq!(written(|out| me.encode_reply(None, out)), "EN\r\n");
    let Command::MetaDebug(binary) = request("me Zm9v b\r\n") else {
        panic!()
    };
    let view = DebugView {
        ttl_remaining_secs: Some(100),
        fetched: true,
        ..view
    };
    assert_eq!(
        written(|out| binary.encode_reply(Some(&view), out)),
        "ME Zm9v exp=100 la=0 cas=23 fetch=yes cls=1 size=62\r\n"
    );
}

fn read_all(mut input: &[u8]) -> Vec<Reply> {
    let mut replies = Vec::new();
    while !input.is_empty() {
        match parse_reply(input, &Limits::default()) {
            ParsedReply::Complete { reply, consumed } => {
                replies.push(reply);
                input = &input[consumed..];
            }
            other => panic!("{input:?}: {other:?}"),
        }
    }
    replies
}

#[test]
fn a_client_reads_answers() {
    let replies = read_all(
        b"VALUE k 5 5\r\nhello\r\nVALUE k2 0 2 9\r\n\r\n\r\nEND\r\nSTORED\r\n42\r\n0 \r\n\
          VA 3 kZm9v b f5 t-1\r\nbar\r\nHD c7\r\nEN\r\nMN\r\nSTAT pid 1\r\n\
          ME k exp=-1 la=2 cas=6 fetch=no cls=1 size=61\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n",
    );
    let flag = |letter: u8, token: &str| MetaFlag {
        letter,
        token: b(token),
    };
    assert_eq!(
        replies,
        [
            Reply::Value {
                key: b("k"),
                flags: 5,
                cas: None,
                data: b("hello")
            },
            Reply::Value {
                key: b("k2"),
                flags: 0,
                cas: Some(9),
                data: b("\r\n")
            },
            Reply::End,
            Reply::Stored,
            Reply::Number(42),
            // memcached may pad a shrunk number with spaces.
            Reply::Number(0),
            Reply::Meta(MetaReply {
                code: MetaCode::Value,
                flags: vec![
                    flag(b'k', "Zm9v"),
                    flag(b'b', ""),
                    flag(b'f', "5"),
                    flag(b't', "-1")
                ],
                value: Some(b("bar")),
            }),
            Reply::Meta(MetaReply {
                code: MetaCode::Success,
                flags: vec![flag(b'c', "7")],
                value: None
            }),
            Reply::Meta(MetaReply {
                code: MetaCode::Miss,
                flags: vec![],
                value: None
            }),
            Reply::Meta(MetaReply::noop()),
            Reply::Stat {
                name: b("pid"),
                value: b("1")
            },
            Reply::MetaDebug {
                key: b("k"),
                info: b("exp=-1 la=2 cas=6 fetch=no cls=1 size=61")
            },
            Reply::ClientError(b("bad data chunk")),
            Reply::Error,
        ]
    );
    let Reply::Meta(va) = &replies[6] else {
        panic!()
    };
    assert_eq!(va.flag(b'k'), Some(&b("Zm9v")));
    assert_eq!(va.flag_number(b't'), Some(-1));
    assert_eq!(va.flag(b'c'), None);
    let Reply::MetaDebug { info, .. } = &replies[11] else {
        panic!()
    };
    let fields: Vec<(&[u8], &[u8])> = Reply::meta_debug_fields(info).collect();
    assert_eq!(fields[2], (&b"cas"[..], &b"6"[..]));
    assert_eq!(fields.len(), 6);
}

#[test]
fn parse_reply_bytes_takes_what_it_read() {
    let mut input = BytesMut::from(&b"VALUE k 0 3\r\nabc\r\nEND\r\nVALUE"[..]);
    let limits = Limits::default();
    assert!(matches!(
        parse_reply_bytes(&mut input, &limits),
        ParsedReply::Complete {
            reply: Reply::Value { .. },
            consumed: 18
        }
    ));
    assert!(matches!(
        parse_reply_bytes(&mut input, &limits),
        ParsedReply::Complete {
            reply: Reply::End,
            ..
        }
    ));
    assert_eq!(
        parse_reply_bytes(&mut input, &limits),
        ParsedReply::Incomplete
    );
    assert_eq!(&input[..], b"VALUE");
}

#[test]
fn bad_answers_are_refused() {
    let limits = Limits::default();
    let invalid = |input: &[u8]| match parse_reply(input, &limits) {
        ParsedReply::Invalid(error) => error,
        other => panic!("{input:?}: {other:?}"),
    };
    assert!(matches!(
        invalid(b"HELLO\r\n"),
        ReplyError::Unrecognised { .. }
    ));
    assert!(matches!(
        invalid(b"VALUE k x 1\r\n"),
        ReplyError::Malformed { what: "VALUE" }
    ));
    assert!(matches!(
        invalid(b"VALUE k 0\r\n"),
        ReplyError::Malformed { .. }
    ));
    assert!(matches!(
        invalid(b"VALUE k 0 1 2 3\r\n"),
        ReplyError::Malformed { .. }
    ));
    assert!(matches!(
        invalid(b"VA x\r\n"),
        ReplyError::Malformed { what: "VA" }
    ));
    assert!(matches!(
        invalid(b"STAT \r\n"),
        ReplyError::Malformed { what: "STAT" }
    ));
    assert!(matches!(
        invalid(b"VALUE k 0 1\r\nab\r\n"),
        ReplyError::BadDataChunk
    ));
    assert_eq!(
        invalid(b"VALUE k 0 1048577\r\n"),
        ReplyError::ValueTooLarge {
            len_bytes: 1_048_577,
            limit_bytes: 1_048_576
        }
    );
    assert_eq!(
        invalid(b"VA 99999999999999999999\r\n"),
        ReplyError::Malformed { what: "VA" }
    );
    assert_eq!(
        invalid(&[b'1'; 2049]),
        ReplyError::LineTooLong { limit_bytes: 2048 }
    );
    assert_eq!(parse_reply(&[b'1'; 2048], &limits), ParsedReply::Incomplete);
    assert_eq!(
        parse_reply(b"VALUE k 0 5\r\nabc", &limits),
        ParsedReply::Incomplete
    );
}
