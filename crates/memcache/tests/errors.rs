//! Every refusal, with memcached 1.6's exact answer, and what it does with
//! the rest of the input: how much it drops, what it swallows, whether it
//! stays silent for `noreply` and whether it closes. Each expectation was
//! also checked against Debian's memcached 1.6.18 (proto_text.c is cited
//! where the behaviour is not in protocol.txt).

use bytes::BytesMut;
use quarry_memcache::{parse, CommandReader, Limits, Parsed, ProtocolError, Rejection};

fn refused(input: &[u8]) -> Rejection {
    match parse(input, &Limits::default()) {
        Parsed::Invalid(rejection) => rejection,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
    }
}

/// The answer memcached sends to the first command of `input`.
fn answer(input: &[u8]) -> String {
    let rejection = refused(input);
    String::from_utf8(rejection.reply().unwrap_or_default().to_vec()).unwrap()
}

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format\r\n";

#[test]
fn unknown_commands_and_wrong_word_counts_are_error() {
    for input in [
        &b"\r\n"[..],
        b"\n",
        b" \r\n",
        b"x\r\n",
        b"bogus\r\n",
        b"SET k 0 0 1\r\n",
        b"get\r\n",
        b"gets\r\n",
        b"gat\r\n",
        b"getx k\r\n",
        b"get\tk\r\n",
        b"mg\r\n",
        b"ms\r\n",
        b"mz k\r\n",
        b"mgx k\r\n",
        b"set k 0 0\r\n",
        b"set k 0 0 1 noreply extra\r\n",
        b"cas k 0 0 1\r\n",
        b"incr k\r\n",
        b"touch k\r\n",
        b"delete\r\n",
        b"delete k 0 noreply extra\r\n",
        b"verbosity\r\n",
        b"flush_all 1 2 3\r\n",
        // Commands memcached has that this crate does not parse.
        b"shutdown\r\n",
        b"lru_crawler metadump all\r\n",
    ] {
        assert_eq!(
            answer(input),
            "ERROR\r\n",
            "{:?}",
            String::from_utf8_lossy(input)
        );
        let rejection = refused(input);
        assert_eq!(rejection.error, ProtocolError::UnknownCommand);
        assert_eq!(
            (rejection.consumed, rejection.swallow_bytes),
            (input.len(), 0)
        );
        assert!(!rejection.close && !rejection.noreply);
    }
}

#[test]
fn an_http_request_closes_without_a_word() {
    // proto_text.c: an unknown command whose last word starts "HTTP/".
    let rejection = refused(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(rejection.error, ProtocolError::HttpRequest);
    assert!(rejection.close);
    assert_eq!(rejection.reply(), None);
    // Only for names memcached has no branch for.
    assert_eq!(
        answer(b"gat foo HTTP/1.0\r\n"),
        "CLIENT_ERROR invalid exptime argument\r\n"
    );
    assert_eq!(answer(b"getx HTTP/1.0\r\n"), "ERROR\r\n");
}

#[test]
fn bad_storage_lines() {
    let long_key = "k".repeat(251);
    for input in [
        format!("set {long_key} 0 0 1\r\n"),
        "set k\x01 0 0 1\r\n".into(),
        "set k x 0 1\r\n".into(),
        "set k -1 0 1\r\n".into(),
        "set k 4294967296 0 1\r\n".into(),
        "set k 0 x 1\r\n".into(),
        "set k 0 0 x\r\n".into(),
        "set k 0 0 -1\r\n".into(),
        "set k 0 0 1x\r\n".into(),
        // memcached reads the length into an int: this is -1 to it.
        "set k 0 0 4294967295\r\n".into(),
        "set k 0 0 2147483646\r\n".into(),
        "cas k 0 0 1 x\r\n".into(),
        "cas k 0 0 1 -1\r\n".into(),
    ] {
        assert_eq!(answer(input.as_bytes()), BAD_FORMAT, "{input:?}");
        // The data block is not swallowed: memcached reads it as the next
        // command (`set k x 0 2\r\nhi\r\n` is answered with two errors).
        assert_eq!(refused(input.as_bytes()).swallow_bytes, 0);
    }
}

#[test]
fn a_bad_line_leaves_the_data_block_to_be_read_as_a_command() {
    let mut reader = CommandReader::new(Limits::default());
    let mut input = BytesMut::from(&b"set k x 0 2\r\nhi\r\n"[..]);
    let mut answers = Vec::new();
    while let Parsed::Invalid(rejection) = reader.read(&mut input) {
        answers.extend_from_slice(rejection.reply().unwrap_or_default());
    }
    assert_eq!(
        answers,
        b"CLIENT_ERROR bad command line format\r\nERROR\r\n"
    );
}

#[test]
fn a_value_too_large_is_swallowed() {
    // proto_text.c process_update_command: SERVER_ERROR, then conn_swallow
    // of the length and its \r\n.
    let rejection = refused(b"set k 0 0 1048577\r\nabc");
    assert_eq!(rejection.error, ProtocolError::ObjectTooLarge);
    assert_eq!(
        rejection.reply(),
        Some(&b"SERVER_ERROR object too large for cache\r\n"[..])
    );
    assert_eq!(rejection.consumed, 22);
    assert_eq!(rejection.swallow_bytes, 1_048_579 - 3);
    // The largest int memcached takes as a length.
    let largest = refused_str("set k 0 0 2147483645\r\n");
    assert_eq!(largest.swallow_bytes, 2_147_483_647);
    // With noreply it is silent, and still swallows.
    let silent = refused_str("set k 0 0 2000000 noreply\r\n");
    assert_eq!((silent.reply(), silent.swallow_bytes), (None, 2_000_002));
    assert_eq!(refused_str("ms k 2000000\r\n").swallow_bytes, 2_000_002);
    // What is already in the buffer is consumed, the rest to come swallowed.
    let mut input = b"set k 0 0 2000000\r\n".to_vec();
    input.extend(vec![b'x'; 1_000_000]);
    let partly_there = refused(&input);
    assert_eq!(partly_there.consumed, input.len());
    assert_eq!(partly_there.swallow_bytes, 1_000_002);
}

fn refused_str(input: &str) -> Rejection {
    refused(input.as_bytes())
}

#[test]
fn the_reader_swallows_then_goes_on() {
    let mut reader = CommandReader::new(Limits::default());
    let mut input = BytesMut::from(&b"set k 0 0 2000000\r\n"[..]);
    assert!(matches!(reader.read(&mut input), Parsed::Invalid(_)));
    assert_eq!(reader.swallowing_bytes(), 2_000_002);
    for _ in 0..2 {
        input.extend_from_slice(&vec![b'\n'; 1_000_001]);
        assert_eq!(reader.read(&mut input), Parsed::Incomplete);
        assert!(input.is_empty());
    }
    input.extend_from_slice(b"mn\r\n");
    assert!(matches!(reader.read(&mut input), Parsed::Complete { .. }));
}

#[test]
fn a_bad_data_chunk_takes_exactly_the_announced_bytes() {
    // complete_nread_ascii: the bytes are read, the last two are not \r\n;
    // the `\n` after them is then an empty command line.
    let mut reader = CommandReader::new(Limits::default());
    let mut input = BytesMut::from(&b"set k 0 0 1\r\nab\r\n"[..]);
    let Parsed::Invalid(first) = reader.read(&mut input) else {
        panic!()
    };
    assert_eq!(first.reply(), Some(&b"CLIENT_ERROR bad data chunk\r\n"[..]));
    assert_eq!(first.consumed, 16);
    let Parsed::Invalid(second) = reader.read(&mut input) else {
        panic!()
    };
    assert_eq!(second.error, ProtocolError::UnknownCommand);
    // Silent with noreply; meta commands always answer it.
    assert_eq!(refused(b"set k 0 0 1 noreply\r\nab\r\n").reply(), None);
    assert_eq!(
        answer(b"ms k 1 q\r\nab\r\n"),
        "CLIENT_ERROR bad data chunk\r\n"
    );
}

#[test]
fn noreply_silences_the_errors_memcached_silences() {
    // set_noreply_maybe runs before these checks.
    let long_key = "k".repeat(251);
    for input in [
        format!("set {long_key} 0 0 1 noreply\r\n"),
        "set k x 0 1 noreply\r\n".into(),
        "incr k x noreply\r\n".into(),
        "touch k x noreply\r\n".into(),
        "delete k 5 noreply\r\n".into(),
        format!("delete {long_key} noreply\r\n"),
        "verbosity x noreply\r\n".into(),
        "flush_all x noreply\r\n".into(),
        // `noreply` as the last word even where it cannot be one.
        "set k 0 0 noreply\r\n".into(),
    ] {
        let rejection = refused(input.as_bytes());
        assert!(rejection.noreply, "{input:?}");
        assert_eq!(rejection.reply(), None);
    }
    // Word-count errors are checked first and always answered.
    assert_eq!(answer(b"set k 0 0 1 noreply x\r\n"), "ERROR\r\n");
    assert_eq!(answer(b"delete k 0 noreply x\r\n"), "ERROR\r\n");
}

#[test]
fn other_classic_errors() {
    let long_key = "k".repeat(251);
    let cases: &[(&str, &str)] = &[
        (
            "incr k x\r\n",
            "CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        (
            "decr k -1\r\n",
            "CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        (
            "incr k 18446744073709551616\r\n",
            "CLIENT_ERROR invalid numeric delta argument\r\n",
        ),
        ("touch k x\r\n", "CLIENT_ERROR invalid exptime argument\r\n"),
        ("gat x k\r\n", "CLIENT_ERROR invalid exptime argument\r\n"),
        (
            "flush_all junk\r\n",
            "CLIENT_ERROR invalid exptime argument\r\n",
        ),
        (
            "flush_all noreply junk\r\n",
            "CLIENT_ERROR invalid exptime argument\r\n",
        ),
        ("verbosity x\r\n", BAD_FORMAT),
        ("verbosity -1\r\n", BAD_FORMAT),
        (
            "delete k 5\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
        ),
        (
            "delete k 0 x\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
        ),
        ("incr k\x7f 1\r\n", BAD_FORMAT),
        ("me\r\n", BAD_FORMAT),
    ];
    for (input, expected) in cases {
        assert_eq!(answer(input.as_bytes()), *expected, "{input:?}");
    }
    for command in [
        "get", "gets", "delete", "touch", "incr", "mg", "md", "ma", "me",
    ] {
        let tail = match command {
            "touch" | "incr" => " 1",
            _ => "",
        };
        let input = format!("{command} {long_key}{tail}\r\n");
        assert_eq!(answer(input.as_bytes()), BAD_FORMAT, "{command}");
    }
    // A retrieval fails as a whole on one bad key.
    assert_eq!(
        answer(format!("get a {long_key} b\r\n").as_bytes()),
        BAD_FORMAT
    );
    assert_eq!(answer(b"get a b\tc\r\n"), BAD_FORMAT);
}

#[test]
fn too_many_keys_is_refused_but_the_connection_goes_on() {
    let limits = Limits::default();
    let line = format!("get {}\r\n", "k ".repeat(limits.max_keys_per_get + 1));
    let rejection = refused(line.as_bytes());
    assert_eq!(
        rejection.error,
        ProtocolError::TooManyKeys {
            limit: limits.max_keys_per_get
        }
    );
    assert_eq!(
        rejection.reply(),
        Some(&b"SERVER_ERROR request too long\r\n"[..])
    );
    assert_eq!((rejection.consumed, rejection.close), (line.len(), false));
}

#[test]
fn long_lines_close_the_connection() {
    let limits = Limits::default();
    // 2048 bytes before the newline is the longest line memcached is sure
    // to take (try_read_command_ascii closes past 2048 without a newline).
    let longest = format!("stats {}\r\n", "x".repeat(2048 - 7));
    assert_eq!(longest.find('\n'), Some(2048));
    assert!(matches!(
        parse(longest.as_bytes(), &limits),
        Parsed::Complete { .. }
    ));
    for input in [
        format!("stats {}\r\n", "x".repeat(2048 - 6)),
        format!("set k 0 0 1{}", " ".repeat(3000)),
        // `gat` is not a `get` to memcached here.
        format!("gat 0 {}", "k ".repeat(1500)),
        // Nor a `get` after more than 100 spaces.
        format!("{}get {}", " ".repeat(101), "k ".repeat(1500)),
    ] {
        let rejection = refused(input.as_bytes());
        assert_eq!(
            rejection.error,
            ProtocolError::LineTooLong {
                limit_bytes: limits.max_line_bytes
            }
        );
        assert!(rejection.close);
        assert_eq!(rejection.reply(), None);
        assert_eq!(rejection.consumed, input.len());
    }
    // A get line may grow to max_get_line_bytes, no further.
    let incomplete = format!("get {}", "k ".repeat(20_000));
    assert_eq!(parse(incomplete.as_bytes(), &limits), Parsed::Incomplete);
    let too_long = format!("get {}", "k ".repeat(40_000));
    let rejection = refused(too_long.as_bytes());
    assert_eq!(
        rejection.error,
        ProtocolError::GetLineTooLong {
            limit_bytes: limits.max_get_line_bytes
        }
    );
    assert!(rejection.close);
    assert_eq!(
        rejection.reply(),
        Some(&b"SERVER_ERROR request too long\r\n"[..])
    );
}

#[test]
fn meta_flag_errors() {
    let cases: &[(&str, &str)] = &[
        ("mg k q q\r\n", "CLIENT_ERROR duplicate flag\r\n"),
        // A flag byte of 127 or more is reported as a duplicate.
        ("mg k \u{ff}\r\n", "CLIENT_ERROR duplicate flag\r\n"),
        ("mg k !\r\n", "CLIENT_ERROR invalid flag\r\n"),
        ("mg k W\r\n", "CLIENT_ERROR invalid flag\r\n"),
        (
            "mg k Tx\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        (
            "mg k N\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        (
            "mg k R1.5\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        (
            "mg k C-1\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        (
            "mg k Ex\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        (
            "mg k Mxx\r\n",
            "CLIENT_ERROR incorrect length for M token\r\n",
        ),
        (
            "mg k M\r\n",
            "CLIENT_ERROR incorrect length for M token\r\n",
        ),
        (
            "mg k Jx\r\n",
            "CLIENT_ERROR invalid numeric initial value\r\n",
        ),
        (
            "mg k Dx\r\n",
            "CLIENT_ERROR invalid numeric delta value\r\n",
        ),
        ("mg k b\r\n", "CLIENT_ERROR error decoding key\r\n"),
        // `F` sets no message of its own (_meta_flag_preparse).
        ("mg k Fx\r\n", BAD_FORMAT),
        ("mg k F4294967296\r\n", BAD_FORMAT),
        // A bad token is noted and the words read on: the last message
        // wins, but a duplicate or unknown flag stops at once.
        (
            "mg k Tx Dx\r\n",
            "CLIENT_ERROR invalid numeric delta value\r\n",
        ),
        (
            "mg k Tx Fx\r\n",
            "CLIENT_ERROR bad token in command line format\r\n",
        ),
        ("mg k Tx !\r\n", "CLIENT_ERROR invalid flag\r\n"),
        ("mg k ! Tx\r\n", "CLIENT_ERROR invalid flag\r\n"),
        // md and ma answer every flag error alike.
        ("md k q q\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"),
        ("md k !\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"),
        ("md k Tx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"),
        ("md k b\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"),
        ("ma k Dx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"),
        ("ma k Mxx\r\n", "CLIENT_ERROR invalid or duplicate flag\r\n"),
        (
            "ma k MX\r\n",
            "CLIENT_ERROR invalid mode for ma M token\r\n",
        ),
        // me: any fault is a bad format.
        ("me k b\r\n", BAD_FORMAT),
        ("me k\x01\r\n", BAD_FORMAT),
        ("mg k\x01 v\r\n", BAD_FORMAT),
    ];
    for (input, expected) in cases {
        assert_eq!(answer(input.as_bytes()), *expected, "{input:?}");
        // Meta errors are answered even with `q`.
        let quiet = input.replace("\r\n", " q\r\n");
        if !input.contains(" q ") {
            assert!(refused(quiet.as_bytes()).reply().is_some(), "{quiet:?}");
        }
    }
}

#[test]
fn meta_length_limits() {
    let opaque = "1".repeat(32);
    for command in ["mg k", "md k", "ma k"] {
        let input = format!("{command} O{opaque}\r\n");
        assert_eq!(
            answer(input.as_bytes()),
            "CLIENT_ERROR opaque token too long\r\n"
        );
    }
    // 18 flags are too many for mg, md and ma; mg has its own words.
    let flags = "c f h k l O s t v q u N0 R0 T0 P L M1 I";
    assert_eq!(
        answer(format!("mg k {flags}\r\n").as_bytes()),
        "CLIENT_ERROR options flags are too long\r\n"
    );
    for command in ["md", "ma"] {
        assert_eq!(
            answer(format!("{command} k {flags}\r\n").as_bytes()),
            "CLIENT_ERROR options flags too long\r\n"
        );
    }
    // A mode error is found before a long opaque.
    assert_eq!(
        answer(format!("ma k O{opaque} MX\r\n").as_bytes()),
        "CLIENT_ERROR invalid mode for ma M token\r\n"
    );
}

#[test]
fn meta_set_errors_swallow_once_the_length_is_known() {
    let opaque = "1".repeat(32);
    let flags16 = "c k O s q F0 T0 C0 E0 I MS N0 P L v t";
    let cases: &[(String, &str, usize)] = &[
        ("ms k\r\n".into(), BAD_FORMAT, 0),
        ("ms k x\r\n".into(), BAD_FORMAT, 0),
        ("ms k -1\r\n".into(), BAD_FORMAT, 0),
        (format!("ms {} 1\r\n", "k".repeat(251)), BAD_FORMAT, 0),
        (
            format!("ms k 1 {flags16} u\r\n"),
            "CLIENT_ERROR options flags too long\r\n",
            0,
        ),
        (
            "ms k 1 q q\r\n".into(),
            "CLIENT_ERROR duplicate flag\r\n",
            3,
        ),
        ("ms k 1 !\r\n".into(), "CLIENT_ERROR invalid flag\r\n", 3),
        (
            "ms k 1 Tx\r\n".into(),
            "CLIENT_ERROR bad token in command line format\r\n",
            3,
        ),
        (
            "ms k 1 b\r\n".into(),
            "CLIENT_ERROR error decoding key\r\n",
            3,
        ),
        (
            "ms k 1 MX\r\n".into(),
            "CLIENT_ERROR invalid mode for ms M token\r\n",
            3,
        ),
        (
            format!("ms k 1 O{opaque}\r\n"),
            "CLIENT_ERROR opaque token too long\r\n",
            3,
        ),
        (
            format!("ms k 1 O{opaque} MX\r\n"),
            "CLIENT_ERROR invalid mode for ms M token\r\n",
            3,
        ),
        (
            "ms k 1048577 q\r\n".into(),
            "SERVER_ERROR object too large for cache\r\n",
            1_048_579,
        ),
    ];
    for (input, expected, swallow) in cases {
        let rejection = refused(input.as_bytes());
        assert_eq!(
            String::from_utf8_lossy(rejection.reply().unwrap_or_default()),
            *expected,
            "{input:?}"
        );
        assert_eq!(rejection.swallow_bytes, *swallow, "{input:?}");
    }
    // 16 flags is the most `ms` takes.
    assert!(matches!(
        parse(
            format!("ms k 1 {flags16}\r\nx\r\n").as_bytes(),
            &Limits::default()
        ),
        Parsed::Complete { .. }
    ));
}

#[test]
fn every_error_has_memcacheds_words() {
    use ProtocolError::*;
    let all = [
        (UnknownCommand, Some("ERROR")),
        (BadCommandLine, Some("CLIENT_ERROR bad command line format")),
        (
            BadDeleteArguments,
            Some("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"),
        ),
        (
            InvalidExptime,
            Some("CLIENT_ERROR invalid exptime argument"),
        ),
        (
            InvalidDelta,
            Some("CLIENT_ERROR invalid numeric delta argument"),
        ),
        (BadDataChunk, Some("CLIENT_ERROR bad data chunk")),
        (
            ObjectTooLarge,
            Some("SERVER_ERROR object too large for cache"),
        ),
        (LineTooLong { limit_bytes: 2048 }, None),
        (HttpRequest, None),
        (
            GetLineTooLong { limit_bytes: 1 },
            Some("SERVER_ERROR request too long"),
        ),
        (
            TooManyKeys { limit: 1 },
            Some("SERVER_ERROR request too long"),
        ),
        (
            MetaGetFlagsTooLong,
            Some("CLIENT_ERROR options flags are too long"),
        ),
        (
            MetaFlagsTooLong,
            Some("CLIENT_ERROR options flags too long"),
        ),
        (DuplicateFlag, Some("CLIENT_ERROR duplicate flag")),
        (InvalidFlag, Some("CLIENT_ERROR invalid flag")),
        (
            InvalidOrDuplicateFlag,
            Some("CLIENT_ERROR invalid or duplicate flag"),
        ),
        (
            BadFlagToken,
            Some("CLIENT_ERROR bad token in command line format"),
        ),
        (KeyDecode, Some("CLIENT_ERROR error decoding key")),
        (
            ModeTokenLength,
            Some("CLIENT_ERROR incorrect length for M token"),
        ),
        (
            InvalidInitialValue,
            Some("CLIENT_ERROR invalid numeric initial value"),
        ),
        (
            InvalidDeltaValue,
            Some("CLIENT_ERROR invalid numeric delta value"),
        ),
        (OpaqueTooLong, Some("CLIENT_ERROR opaque token too long")),
        (
            InvalidSetMode,
            Some("CLIENT_ERROR invalid mode for ms M token"),
        ),
        (
            InvalidArithmeticMode,
            Some("CLIENT_ERROR invalid mode for ma M token"),
        ),
    ];
    for (error, words) in all {
        let expected = words.map(|w| format!("{w}\r\n"));
        let reply = error
            .reply()
            .map(|r| String::from_utf8(r.to_vec()).unwrap());
        assert_eq!(reply, expected);
        // Ours describe the bound; memcached's are their own words.
        if let (Some(words), false) = (
            words,
            matches!(error, GetLineTooLong { .. } | TooManyKeys { .. }),
        ) {
            assert_eq!(error.to_string(), words);
        }
        assert_eq!(
            error.closes_connection(),
            words.is_none() || matches!(error, GetLineTooLong { .. })
        );
    }
}
