//! The service's one error type and its HTTP shape.
//!
//! Every error leaves the server as `{"error": {"code", "message"}}` with a
//! stable `code` (the table in [`ServeError::code`]); bad input is a 4xx
//! naming what was wrong, never a 5xx.

use dentate_memory::MemoryError;

/// What went wrong, by kind; each maps to one HTTP status and code.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The request is malformed or names an invalid value (400).
    #[error("{0}")]
    BadRequest(String),
    /// No key, or an unknown or revoked one (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The key's role does not allow this, or the client is not on
    /// loopback while no key exists (403).
    #[error("{0}")]
    Forbidden(String),
    /// No such user, memory, message or job for this tenant (404).
    #[error("{0}")]
    NotFound(String),
    /// The request body is over the limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// The ingest queue is full: retry after the given seconds (429).
    #[error("the ingest queue is full ({depth} jobs); retry in {retry_after} s")]
    QueueFull {
        /// Jobs waiting.
        depth: usize,
        /// Seconds to wait.
        retry_after: u64,
    },
    /// A model or embedding server failed (502).
    #[error("{0}")]
    Upstream(String),
    /// The server is shutting down (503).
    #[error("{0}")]
    Unavailable(String),
    /// A fault of the server itself (500).
    #[error("{0}")]
    Internal(String),
}

impl ServeError {
    /// HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ServeError::BadRequest(_) => 400,
            ServeError::Unauthorized(_) => 401,
            ServeError::Forbidden(_) => 403,
            ServeError::NotFound(_) => 404,
            ServeError::TooLarge(_) => 413,
            ServeError::QueueFull { .. } => 429,
            ServeError::Upstream(_) => 502,
            ServeError::Unavailable(_) => 503,
            ServeError::Internal(_) => 500,
        }
    }

    /// The stable machine-readable code: `bad_request`, `unauthorized`,
    /// `forbidden`, `not_found`, `payload_too_large`, `queue_full`,
    /// `upstream_failed`, `unavailable`, `internal`.
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::BadRequest(_) => "bad_request",
            ServeError::Unauthorized(_) => "unauthorized",
            ServeError::Forbidden(_) => "forbidden",
            ServeError::NotFound(_) => "not_found",
            ServeError::TooLarge(_) => "payload_too_large",
            ServeError::QueueFull { .. } => "queue_full",
            ServeError::Upstream(_) => "upstream_failed",
            ServeError::Unavailable(_) => "unavailable",
            ServeError::Internal(_) => "internal",
        }
    }
}

impl From<MemoryError> for ServeError {
    fn from(e: MemoryError) -> Self {
        match e {
            MemoryError::Invalid(m) => ServeError::BadRequest(m),
            // The memory layer names internal user names; the service
            // speaks of memories by id only.
            MemoryError::NotFound { id, .. } => ServeError::NotFound(format!("no memory {id}")),
            MemoryError::Llm(e) => ServeError::Upstream(format!("language model: {e}")),
            MemoryError::Embed(e) => ServeError::Upstream(format!("embedder: {e}")),
            MemoryError::Busy(_) => ServeError::Unavailable("the user is being processed by another worker".into()),
            other => ServeError::Internal(other.to_string()),
        }
    }
}

impl From<rusqlite::Error> for ServeError {
    fn from(e: rusqlite::Error) -> Self {
        ServeError::Internal(format!("service database: {e}"))
    }
}

/// Result alias of the service.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;
