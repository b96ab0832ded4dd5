//! Python exceptions for Quarry's failures. Each carries the message the
//! CLI prints after `error: ` for the same failure; the class says which
//! kind it is so a program can catch it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use quarry_client::{ClientError, FailKind, KvError as KvFailure, Status, StoreError};

create_exception!(
    _quarry,
    QuarryError,
    PyException,
    "Base class of every error Quarry raises."
);
create_exception!(
    _quarry,
    NotFound,
    QuarryError,
    "No such bucket, object, command or cluster file."
);
create_exception!(
    _quarry,
    AlreadyExists,
    QuarryError,
    "The bucket (or object, with if_absent) already exists."
);
create_exception!(
    _quarry,
    InvalidInput,
    QuarryError,
    "An argument is malformed: a bucket name, key, range, size, kernel or target."
);
create_exception!(
    _quarry,
    Conflict,
    QuarryError,
    "A condition did not hold: a version mismatch, a bucket not empty, an object that changed while read."
);
create_exception!(
    _quarry,
    Unavailable,
    QuarryError,
    "The cluster, or a node of it, could not be reached or did not answer in time."
);
create_exception!(
    _quarry,
    KvError,
    QuarryError,
    "A key-value operation a node refused, or an answer that breaks the large-value or array format."
);
create_exception!(
    _quarry,
    OutOfMemory,
    KvError,
    "No room for the item: the node's memory or device is full, or the tenant's byte or key quota is used up."
);
create_exception!(
    _quarry,
    Denied,
    KvError,
    "The tenant is not known to the cluster, or its secret is wrong."
);
create_exception!(
    _quarry,
    Throttled,
    KvError,
    "The tenant is over its rate limit for longer than a request waits."
);
create_exception!(
    _quarry,
    NonNumeric,
    KvError,
    "incr or decr of a value that is not a decimal number."
);

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("QuarryError", py.get_type::<QuarryError>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("AlreadyExists", py.get_type::<AlreadyExists>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("KvError", py.get_type::<KvError>())?;
    m.add("OutOfMemory", py.get_type::<OutOfMemory>())?;
    m.add("Denied", py.get_type::<Denied>())?;
    m.add("Throttled", py.get_type::<Throttled>())?;
    m.add("NonNumeric", py.get_type::<NonNumeric>())?;
    Ok(())
}

/// Which exception class a failure raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NotFound,
    AlreadyExists,
    InvalidInput,
    Conflict,
    Unavailable,
    Kv,
    OutOfMemory,
    Denied,
    Throttled,
    NonNumeric,
    Other,
}

/// A failure on its way to Python: its class and the CLI's message. Made
/// without the GIL (inside [`crate::runtime::wait`]); raised with it.
#[derive(Debug)]
pub struct Failure {
    kind: Kind,
    message: String,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(Kind::InvalidInput, message)
    }
}

fn store_kind(e: &StoreError) -> Kind {
    match e {
        StoreError::NoSuchBucket(_) | StoreError::NoSuchObject { .. } => Kind::NotFound,
        StoreError::BucketExists(_) => Kind::AlreadyExists,
        StoreError::InvalidBucket { .. }
        | StoreError::InvalidKey { .. }
        | StoreError::InvalidChunking(_)
        | StoreError::RangeOutOfBounds { .. }
        | StoreError::TooManyChunks { .. } => Kind::InvalidInput,
        StoreError::VersionMismatch { .. }
        | StoreError::BucketNotEmpty(_)
        | StoreError::Changed { .. } => Kind::Conflict,
        StoreError::Transport { .. } => Kind::Unavailable,
        _ => Kind::Other,
    }
}

/// A node's reason for refusing an operation, as a class. A value too
/// large is the caller's argument; the quotas are out of memory as
/// memcached says it (`SERVER_ERROR out of memory storing object`).
pub fn fail_kind(kind: FailKind) -> Kind {
    match kind {
        FailKind::OutOfMemory | FailKind::QuotaBytes | FailKind::QuotaKeys => Kind::OutOfMemory,
        FailKind::TooLarge | FailKind::BadInput => Kind::InvalidInput,
        FailKind::Unavailable => Kind::Unavailable,
        FailKind::NonNumeric => Kind::NonNumeric,
        FailKind::Throttled => Kind::Throttled,
        FailKind::Denied => Kind::Denied,
        FailKind::Internal => Kind::Kv,
    }
}

fn kv_kind(e: &KvFailure) -> Kind {
    match e {
        KvFailure::InvalidTenant { .. }
        | KvFailure::InvalidKey(_)
        | KvFailure::TooLarge(_)
        | KvFailure::Invalid(_) => Kind::InvalidInput,
        KvFailure::Denied(_) => Kind::Denied,
        KvFailure::Transport { .. } => Kind::Unavailable,
        KvFailure::Failed { kind, .. } => fail_kind(*kind),
        KvFailure::Malformed { .. } | KvFailure::Format(_) => Kind::Kv,
    }
}

fn client_kind(e: &ClientError) -> Kind {
    match e {
        ClientError::Store(s) => store_kind(s),
        ClientError::Kv(k) => kv_kind(k),
        ClientError::NoEntryNode { .. } | ClientError::Proto(_) => Kind::Unavailable,
        ClientError::Remote { status, .. } => match status {
            Status::NodeUnreachable | Status::Timeout | Status::Busy => Kind::Unavailable,
            Status::BadRequest | Status::AddressOutOfRange => Kind::InvalidInput,
            _ => Kind::Other,
        },
        ClientError::ClusterFile { reason, .. } if reason.starts_with("not found") => {
            Kind::NotFound
        }
        _ => Kind::Other,
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::new(store_kind(&e), e.to_string())
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        Failure::new(client_kind(&e), e.to_string())
    }
}

impl From<KvFailure> for Failure {
    fn from(e: KvFailure) -> Failure {
        Failure::new(kv_kind(&e), e.to_string())
    }
}

impl From<quarry_jobs::JobParseError> for Failure {
    fn from(e: quarry_jobs::JobParseError) -> Failure {
        Failure::invalid(e.to_string())
    }
}

impl From<quarry_jobs::ChunkingTextError> for Failure {
    fn from(e: quarry_jobs::ChunkingTextError) -> Failure {
        match e {
            quarry_jobs::ChunkingTextError::Store(e) => e.into(),
            other => Failure::invalid(other.to_string()),
        }
    }
}

impl From<quarry_jobs::SizeError> for Failure {
    fn from(e: quarry_jobs::SizeError) -> Failure {
        Failure::invalid(e.to_string())
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f.kind {
            Kind::NotFound => NotFound::new_err(f.message),
            Kind::AlreadyExists => AlreadyExists::new_err(f.message),
            Kind::InvalidInput => InvalidInput::new_err(f.message),
            Kind::Conflict => Conflict::new_err(f.message),
            Kind::Unavailable => Unavailable::new_err(f.message),
            Kind::Kv => KvError::new_err(f.message),
            Kind::OutOfMemory => OutOfMemory::new_err(f.message),
            Kind::Denied => Denied::new_err(f.message),
            Kind::Throttled => Throttled::new_err(f.message),
            Kind::NonNumeric => NonNumeric::new_err(f.message),
            Kind::Other => QuarryError::new_err(f.message),
        }
    }
}
