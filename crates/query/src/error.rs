//! What can go wrong with a query.

/// A query's failure, naming what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The SQL does not parse.
    #[error("the SQL does not parse: {0}")]
    Parse(String),
    /// The SQL parses but asks for something this engine does not do.
    #[error("{0} is not supported (the SQL subset: docs/query.md)")]
    Unsupported(String),
    /// The query is SQL this engine takes, but wrong (a column outside
    /// GROUP BY, an aggregate in WHERE, an ORDER BY ordinal out of range).
    #[error("{0}")]
    Invalid(String),
    /// A column the query names is not in the file.
    #[error("no column {name:?} in {object} (its columns: {available})")]
    NoSuchColumn {
        /// The name asked.
        name: String,
        /// The object.
        object: String,
        /// The columns it has.
        available: String,
    },
    /// Values of types that do not go together.
    #[error("{0}")]
    Type(String),
    /// An object is not a Parquet file the query can read.
    #[error("{object}: {reason}")]
    Object {
        /// The object (`bucket/key`).
        object: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Computing a value failed (an overflow, a bad cast of a value).
    #[error("computing {what}: {reason}")]
    Compute {
        /// What was being computed.
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A bound of the query was exceeded.
    #[error("{0}")]
    Limit(String),
    /// A partial result did not decode (a damaged or foreign message).
    #[error("a partial result does not decode: {0}")]
    Partial(String),
}

/// The crate's result.
pub type Result<T, E = QueryError> = std::result::Result<T, E>;

impl QueryError {
    pub(crate) fn compute(what: impl std::fmt::Display, e: impl std::fmt::Display) -> QueryError {
        QueryError::Compute {
            what: what.to_string(),
            reason: e.to_string(),
        }
    }
}
