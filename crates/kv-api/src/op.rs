use bytes::Bytes;

use crate::Key;

/// When an item expires. Calls carry absolute times so every node agrees
/// whatever a client's clock says; memcached's relative and absolute
/// `exptime` forms are turned into this at the entry node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expiry {
    /// Never.
    Never,
    /// At this unix time in seconds (a time in the past: already expired).
    At(u64),
}

impl Expiry {
    /// 0 for never, the unix seconds otherwise (a time of 0 is mapped to 1,
    /// which is in the past all the same).
    pub fn to_wire(self) -> u64 {
        match self {
            Expiry::Never => 0,
            Expiry::At(t) => t.max(1),
        }
    }

    /// The inverse of [`Self::to_wire`].
    pub fn from_wire(v: u64) -> Self {
        if v == 0 {
            Expiry::Never
        } else {
            Expiry::At(v)
        }
    }

    /// `ttl_secs` seconds from now; 0 is never (memcached's relative
    /// exptime, without its 30-day switch to absolute times). None when
    /// the time would pass any a clock can name.
    pub fn after_secs(ttl_secs: u64) -> Option<Self> {
        if ttl_secs == 0 {
            return Some(Expiry::Never);
        }
        now_unix_secs().checked_add(ttl_secs).map(Expiry::At)
    }

    /// Whether an item with this expiry is gone at `now_unix_secs`.
    pub fn passed(self, now_unix_secs: u64) -> bool {
        matches!(self, Expiry::At(t) if t <= now_unix_secs)
    }
}

/// The time now, in unix seconds: the clock expiries are kept in.
pub fn now_unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a store operation does when the key exists or not (memcached's
/// storage commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store whatever is there.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Add the bytes after the present value (flags and expiry kept).
    Append,
    /// Add the bytes before the present value (flags and expiry kept).
    Prepend,
    /// Store only if the item's CAS value is still this one.
    Cas(u64),
}

/// What the client library wrote under a key: a plain value, the head of a
/// value stored as slices, or an array's directory. Kept beside the item
/// so a reader knows what it got without guessing from the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ItemKind {
    /// The bytes are the value.
    #[default]
    Plain = 0,
    /// The head of a large value: how many slices follow (`LargeHead`).
    LargeHead = 1,
    /// An array's directory value.
    ArrayDirectory = 2,
}

impl ItemKind {
    /// Decodes the kind byte.
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(ItemKind::Plain),
            1 => Some(ItemKind::LargeHead),
            2 => Some(ItemKind::ArrayDirectory),
            _ => None,
        }
    }
}

/// One key-value operation, as a batch carries it to the key's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    /// Read an item; with `touch`, set its expiry too (memcached's gat).
    Get {
        /// The key.
        key: Key,
        /// A new expiry to set on a hit.
        touch: Option<Expiry>,
    },
    /// Store a value.
    Store {
        /// The key.
        key: Key,
        /// When to store.
        mode: StoreMode,
        /// The client's 32 opaque bits.
        flags: u32,
        /// When it expires.
        expiry: Expiry,
        /// What the client wrote.
        kind: ItemKind,
        /// The bytes.
        value: Bytes,
    },
    /// Delete an item; with `cas`, only if it is still that version.
    Delete {
        /// The key.
        key: Key,
        /// The CAS value the item must have.
        cas: Option<u64>,
    },
    /// Add to or subtract from a decimal number stored as the value
    /// (memcached's incr and decr: 64-bit, wrapping up, stopping at 0 down).
    Arith {
        /// The key.
        key: Key,
        /// Subtract instead of add.
        decrement: bool,
        /// The amount.
        delta: u64,
        /// On a miss, create the item with this value and expiry (the meta
        /// protocol's `N` and `J` flags) instead of answering not found.
        vivify: Option<(u64, Expiry)>,
        /// The CAS value the item must have.
        cas: Option<u64>,
    },
    /// Set an item's expiry.
    Touch {
        /// The key.
        key: Key,
        /// The new expiry.
        expiry: Expiry,
    },
}

impl KvOp {
    /// The key the operation names.
    pub fn key(&self) -> &Key {
        match self {
            KvOp::Get { key, .. }
            | KvOp::Store { key, .. }
            | KvOp::Delete { key, .. }
            | KvOp::Arith { key, .. }
            | KvOp::Touch { key, .. } => key,
        }
    }

    /// Bytes the operation takes in a call, about.
    pub fn wire_bytes(&self) -> usize {
        let value = match self {
            KvOp::Store { value, .. } => value.len(),
            _ => 0,
        };
        32 + self.key().len() + value
    }
}

/// An item as a get finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The client's 32 opaque bits.
    pub flags: u32,
    /// Its CAS value: unique among the versions of this key.
    pub cas: u64,
    /// When it expires.
    pub expiry: Expiry,
    /// What the client wrote.
    pub kind: ItemKind,
    /// The value.
    pub value: Bytes,
}

/// Why a node refused an operation; the memcached face turns each into
/// memcached's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FailKind {
    /// No room: the node's memory or device is full (memcached's `SERVER_ERROR
    /// out of memory storing object`).
    OutOfMemory = 1,
    /// A value beyond the item size limit.
    TooLarge = 2,
    /// The tenant's byte quota is used up.
    QuotaBytes = 3,
    /// The tenant's key quota is used up.
    QuotaKeys = 4,
    /// incr or decr of a value that is not a decimal number.
    NonNumeric = 5,
    /// The tenant is over its rate limit for longer than a request waits.
    Throttled = 6,
    /// Anything else (the message says what).
    Internal = 7,
    /// The tenant is unknown or its secret is wrong.
    Denied = 8,
    /// The operation itself is wrong (a bad key); never sent.
    BadInput = 9,
    /// The key's node could not be reached.
    Unavailable = 10,
}

impl FailKind {
    /// Decodes the kind byte.
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => FailKind::OutOfMemory,
            2 => FailKind::TooLarge,
            3 => FailKind::QuotaBytes,
            4 => FailKind::QuotaKeys,
            5 => FailKind::NonNumeric,
            6 => FailKind::Throttled,
            7 => FailKind::Internal,
            8 => FailKind::Denied,
            9 => FailKind::BadInput,
            10 => FailKind::Unavailable,
            _ => return None,
        })
    }
}

impl KvAnswer {
    /// The most bytes the answer to `op` can take in a reply: what a node
    /// sets aside before it runs `op`, so its reply never outgrows a frame.
    pub fn most_bytes_for(op: &KvOp) -> usize {
        match op {
            KvOp::Get { .. } => crate::MAX_VALUE_BYTES + 64,
            _ => 64 + 1024,
        }
    }

    /// Bytes the answer takes in a reply, about.
    pub fn wire_bytes(&self) -> usize {
        match self {
            KvAnswer::Value(item) => 32 + item.value.len(),
            KvAnswer::Failed { message, .. } => 4 + message.len().min(1024),
            _ => 17,
        }
    }
}

/// The answer to one [`KvOp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvAnswer {
    /// A get found the item.
    Value(Item),
    /// A get found nothing (or an expired item).
    Miss,
    /// A store stored; the item's new CAS value.
    Stored {
        /// The new CAS value.
        cas: u64,
    },
    /// An add found the key, or a replace, append or prepend did not.
    NotStored,
    /// A CAS store or delete found another version.
    Exists,
    /// A CAS store, delete, arith or touch found no item.
    NotFound,
    /// A delete deleted.
    Deleted,
    /// A touch touched.
    Touched,
    /// An arith's result.
    Number {
        /// The new value.
        value: u64,
        /// The item's new CAS value.
        cas: u64,
    },
    /// Refused.
    Failed {
        /// Why, as a kind the faces map to their answers.
        kind: FailKind,
        /// Why, for people.
        message: String,
    },
}
