//! The memcached protocol as bytes: no I/O, no storage.
//!
//! This crate owns memcached 1.6's text and meta protocol (its
//! `doc/protocol.txt`, and proto_text.c where that is silent; see
//! `docs/memcached.md`): a bounded, incremental parser of what a client
//! sends ([`parse`], [`parse_bytes`], [`CommandReader`]), typed commands
//! ([`Command`] and one struct per meta command), memcached's exact answer
//! to every malformed command ([`ProtocolError::reply`], with whether it
//! swallows a data block, stays silent for `noreply` or closes the
//! connection), and the encoders of what a server answers ([`Reply`], and
//! each meta command's `encode_reply`, which apply the flags and `q`). For
//! a client (a load generator, a command line) it also encodes commands
//! ([`Command::encode`]) and parses answers ([`parse_reply`]).
//! Everything a parse allocates is bounded by the bytes it was given and
//! [`Limits`].
//!
//! ```
//! use bytes::BytesMut;
//! use quarry_memcache::{parse_bytes, Command, Limits, Parsed, Reply};
//!
//! let limits = Limits::default();
//! let mut input = BytesMut::from(&b"set greeting 5 0 5\r\nhello\r\nget greeting\r\n"[..]);
//! let mut answers = BytesMut::new();
//!
//! let Parsed::Complete { command: Command::Store(set), .. } = parse_bytes(&mut input, &limits)
//! else {
//!     panic!("a set")
//! };
//! assert_eq!((&set.key[..], set.flags, &set.data[..]), (&b"greeting"[..], 5, &b"hello"[..]));
//! Reply::Stored.encode(&mut answers);
//!
//! let Parsed::Complete { command: Command::Get(get), .. } = parse_bytes(&mut input, &limits)
//! else {
//!     panic!("a get")
//! };
//! for key in &get.keys {
//!     let hit = Reply::Value { key: key.clone(), flags: set.flags, cas: None, data: set.data.clone() };
//!     hit.encode(&mut answers);
//! }
//! Reply::End.encode(&mut answers);
//! assert_eq!(&answers[..], b"STORED\r\nVALUE greeting 5 5\r\nhello\r\nEND\r\n");
//! assert!(input.is_empty());
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod base64;
mod classic;
mod command;
mod encode;
mod error;
mod limits;
mod meta;
mod meta_reply;
mod parse;
mod parse_reply;
mod reply;
mod words;

pub use command::{
    ArithmeticOp, Command, Get, MetaArithmetic, MetaDebug, MetaDelete, MetaGet, MetaSet,
    ReturnFlag, ReturnFlags, SetMode, Store, StoreOp,
};
pub use error::{ProtocolError, Rejection, ReplyError};
pub use limits::{expiry_unix_secs, Expiry, Limits, RELATIVE_EXPTIME_MAX_SECS};
pub use meta_reply::{
    ArithmeticOutcome, DebugView, DeleteStatus, ItemView, MetaSetOutcome, StoreStatus,
};
pub use parse::{parse, parse_bytes, CommandReader, Parsed, COPY_DATA_BELOW_BYTES};
pub use parse_reply::{parse_reply, parse_reply_bytes, ParsedReply};
pub use reply::{encode_value_header, MetaCode, MetaFlag, MetaReply, Reply};
