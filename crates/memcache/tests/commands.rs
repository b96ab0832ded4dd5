//! Every command form the parser takes, and what it makes of it. The
//! expectations were checked against Debian's memcached 1.6.18 where the
//! behaviour is not plain from protocol.txt.

use bytes::{Bytes, BytesMut};
use quarry_memcache::{
    parse, parse_bytes, ArithmeticOp, Command, Get, Limits, MetaArithmetic, MetaDebug, MetaDelete,
    MetaGet, MetaSet, Parsed, ReturnFlag, ReturnFlags, SetMode, Store, StoreOp,
};

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

/// The one command `input` holds, which must be all of it.
fn command(input: &[u8]) -> Command {
    match parse(input, &Limits::default()) {
        Parsed::Complete { command, consumed } => {
            assert_eq!(consumed, input.len(), "{input:?} is one command");
            command
        }
        other => panic!("{input:?}: {other:?}"),
    }
}

fn get(keys: &[&str], return_cas: bool, touch_exptime: Option<i64>) -> Command {
    Command::Get(Get {
        keys: keys.iter().map(|k| b(k)).collect(),
        return_cas,
        touch_exptime,
    })
}

#[test]
fn retrievals() {
    assert_eq!(command(b"get foo\r\n"), get(&["foo"], false, None));
    assert_eq!(
        command(b"get a b c\r\n"),
        get(&["a", "b", "c"], false, None)
    );
    assert_eq!(command(b"gets a b\r\n"), get(&["a", "b"], true, None));
    assert_eq!(
        command(b"gat 100 a b\r\n"),
        get(&["a", "b"], false, Some(100))
    );
    assert_eq!(command(b"gats -1 a\r\n"), get(&["a"], true, Some(-1)));
    // Runs of spaces separate like one, leading and trailing ones vanish,
    // and a bare `\n` ends a line too (proto_text.c's tokenizer).
    assert_eq!(command(b"  get   a  b  \n"), get(&["a", "b"], false, None));
    // `noreply` is just a key to `get`.
    assert_eq!(
        command(b"get a noreply\r\n"),
        get(&["a", "noreply"], false, None)
    );
    // memcached answers `gat <exptime>` without keys with `END`.
    assert_eq!(command(b"gat 10\r\n"), get(&[], false, Some(10)));
    // The undocumented `bget` is a `get`.
    assert_eq!(command(b"bget k\r\n"), get(&["k"], false, None));
    // A key may hold any byte above space but DEL; 250 bytes is the most.
    let long = "k".repeat(250);
    assert_eq!(
        command(format!("get {long}\r\n").as_bytes()),
        get(&[&long], false, None)
    );
    assert_eq!(
        command("get ключ\r\n".as_bytes()),
        get(&["ключ"], false, None)
    );
    // memcached reads a line up to its first NUL (strlen).
    assert_eq!(command(b"get a\0 b c\r\n"), get(&["a"], false, None));
}

#[test]
fn many_keys_and_long_get_lines() {
    let keys: Vec<String> = (0..4096).map(|i| format!("key:{i}")).collect();
    let line = format!("get {}\r\n", keys.join(" "));
    assert!(line.len() > 2048, "longer than any other command may be");
    match command(line.as_bytes()) {
        Command::Get(get) => {
            assert_eq!(get.keys.len(), 4096);
            assert_eq!(&get.keys[4095][..], b"key:4095");
        }
        other => panic!("{other:?}"),
    }
    let line = format!("{}gets a b\r\n", " ".repeat(100));
    assert_eq!(command(line.as_bytes()), get(&["a", "b"], true, None));
}

fn store(op: StoreOp, key: &str, flags: u32, exptime: i64, data: &[u8], noreply: bool) -> Command {
    Command::Store(Store {
        op,
        key: b(key),
        flags,
        exptime,
        data: Bytes::copy_from_slice(data),
        noreply,
    })
}

#[test]
fn storage_commands() {
    assert_eq!(
        command(b"set k 5 100 3\r\nabc\r\n"),
        store(StoreOp::Set, "k", 5, 100, b"abc", false)
    );
    assert_eq!(
        command(b"add k 0 0 0 noreply\r\n\r\n"),
        store(StoreOp::Add, "k", 0, 0, b"", true)
    );
    assert_eq!(
        command(b"replace k 4294967295 -1 2\r\nhi\r\n"),
        store(StoreOp::Replace, "k", u32::MAX, -1, b"hi", false)
    );
    assert_eq!(
        command(b"append k 0 0 4\r\n\r\n\r\n\r\n"),
        store(StoreOp::Append, "k", 0, 0, b"\r\n\r\n", false)
    );
    assert_eq!(
        command(b"prepend k 0 0 1\nx\r\n"),
        store(StoreOp::Prepend, "k", 0, 0, b"x", false)
    );
    assert_eq!(
        command(b"cas k 1 2 3 18446744073709551615 noreply\r\nabc\r\n"),
        store(StoreOp::Cas { unique: u64::MAX }, "k", 1, 2, b"abc", true)
    );
    // A last word other than `noreply` is taken and ignored
    // (set_noreply_maybe).
    assert_eq!(
        command(b"set k 0 0 1 norepl\r\nx\r\n"),
        store(StoreOp::Set, "k", 0, 0, b"x", false)
    );
    // Numbers may carry a `+`, as strtol allows.
    assert_eq!(
        command(b"set k +1 +2 +1\r\nx\r\n"),
        store(StoreOp::Set, "k", 1, 2, b"x", false)
    );
    let value = vec![7u8; 1024 * 1024];
    let mut input = b"set big 0 0 1048576\r\n".to_vec();
    input.extend_from_slice(&value);
    input.extend_from_slice(b"\r\n");
    assert_eq!(
        command(&input),
        store(StoreOp::Set, "big", 0, 0, &value, false)
    );
}

#[test]
fn parse_bytes_splits_the_data_block_off_without_a_copy() {
    let mut input = BytesMut::from(&b"set k 0 0 5\r\nhello\r\nget k\r\n"[..]);
    let data_at = input.as_ptr() as usize + 13;
    let Parsed::Complete {
        command: Command::Store(set),
        consumed,
    } = parse_bytes(&mut input, &Limits::default())
    else {
        panic!("a set");
    };
    assert_eq!(consumed, 20);
    assert_eq!(&set.data[..], b"hello");
    assert_eq!(set.data.as_ptr() as usize, data_at, "the same memory");
    assert_eq!(&input[..], b"get k\r\n");
}

fn delete(noreply: bool) -> Command {
    Command::Delete {
        key: b("k"),
        noreply,
    }
}

fn arithmetic(op: ArithmeticOp, delta: u64, noreply: bool) -> Command {
    Command::Arithmetic {
        op,
        key: b("k"),
        delta,
        noreply,
    }
}

fn touch(exptime: i64, noreply: bool) -> Command {
    Command::Touch {
        key: b("k"),
        exptime,
        noreply,
    }
}

fn flush_all(delay: Option<i64>, noreply: bool) -> Command {
    Command::FlushAll { delay, noreply }
}

fn verbosity(level: u32, noreply: bool) -> Command {
    Command::Verbosity { level, noreply }
}

#[test]
fn other_classic_commands() {
    use ArithmeticOp::{Decr, Incr};
    for (line, expected) in [
        (&b"delete k\r\n"[..], delete(false)),
        (b"delete k 0\r\n", delete(false)),
        (b"delete k noreply\r\n", delete(true)),
        (b"delete k 0 noreply\r\n", delete(true)),
        (
            b"incr k 18446744073709551615\r\n",
            arithmetic(Incr, u64::MAX, false),
        ),
        (b"decr k 1 noreply\r\n", arithmetic(Decr, 1, true)),
        // A last word other than `noreply` is ignored.
        (b"incr k 1 please\r\n", arithmetic(Incr, 1, false)),
        (b"touch k 30\r\n", touch(30, false)),
        (b"touch k -5 noreply\r\n", touch(-5, true)),
        (b"flush_all\r\n", flush_all(None, false)),
        (b"flush_all noreply\r\n", flush_all(None, true)),
        (b"flush_all 10\r\n", flush_all(Some(10), false)),
        (b"flush_all 0 noreply\r\n", flush_all(Some(0), true)),
        // Three words and no `noreply`: the second is the delay.
        (b"flush_all 10 junk\r\n", flush_all(Some(10), false)),
        (b"verbosity 1\r\n", verbosity(1, false)),
        (b"verbosity 3 noreply\r\n", verbosity(3, true)),
        (b"version\r\n", Command::Version),
        // memcached looks no further than the name of these.
        (b"version please\r\n", Command::Version),
        (b"quit\r\n", Command::Quit),
        (b"quit now\r\n", Command::Quit),
        (b"mn\r\n", Command::MetaNoop),
        (b"mn extra words\r\n", Command::MetaNoop),
        (b"stats\r\n", Command::Stats { args: vec![] }),
        (
            b"stats settings\r\n",
            Command::Stats {
                args: vec![b("settings")],
            },
        ),
        (
            b"stats detail on\r\n",
            Command::Stats {
                args: vec![b("detail"), b("on")],
            },
        ),
    ] {
        assert_eq!(
            command(line),
            expected,
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn names_noreply_and_quiet() {
    assert_eq!(command(b"gats 1 k\r\n").name(), "gats");
    assert_eq!(command(b"cas k 0 0 0 1\r\n\r\n").name(), "cas");
    assert_eq!(command(b"decr k 1\r\n").name(), "decr");
    assert_eq!(command(b"ma k\r\n").name(), "ma");
    assert!(command(b"set k 0 0 0 noreply\r\n\r\n").noreply());
    assert!(command(b"flush_all noreply\r\n").noreply());
    assert!(!command(b"mg k q\r\n").noreply());
    assert!(command(b"mg k q\r\n").quiet());
    assert!(command(b"ms k 0 q\r\n\r\n").quiet());
    assert!(!command(b"get k\r\n").quiet());
    assert_eq!(
        command(b"ms k 1\r\nx\r\n").data().map(|d| &d[..]),
        Some(&b"x"[..])
    );
}

#[test]
fn meta_get_takes_every_flag() {
    let line = b"mg k s t v c f l h O123 k q u N30 R10 T60 C99 E100 P/path\r\n";
    let expected = MetaGet {
        key: b("k"),
        base64_key: false,
        returns: ReturnFlags::of(&[
            ReturnFlag::Size,
            ReturnFlag::Ttl,
            ReturnFlag::Cas,
            ReturnFlag::ClientFlags,
            ReturnFlag::LastAccess,
            ReturnFlag::Hit,
            ReturnFlag::Opaque,
            ReturnFlag::Key,
        ]),
        opaque: Some(b("123")),
        quiet: true,
        return_value: true,
        no_lru_bump: true,
        vivify_exptime: Some(30),
        recache_exptime: Some(10),
        new_exptime: Some(60),
        compare_cas: Some(99),
        new_cas: Some(100),
    };
    assert_eq!(command(line), Command::MetaGet(expected));
    // A flag without a token ignores what follows its letter, as memcached
    // does ("vfoo" is "v"); an empty opaque is an opaque.
    let Command::MetaGet(get) = command(b"mg k vfoo O\r\n") else {
        panic!()
    };
    assert!(get.return_value);
    assert_eq!(get.opaque, Some(Bytes::new()));
    // `P` and `L` are hints for a proxy, ignored.
    assert_eq!(
        command(b"mg k Lhint P/path\r\n"),
        Command::MetaGet(MetaGet {
            key: b("k"),
            ..MetaGet::default()
        })
    );
}

#[test]
fn meta_keys_in_base64_are_decoded() {
    // "Zm9v" is "foo"; a binary key may hold anything.
    let Command::MetaGet(get) = command(b"mg Zm9v b k v\r\n") else {
        panic!()
    };
    assert_eq!((&get.key[..], get.base64_key), (&b"foo"[..], true));
    let Command::MetaSet(set) = command(b"ms AAEC/w== 1 b\r\nx\r\n") else {
        panic!()
    };
    assert_eq!(&set.key[..], &[0, 1, 2, 0xff]);
    let Command::MetaDelete(delete) = command(b"md Zm9v b\r\n") else {
        panic!()
    };
    assert_eq!(&delete.key[..], b"foo");
    let Command::MetaArithmetic(arithmetic) = command(b"ma Zm9v b\r\n") else {
        panic!()
    };
    assert_eq!(&arithmetic.key[..], b"foo");
    assert_eq!(
        command(b"me Zm9v b\r\n"),
        Command::MetaDebug(MetaDebug {
            key: b("foo"),
            base64_key: true
        })
    );
    // `me` takes `b` only as its third word.
    assert_eq!(
        command(b"me Zm9v x b\r\n"),
        Command::MetaDebug(MetaDebug {
            key: b("Zm9v"),
            base64_key: false
        })
    );
}

#[test]
fn meta_set_takes_every_flag_and_mode() {
    let line = b"ms k 3 c k O9 s q F7 T100 C5 E6 I MA N30\r\nabc\r\n";
    let expected = MetaSet {
        key: b("k"),
        base64_key: false,
        data: b("abc"),
        returns: ReturnFlags::of(&[
            ReturnFlag::Cas,
            ReturnFlag::Key,
            ReturnFlag::Opaque,
            ReturnFlag::Size,
        ]),
        opaque: Some(b("9")),
        quiet: true,
        client_flags: 7,
        exptime: 100,
        compare_cas: Some(5),
        new_cas: Some(6),
        invalidate: true,
        mode: SetMode::Append,
        vivify_exptime: Some(30),
    };
    assert_eq!(command(line), Command::MetaSet(expected));
    for (letter, mode) in [
        ("S", SetMode::Set),
        ("E", SetMode::Add),
        ("A", SetMode::Append),
        ("P", SetMode::Prepend),
        ("R", SetMode::Replace),
    ] {
        let line = format!("ms k 0 M{letter}\r\n\r\n");
        let Command::MetaSet(set) = command(line.as_bytes()) else {
            panic!()
        };
        assert_eq!(set.mode, mode);
    }
    // Flags `ms` accepts but does not answer are dropped (`t`, `v`).
    let Command::MetaSet(set) = command(b"ms k 0 t v f\r\n\r\n") else {
        panic!()
    };
    assert!(set.returns.is_empty());
}

#[test]
fn meta_delete_and_arithmetic() {
    let expected = MetaDelete {
        key: b("k"),
        base64_key: false,
        returns: ReturnFlags::of(&[ReturnFlag::Opaque, ReturnFlag::Key]),
        opaque: Some(b("x")),
        quiet: true,
        compare_cas: Some(3),
        new_cas: Some(4),
        invalidate: true,
        new_exptime: Some(30),
        remove_value: true,
    };
    assert_eq!(
        command(b"md k Ox k q C3 E4 I T30 x v\r\n"),
        Command::MetaDelete(expected)
    );
    let expected = MetaArithmetic {
        key: b("n"),
        base64_key: false,
        returns: ReturnFlags::of(&[
            ReturnFlag::Ttl,
            ReturnFlag::Cas,
            ReturnFlag::Key,
            ReturnFlag::Opaque,
        ]),
        opaque: Some(b("1")),
        quiet: false,
        return_value: true,
        compare_cas: Some(1),
        new_cas: Some(2),
        vivify_exptime: Some(0),
        initial: 10,
        delta: 5,
        new_exptime: Some(-1),
        mode: ArithmeticOp::Decr,
    };
    assert_eq!(
        command(b"ma n v t c k O1 C1 E2 N0 J10 D5 T-1 MD\r\n"),
        Command::MetaArithmetic(expected)
    );
    let Command::MetaArithmetic(defaults) = command(b"ma n\r\n") else {
        panic!()
    };
    assert_eq!(
        (defaults.delta, defaults.initial, defaults.mode),
        (1, 0, ArithmeticOp::Incr)
    );
    for (mode, op) in [
        ("I", ArithmeticOp::Incr),
        ("+", ArithmeticOp::Incr),
        ("-", ArithmeticOp::Decr),
    ] {
        let Command::MetaArithmetic(ma) = command(format!("ma n M{mode}\r\n").as_bytes()) else {
            panic!()
        };
        assert_eq!(ma.mode, op);
    }
}

#[test]
fn meta_flag_limits_are_memcacheds() {
    // 17 flags after the key is the most `mg` takes (19 words).
    let Command::MetaGet(get) = command(b"mg k c f h k l O s t v q u N0 R0 T0 P L M1\r\n") else {
        panic!()
    };
    assert!(get.returns.contains(ReturnFlag::Ttl));
    // An opaque word of 32 bytes, its `O` included, is the longest.
    let opaque = "1".repeat(31);
    let Command::MetaGet(get) = command(format!("mg k O{opaque}\r\n").as_bytes()) else {
        panic!()
    };
    assert_eq!(get.opaque.as_deref(), Some(opaque.as_bytes()));
}

#[test]
fn pipelined_commands_parse_one_after_another() {
    let mut input = BytesMut::from(
        &b"set a 0 0 1\r\n1\r\nget a b\r\nmg a v\r\nms b 2 T0\r\nhi\r\nmn\r\nquit\r\n"[..],
    );
    let mut names = Vec::new();
    while let Parsed::Complete { command, .. } = parse_bytes(&mut input, &Limits::default()) {
        names.push(command.name());
    }
    assert_eq!(names, ["set", "get", "mg", "ms", "mn", "quit"]);
    assert!(input.is_empty());
}

#[test]
fn partial_input_is_incomplete() {
    let limits = Limits::default();
    for input in [
        &b""[..],
        b"get k",
        b"get k\r",
        b"set k 0 0 5\r\nhel",
        b"set k 0 0 5\r\nhello\r",
        b"ms k 2\r\n",
    ] {
        assert_eq!(parse(input, &limits), Parsed::Incomplete, "{input:?}");
    }
}
