//! Errors of the memory layer.

use crate::llm::LlmError;

/// Errors of the memory layer: each names what failed and keeps the cause.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The SQLite store failed (I/O, corruption, locked database).
    #[error("store: {0}")]
    Store(#[from] rusqlite::Error),
    /// The PostgreSQL store failed (connection, query, constraint).
    #[error("store (PostgreSQL): {0}")]
    Postgres(String),
    /// A file operation failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The vector index refused an operation or a file.
    #[error("index: {0}")]
    Index(#[from] dentate_core::Error),
    /// The embedder failed.
    #[error("embedder: {0}")]
    Embed(#[from] dentate_embed::EmbedError),
    /// The language model failed (after retries and one repair request).
    #[error("LLM: {0}")]
    Llm(#[from] LlmError),
    /// An argument or a stored setting is invalid.
    #[error("{0}")]
    Invalid(String),
    /// No live memory item has this id for this user.
    #[error("no memory item {id} for user `{user}`")]
    NotFound {
        /// Owner.
        user: String,
        /// Item id.
        id: i64,
    },
    /// Another process holds the user (processing its messages) and did
    /// not let go in time ([`crate::Store::lock_user`]).
    #[error("user `{0}` is being processed by another process")]
    Busy(String),
    /// A dataset file is malformed.
    #[error("dataset: {0}")]
    Dataset(String),
    /// A memory snapshot ([`crate::Store::from_bytes`]) is truncated,
    /// corrupt or not a snapshot.
    #[error("snapshot: {0}")]
    Snapshot(String),
}

/// Result alias of the memory layer.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;
