//! Why a command or an answer was refused, and what memcached says to it.

/// Why a command was refused. Each variant is one of memcached 1.6's
/// answers (proto_text.c), or one of ours where a bound of [`Limits`]
/// refuses what memcached would take; [`ProtocolError::reply`] gives the
/// exact bytes to send. The `Display` text is the answer without its
/// `\r\n`, or, for the errors memcached answers by closing the connection,
/// what went wrong.
///
/// [`Limits`]: crate::Limits
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A command memcached does not have, or one with the wrong number of
    /// words (its `WANT_TOKENS` checks), or an empty line: `ERROR`.
    #[error("ERROR")]
    UnknownCommand,
    /// A key too long, or with a control character in it, a number that
    /// does not parse, a negative or huge data length:
    /// `CLIENT_ERROR bad command line format`.
    #[error("CLIENT_ERROR bad command line format")]
    BadCommandLine,
    /// `delete` with a time other than `0` or a stray word.
    #[error("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]")]
    BadDeleteArguments,
    /// An exptime (`touch`, `gat`, `gats`) or `flush_all` delay that does
    /// not parse.
    #[error("CLIENT_ERROR invalid exptime argument")]
    InvalidExptime,
    /// An `incr`/`decr` delta that is not an unsigned 64-bit number.
    #[error("CLIENT_ERROR invalid numeric delta argument")]
    InvalidDelta,
    /// The data block of a storage command did not end in `\r\n`.
    #[error("CLIENT_ERROR bad data chunk")]
    BadDataChunk,
    /// A data block longer than `max_value_bytes`; it is swallowed.
    #[error("SERVER_ERROR object too large for cache")]
    ObjectTooLarge,
    /// A command line longer than `max_line_bytes` that is not a `get` or
    /// `gets`. memcached closes the connection without a word.
    #[error("command line longer than {limit_bytes} bytes")]
    LineTooLong {
        /// `max_line_bytes`.
        limit_bytes: usize,
    },
    /// An unknown command whose last word starts with `HTTP/`: memcached
    /// closes the connection without a word.
    #[error("an HTTP request on the memcached port")]
    HttpRequest,
    /// A `get`/`gets` line longer than `max_get_line_bytes` (memcached has
    /// no bound; the answer and the close are its proxy's for a request
    /// over its bound, proto_proxy.c).
    #[error("get line longer than {limit_bytes} bytes")]
    GetLineTooLong {
        /// `max_get_line_bytes`.
        limit_bytes: usize,
    },
    /// A retrieval naming more keys than `max_keys_per_get` (memcached has
    /// no bound; the answer is its proxy's for a request over its bound).
    #[error("retrieval of more than {limit} keys")]
    TooManyKeys {
        /// `max_keys_per_get`.
        limit: usize,
    },
    /// `mg` with more than 17 flags (memcached counts words: more than 20
    /// with the command, the key and its end marker).
    #[error("CLIENT_ERROR options flags are too long")]
    MetaGetFlagsTooLong,
    /// `ms` with more than 16 flags, `md` or `ma` with more than 17;
    /// memcached words it without `mg`'s "are".
    #[error("CLIENT_ERROR options flags too long")]
    MetaFlagsTooLong,
    /// A meta flag given twice, or a flag word starting with a byte of 127
    /// or more (memcached reports both so).
    #[error("CLIENT_ERROR duplicate flag")]
    DuplicateFlag,
    /// A meta flag memcached does not know.
    #[error("CLIENT_ERROR invalid flag")]
    InvalidFlag,
    /// `md` or `ma` with any flag error: they answer every one so.
    #[error("CLIENT_ERROR invalid or duplicate flag")]
    InvalidOrDuplicateFlag,
    /// A numeric meta token (`N`, `T`, `R`, `C`, `E`) that does not parse.
    #[error("CLIENT_ERROR bad token in command line format")]
    BadFlagToken,
    /// A meta key with `b` that is not base64.
    #[error("CLIENT_ERROR error decoding key")]
    KeyDecode,
    /// An `M` token that is not one character.
    #[error("CLIENT_ERROR incorrect length for M token")]
    ModeTokenLength,
    /// A `J` token that is not an unsigned 64-bit number.
    #[error("CLIENT_ERROR invalid numeric initial value")]
    InvalidInitialValue,
    /// A `D` token that is not an unsigned 64-bit number.
    #[error("CLIENT_ERROR invalid numeric delta value")]
    InvalidDeltaValue,
    /// An `O` token longer than 32 bytes, counting its `O`.
    #[error("CLIENT_ERROR opaque token too long")]
    OpaqueTooLong,
    /// `ms` with a mode other than `E`, `A`, `P`, `R`, `S`.
    #[error("CLIENT_ERROR invalid mode for ms M token")]
    InvalidSetMode,
    /// `ma` with a mode other than `I`, `+`, `D`, `-`.
    #[error("CLIENT_ERROR invalid mode for ma M token")]
    InvalidArithmeticMode,
}

impl ProtocolError {
    /// The exact answer memcached sends, `\r\n` included, or `None` where
    /// it closes the connection without one.
    pub fn reply(&self) -> Option<&'static [u8]> {
        use ProtocolError::*;
        let reply: &'static [u8] = match self {
            UnknownCommand => b"ERROR\r\n",
            BadCommandLine => b"CLIENT_ERROR bad command line format\r\n",
            BadDeleteArguments => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            ObjectTooLarge => b"SERVER_ERROR object too large for cache\r\n",
            LineTooLong { .. } | HttpRequest => return None,
            GetLineTooLong { .. } | TooManyKeys { .. } => b"SERVER_ERROR request too long\r\n",
            MetaGetFlagsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            MetaFlagsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            BadFlagToken => b"CLIENT_ERROR bad token in command line format\r\n",
            KeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            ModeTokenLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            InvalidInitialValue => b"CLIENT_ERROR invalid numeric initial value\r\n",
            InvalidDeltaValue => b"CLIENT_ERROR invalid numeric delta value\r\n",
            OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            InvalidArithmeticMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
        };
        Some(reply)
    }

    /// Whether the connection is closed after this error (after its answer,
    /// if it has one): the input cannot be resynchronised.
    pub fn closes_connection(&self) -> bool {
        matches!(
            self,
            ProtocolError::LineTooLong { .. }
                | ProtocolError::HttpRequest
                | ProtocolError::GetLineTooLong { .. }
        )
    }
}

/// A refused command: what to answer, what to drop, whether to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub error: ProtocolError,
    /// Bytes at the front of the buffer that belong to the refused command
    /// (its line, and as much of a swallowed data block as was there);
    /// [`crate::parse_bytes`] and [`crate::CommandReader`] have taken them
    /// off.
    pub consumed: usize,
    /// Bytes still to discard as they arrive: the rest of a data block
    /// memcached swallows (a value too large, a bad meta flag after a good
    /// length). [`crate::CommandReader`] does this itself.
    pub swallow_bytes: usize,
    /// The command said `noreply` and memcached keeps quiet about this
    /// error too (classic commands only; meta errors are always sent).
    pub noreply: bool,
    /// Close the connection after answering.
    pub close: bool,
}

impl Rejection {
    /// What to send: the error's answer, or `None` when memcached sends
    /// nothing (`noreply`, or an error it answers by closing).
    pub fn reply(&self) -> Option<&'static [u8]> {
        if self.noreply {
            None
        } else {
            self.error.reply()
        }
    }
}

/// Why a server's answer could not be read. The stream cannot be
/// resynchronised after one: the client should close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// An answer line longer than `max_line_bytes`.
    #[error("answer line longer than {limit_bytes} bytes")]
    LineTooLong {
        /// `max_line_bytes`.
        limit_bytes: usize,
    },
    /// A line that is none of memcached's answers.
    #[error("unrecognised answer line {line:?}")]
    Unrecognised {
        /// The start of the line, lossily as text.
        line: String,
    },
    /// A known answer with a field that does not parse.
    #[error("malformed {what} answer")]
    Malformed {
        /// Which answer.
        what: &'static str,
    },
    /// A data block longer than `max_value_bytes`.
    #[error("answer data block of {len_bytes} bytes exceeds limit {limit_bytes}")]
    ValueTooLarge {
        /// The announced length.
        len_bytes: u64,
        /// `max_value_bytes`.
        limit_bytes: usize,
    },
    /// A data block not followed by `\r\n`.
    #[error("answer data block not followed by \\r\\n")]
    BadDataChunk,
}
