//! The one error type of the core engine.

/// Result alias used throughout Dentate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the core engine.
///
/// Each kind of bad input has its own variant, so callers can match on it
/// instead of parsing messages. No public function of this crate panics on
/// user-controlled input; it returns one of these instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A vector (or a batch) does not have the index's dimension.
    #[error("dimension mismatch: expected {expected}, got {got}")]
    DimensionMismatch {
        /// Dimension the index or quantizer was built for.
        expected: usize,
        /// Dimension of the input.
        got: usize,
    },
    /// A flat buffer's length is not a multiple of the dimension.
    #[error("buffer of {len} floats is not a whole number of {dim}-dimensional vectors")]
    RaggedBatch {
        /// Length of the buffer.
        len: usize,
        /// Expected dimension.
        dim: usize,
    },
    /// A vector component is NaN or infinite.
    #[error("vector {row} has a non-finite component at position {col}")]
    NonFinite {
        /// Row in the batch.
        row: usize,
        /// Component index.
        col: usize,
    },
    /// A vector has zero norm, so it has no direction and cosine is undefined.
    #[error("vector {row} has zero norm; cosine similarity is undefined")]
    ZeroVector {
        /// Row in the batch.
        row: usize,
    },
    /// `k = 0` was asked for.
    #[error("k must be at least 1")]
    ZeroK,
    /// The operation needs at least one (live) vector.
    #[error("the index is empty")]
    EmptyIndex,
    /// The index or quantizer must be trained first.
    #[error("the index is not trained; call train() first")]
    NotTrained,
    /// Not enough training data for the requested model.
    #[error("not enough training vectors: need at least {needed}, got {got}")]
    InsufficientTrainingData {
        /// Minimum number of vectors.
        needed: usize,
        /// Number supplied.
        got: usize,
    },
    /// Ids and vectors disagree in count.
    #[error("got {ids} ids for {vectors} vectors")]
    IdCountMismatch {
        /// Number of ids.
        ids: usize,
        /// Number of vectors.
        vectors: usize,
    },
    /// The same id appears twice within one batch.
    #[error("id {0} appears more than once in the same batch")]
    DuplicateId(u64),
    /// A parameter is out of its valid range.
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter {
        /// Parameter name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The index has grown beyond what its row addressing supports.
    #[error("capacity exceeded: {0}")]
    Capacity(String),
    /// An I/O error while reading or writing a file.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a Dentate index file at all.
    #[error("not a Dentate file (bad magic bytes)")]
    BadMagic,
    /// A file was written by an unknown (newer) format version.
    #[error("unsupported format version {found} (this build reads up to {supported})")]
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// A file holds a different kind of index than the one asked for.
    #[error("file holds a {found} index, expected {expected}")]
    WrongKind {
        /// Kind found in the file.
        found: String,
        /// Kind that was asked for.
        expected: String,
    },
    /// A file ends early.
    #[error("file is truncated: {0}")]
    Truncated(String),
    /// A file's checksum does not match its contents.
    #[error("checksum mismatch in {section}: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// Which part of the file.
        section: &'static str,
        /// Stored CRC-32.
        stored: u32,
        /// Recomputed CRC-32.
        computed: u32,
    },
    /// A file is structurally invalid (inconsistent lengths, offsets, values).
    #[error("corrupt file: {0}")]
    Corrupt(String),
    /// A data file (fvecs, ivecs, npy) could not be parsed.
    #[error("cannot parse {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A compute backend failed (for example a GPU device error).
    #[error("compute backend `{backend}` failed: {reason}")]
    Backend {
        /// Backend name.
        backend: String,
        /// What failed.
        reason: String,
    },
}

impl Error {
    pub(crate) fn param(name: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidParameter {
            name,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
