//! What a client asks: one type per command, owning its bytes.

use bytes::Bytes;

/// One command as a client sends it. Keys are raw bytes (a meta key sent
/// in base64 is decoded); data blocks are [`Bytes`]. Nothing borrows the
/// buffer it was parsed from.
///
/// Two ways of asking for quiet answers: classic commands' `noreply`
/// ([`Command::noreply`]) suppresses every answer, errors included, while
/// meta commands' `quiet` (`q`) suppresses only the nominal one; the meta
/// reply encoders apply it themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `get`, `gets`, `gat`, `gats` (and memcached's undocumented `bget`).
    Get(Get),
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas`.
    Store(Store),
    /// `delete <key> [0] [noreply]`: `DELETED` or `NOT_FOUND`.
    Delete {
        /// The key.
        key: Bytes,
        /// Send no answer.
        noreply: bool,
    },
    /// `incr`/`decr <key> <delta> [noreply]`: the new value, or
    /// `NOT_FOUND`; `decr` stops at 0, `incr` wraps at 2^64.
    Arithmetic {
        /// Which way.
        op: ArithmeticOp,
        /// The key.
        key: Bytes,
        /// How much.
        delta: u64,
        /// Send no answer.
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`: `TOUCHED` or `NOT_FOUND`.
    Touch {
        /// The key.
        key: Bytes,
        /// The new exptime, raw ([`crate::expiry_unix_secs`]).
        exptime: i64,
        /// Send no answer.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`: `OK`.
    FlushAll {
        /// When to flush, an exptime (`None` or `0` or negative: now).
        delay: Option<i64>,
        /// Send no answer.
        noreply: bool,
    },
    /// `version`: `VERSION <version>`.
    Version,
    /// `verbosity <level> [noreply]`: `OK`.
    Verbosity {
        /// The logging level.
        level: u32,
        /// Send no answer.
        noreply: bool,
    },
    /// `stats [args]`: `STAT <name> <value>` lines and `END`.
    Stats {
        /// The words after `stats`: empty for the general statistics, else
        /// a group (`settings`, `items`, `slabs`, `sizes`, `conns`, `reset`,
        /// `detail on`, ...). An unknown group is answered `ERROR`.
        args: Vec<Bytes>,
    },
    /// `quit`: close the connection, no answer.
    Quit,
    /// `mn`: `MN`, never quiet; a client ends a pipeline of quiet meta
    /// commands with it.
    MetaNoop,
    /// `mg`.
    MetaGet(MetaGet),
    /// `ms`.
    MetaSet(MetaSet),
    /// `md`.
    MetaDelete(MetaDelete),
    /// `ma`.
    MetaArithmetic(MetaArithmetic),
    /// `me`.
    MetaDebug(MetaDebug),
}

impl Command {
    /// The command's name as sent (`get`, `cas`, `mg`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Get(get) => get.name(),
            Command::Store(store) => store.op.name(),
            Command::Delete { .. } => "delete",
            Command::Arithmetic { op, .. } => op.name(),
            Command::Touch { .. } => "touch",
            Command::FlushAll { .. } => "flush_all",
            Command::Version => "version",
            Command::Verbosity { .. } => "verbosity",
            Command::Stats { .. } => "stats",
            Command::Quit => "quit",
            Command::MetaNoop => "mn",
            Command::MetaGet(_) => "mg",
            Command::MetaSet(_) => "ms",
            Command::MetaDelete(_) => "md",
            Command::MetaArithmetic(_) => "ma",
            Command::MetaDebug(_) => "me",
        }
    }

    /// Whether a classic command said `noreply`: send it no answer at all,
    /// not even an error. Always false for meta commands (see
    /// [`Command::quiet`]).
    pub fn noreply(&self) -> bool {
        match self {
            Command::Store(store) => store.noreply,
            Command::Delete { noreply, .. }
            | Command::Arithmetic { noreply, .. }
            | Command::Touch { noreply, .. }
            | Command::FlushAll { noreply, .. }
            | Command::Verbosity { noreply, .. } => *noreply,
            _ => false,
        }
    }

    /// Whether a meta command said `q`: its nominal answer is left out
    /// (which one depends on the command; the meta reply encoders know).
    pub fn quiet(&self) -> bool {
        match self {
            Command::MetaGet(c) => c.quiet,
            Command::MetaSet(c) => c.quiet,
            Command::MetaDelete(c) => c.quiet,
            Command::MetaArithmetic(c) => c.quiet,
            _ => false,
        }
    }

    /// The data block of a storage command (`Store`, `MetaSet`).
    pub fn data(&self) -> Option<&Bytes> {
        match self {
            Command::Store(store) => Some(&store.data),
            Command::MetaSet(set) => Some(&set.data),
            _ => None,
        }
    }

    pub(crate) fn data_mut(&mut self) -> Option<&mut Bytes> {
        match self {
            Command::Store(store) => Some(&mut store.data),
            Command::MetaSet(set) => Some(&mut set.data),
            _ => None,
        }
    }
}

/// A retrieval: `get`, `gets`, `gat` or `gats`. Each hit is answered with
/// a `VALUE` block (with its cas unique if `return_cas`), then `END`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    /// The keys in the order sent, at most `max_keys_per_get`. Never empty
    /// for `get`/`gets`; `gat <exptime>` with no key is valid in memcached
    /// and answered `END`.
    pub keys: Vec<Bytes>,
    /// `gets`/`gats`: answer each item's cas unique.
    pub return_cas: bool,
    /// `gat`/`gats`: the exptime each hit gets, raw.
    pub touch_exptime: Option<i64>,
}

impl Get {
    /// `get`, `gets`, `gat` or `gats`.
    pub fn name(&self) -> &'static str {
        match (self.touch_exptime.is_some(), self.return_cas) {
            (false, false) => "get",
            (false, true) => "gets",
            (true, false) => "gat",
            (true, true) => "gats",
        }
    }
}

/// A classic storage command and its data block. Answered `STORED`,
/// `NOT_STORED` (add/replace/append/prepend's condition failed), `EXISTS`
/// (cas mismatch) or `NOT_FOUND` (cas on a missing key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    /// Which command.
    pub op: StoreOp,
    /// The key.
    pub key: Bytes,
    /// The client's opaque flags, stored with the item.
    pub flags: u32,
    /// The exptime, raw ([`crate::expiry_unix_secs`]). `append` and
    /// `prepend` ignore it and `flags`.
    pub exptime: i64,
    /// The value.
    pub data: Bytes,
    /// Send no answer.
    pub noreply: bool,
}

/// Which storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// Store unconditionally.
    Set,
    /// Store only if the key holds nothing.
    Add,
    /// Store only if the key holds something.
    Replace,
    /// Add the data after an existing item's.
    Append,
    /// Add the data before an existing item's.
    Prepend,
    /// Store only if the item's cas unique is still this one.
    Cas {
        /// The cas unique the client last read (`gets`).
        unique: u64,
    },
}

impl StoreOp {
    /// The command's name.
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::Set => "set",
            StoreOp::Add => "add",
            StoreOp::Replace => "replace",
            StoreOp::Append => "append",
            StoreOp::Prepend => "prepend",
            StoreOp::Cas { .. } => "cas",
        }
    }
}

/// Which way `incr`/`decr` (and `ma`'s mode) go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ArithmeticOp {
    /// Add, wrapping at 2^64.
    #[default]
    Incr,
    /// Subtract, stopping at 0.
    Decr,
}

impl ArithmeticOp {
    /// `incr` or `decr`.
    pub fn name(self) -> &'static str {
        match self {
            ArithmeticOp::Incr => "incr",
            ArithmeticOp::Decr => "decr",
        }
    }
}

/// A meta flag that asks for something back, named by its letter. They
/// are answered in the order the request gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReturnFlag {
    /// `c`: the item's cas unique.
    Cas,
    /// `f`: the client flags.
    ClientFlags,
    /// `h`: whether the item had been fetched before, `0` or `1`.
    Hit,
    /// `k`: the key (base64, followed by `b`, for a base64 key).
    Key,
    /// `l`: seconds since the item was last accessed.
    LastAccess,
    /// `O`: the opaque token, copied back (the token itself is the
    /// command's `opaque` field; this marks its place).
    Opaque,
    /// `s`: the value's size in bytes.
    Size,
    /// `t`: seconds of TTL left, `-1` for none.
    Ttl,
}

impl ReturnFlag {
    /// The flag's letter.
    pub fn letter(self) -> u8 {
        match self {
            ReturnFlag::Cas => b'c',
            ReturnFlag::ClientFlags => b'f',
            ReturnFlag::Hit => b'h',
            ReturnFlag::Key => b'k',
            ReturnFlag::LastAccess => b'l',
            ReturnFlag::Opaque => b'O',
            ReturnFlag::Size => b's',
            ReturnFlag::Ttl => b't',
        }
    }

    pub(crate) fn from_letter(letter: u8) -> Option<ReturnFlag> {
        Some(match letter {
            b'c' => ReturnFlag::Cas,
            b'f' => ReturnFlag::ClientFlags,
            b'h' => ReturnFlag::Hit,
            b'k' => ReturnFlag::Key,
            b'l' => ReturnFlag::LastAccess,
            b'O' => ReturnFlag::Opaque,
            b's' => ReturnFlag::Size,
            b't' => ReturnFlag::Ttl,
            _ => return None,
        })
    }
}

const RETURN_FLAG_KINDS: usize = 8;

/// The return flags `mg` answers: all of them.
pub(crate) const GET_RETURNS: &[ReturnFlag] = &[
    ReturnFlag::Cas,
    ReturnFlag::ClientFlags,
    ReturnFlag::Hit,
    ReturnFlag::Key,
    ReturnFlag::LastAccess,
    ReturnFlag::Opaque,
    ReturnFlag::Size,
    ReturnFlag::Ttl,
];

/// The return flags `ms` answers (`_finalize_mset`).
pub(crate) const SET_RETURNS: &[ReturnFlag] = &[
    ReturnFlag::Cas,
    ReturnFlag::Key,
    ReturnFlag::Opaque,
    ReturnFlag::Size,
];

/// The return flags `md` answers.
pub(crate) const DELETE_RETURNS: &[ReturnFlag] = &[ReturnFlag::Key, ReturnFlag::Opaque];

/// The return flags `ma` answers.
pub(crate) const ARITHMETIC_RETURNS: &[ReturnFlag] = &[
    ReturnFlag::Cas,
    ReturnFlag::Ttl,
    ReturnFlag::Key,
    ReturnFlag::Opaque,
];

/// The return flags of a meta request, in the order given, each at most
/// once. A command keeps only those it answers (see each command).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReturnFlags {
    order: [Option<ReturnFlag>; RETURN_FLAG_KINDS],
}

impl ReturnFlags {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// These, in this order (a repeat is dropped).
    pub fn of(flags: &[ReturnFlag]) -> Self {
        flags.iter().fold(Self::new(), |all, &flag| all.with(flag))
    }

    /// This set with `flag` added last (unchanged if it is there).
    #[must_use]
    pub fn with(mut self, flag: ReturnFlag) -> Self {
        if let Some(slot) = self.order.iter_mut().find(|slot| match slot {
            None => true,
            Some(present) => *present == flag,
        }) {
            *slot = Some(flag);
        }
        self
    }

    /// Whether `flag` was asked for.
    pub fn contains(&self, flag: ReturnFlag) -> bool {
        self.order.contains(&Some(flag))
    }

    /// The flags in request order.
    pub fn iter(&self) -> impl Iterator<Item = ReturnFlag> + '_ {
        self.order.iter().map_while(|slot| *slot)
    }

    /// Whether none was asked for.
    pub fn is_empty(&self) -> bool {
        self.order[0].is_none()
    }

    /// Only those of `allowed`, in this set's order.
    #[must_use]
    pub(crate) fn only(&self, allowed: &[ReturnFlag]) -> Self {
        self.iter()
            .filter(|flag| allowed.contains(flag))
            .fold(Self::new(), Self::with)
    }
}

impl std::fmt::Debug for ReturnFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl FromIterator<ReturnFlag> for ReturnFlags {
    fn from_iter<I: IntoIterator<Item = ReturnFlag>>(iter: I) -> Self {
        iter.into_iter().fold(Self::new(), Self::with)
    }
}

/// `mg <key> <flags>*`: fetch one item. A hit is `VA <size> <flags>` and
/// the value when `v` was given, else `HD <flags>`; a miss is `EN` (left
/// out with `q`). Answer it with [`MetaGet::encode_reply`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetaGet {
    /// The key, decoded if it was sent in base64.
    pub key: Bytes,
    /// `b`: the key travels in base64 (and is echoed so).
    pub base64_key: bool,
    /// `c f h k l O s t`, in request order.
    pub returns: ReturnFlags,
    /// `O<token>`: at most 31 bytes, copied back.
    pub opaque: Option<Bytes>,
    /// `q`: leave out `EN`.
    pub quiet: bool,
    /// `v`: send the value.
    pub return_value: bool,
    /// `u`: do not bump the item in the LRU (nor mark it fetched).
    pub no_lru_bump: bool,
    /// `N<exptime>`: on a miss, create an empty item with this exptime
    /// and tell this client it won (`W`).
    pub vivify_exptime: Option<i64>,
    /// `R<exptime>`: win (`W`) if the item's TTL is below this.
    pub recache_exptime: Option<i64>,
    /// `T<exptime>`: give the item this exptime (like `touch`).
    pub new_exptime: Option<i64>,
    /// `C<cas>`: with `v`, send the value only if the cas differs
    /// (memcached 1.6.21 and later).
    pub compare_cas: Option<u64>,
    /// `E<cas>`: the cas unique to give an item this creates or changes
    /// (memcached 1.6.21 and later).
    pub new_cas: Option<u64>,
}

/// `ms <key> <datalen> <flags>*` and its data block: store an item.
/// Answered `HD` (stored; left out with `q`), `NS`, `EX` or `NF`. Answer
/// it with [`MetaSet::encode_reply`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetaSet {
    /// The key, decoded if it was sent in base64.
    pub key: Bytes,
    /// `b`: the key travels in base64.
    pub base64_key: bool,
    /// The value.
    pub data: Bytes,
    /// `c k O s`, in request order (`s`: memcached 1.6.21 and later).
    pub returns: ReturnFlags,
    /// `O<token>`: at most 31 bytes, copied back.
    pub opaque: Option<Bytes>,
    /// `q`: leave out `HD`.
    pub quiet: bool,
    /// `F<flags>`: the client flags (0 if absent).
    pub client_flags: u32,
    /// `T<exptime>`: the exptime, raw (0 if absent: never).
    pub exptime: i64,
    /// `C<cas>`: store only if the item's cas is this one (turns `set` and
    /// `replace` into `cas`).
    pub compare_cas: Option<u64>,
    /// `E<cas>`: the cas unique to give the stored item.
    pub new_cas: Option<u64>,
    /// `I`: with `C`, an older cas marks the item stale instead of failing.
    pub invalidate: bool,
    /// `M<mode>`: which storage command.
    pub mode: SetMode,
    /// `N<exptime>`: in append or prepend mode, create the item on a miss
    /// with this exptime (memcached 1.6.21 and later).
    pub vivify_exptime: Option<i64>,
}

/// `ms`'s mode (`M` token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SetMode {
    /// `S`: set (the default).
    #[default]
    Set,
    /// `E`: add.
    Add,
    /// `A`: append.
    Append,
    /// `P`: prepend.
    Prepend,
    /// `R`: replace.
    Replace,
}

impl SetMode {
    /// The mode's letter.
    pub fn letter(self) -> u8 {
        match self {
            SetMode::Set => b'S',
            SetMode::Add => b'E',
            SetMode::Append => b'A',
            SetMode::Prepend => b'P',
            SetMode::Replace => b'R',
        }
    }
}

/// `md <key> <flags>*`: delete an item, or mark it stale. Answered `HD`
/// (left out with `q`), `NF` or `EX`. Answer it with
/// [`MetaDelete::encode_reply`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetaDelete {
    /// The key, decoded if it was sent in base64.
    pub key: Bytes,
    /// `b`: the key travels in base64.
    pub base64_key: bool,
    /// `k O`, in request order.
    pub returns: ReturnFlags,
    /// `O<token>`: at most 31 bytes, copied back.
    pub opaque: Option<Bytes>,
    /// `q`: leave out `HD`.
    pub quiet: bool,
    /// `C<cas>`: delete only if the item's cas is this one.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: with `I`, the cas the stale item gets (1.6.21 and later).
    pub new_cas: Option<u64>,
    /// `I`: mark the item stale and bump its cas instead of deleting it.
    pub invalidate: bool,
    /// `T<exptime>`: with `I`, the stale item's new exptime.
    pub new_exptime: Option<i64>,
    /// `x`: drop the value but keep the item (1.6.21 and later).
    pub remove_value: bool,
}

/// `ma <key> <flags>*`: add to or subtract from a number. Answered `HD`,
/// or `VA` and the number with `v` (both left out with `q`), `NF`, `NS`
/// or `EX`. Answer it with [`MetaArithmetic::encode_reply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaArithmetic {
    /// The key, decoded if it was sent in base64.
    pub key: Bytes,
    /// `b`: the key travels in base64.
    pub base64_key: bool,
    /// `c t k O`, in request order.
    pub returns: ReturnFlags,
    /// `O<token>`: at most 31 bytes, copied back.
    pub opaque: Option<Bytes>,
    /// `q`: leave out the success answer.
    pub quiet: bool,
    /// `v`: send the new value.
    pub return_value: bool,
    /// `C<cas>`: apply only if the item's cas is this one.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: the cas the item gets (1.6.21 and later).
    pub new_cas: Option<u64>,
    /// `N<exptime>`: on a miss, create the item (value `initial`) with this
    /// exptime.
    pub vivify_exptime: Option<i64>,
    /// `J<n>`: the value a vivified item starts at (default 0).
    pub initial: u64,
    /// `D<n>`: how much (default 1).
    pub delta: u64,
    /// `T<exptime>`: the item's new exptime on success.
    pub new_exptime: Option<i64>,
    /// `M<mode>`: `I`/`+` increment (default), `D`/`-` decrement.
    pub mode: ArithmeticOp,
}

impl Default for MetaArithmetic {
    fn default() -> Self {
        MetaArithmetic {
            key: Bytes::new(),
            base64_key: false,
            returns: ReturnFlags::new(),
            opaque: None,
            quiet: false,
            return_value: false,
            compare_cas: None,
            new_cas: None,
            vivify_exptime: None,
            initial: 0,
            delta: 1,
            new_exptime: None,
            mode: ArithmeticOp::Incr,
        }
    }
}

/// `me <key> [b]`: an item's metadata as text, `ME <key> exp=.. la=..
/// cas=.. fetch=.. cls=.. size=..`, or `EN`. Answer it with
/// [`MetaDebug::encode_reply`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetaDebug {
    /// The key, decoded if it was sent in base64.
    pub key: Bytes,
    /// `b`: the key travels in base64.
    pub base64_key: bool,
}
