//! Rust errors → the exceptions of `dentate.errors` (defined in Python, so
//! that a class can also be a `ValueError`, `OSError` or `LookupError`).

use pyo3::PyErr;
use pyo3::import_exception;

/// The exception classes, imported from `dentate.errors` when raised.
pub mod exc {
    use super::import_exception;
    import_exception!(dentate.errors, Error);
    import_exception!(dentate.errors, InvalidInputError);
    import_exception!(dentate.errors, DimensionMismatchError);
    import_exception!(dentate.errors, RaggedBatchError);
    import_exception!(dentate.errors, NonFiniteError);
    import_exception!(dentate.errors, ZeroVectorError);
    import_exception!(dentate.errors, ZeroKError);
    import_exception!(dentate.errors, IdCountMismatchError);
    import_exception!(dentate.errors, DuplicateIdError);
    import_exception!(dentate.errors, InvalidParameterError);
    import_exception!(dentate.errors, InsufficientTrainingDataError);
    import_exception!(dentate.errors, EmptyIndexError);
    import_exception!(dentate.errors, NotTrainedError);
    import_exception!(dentate.errors, CapacityError);
    import_exception!(dentate.errors, IoError);
    import_exception!(dentate.errors, FileFormatError);
    import_exception!(dentate.errors, BadMagicError);
    import_exception!(dentate.errors, UnsupportedVersionError);
    import_exception!(dentate.errors, WrongKindError);
    import_exception!(dentate.errors, TruncatedError);
    import_exception!(dentate.errors, ChecksumMismatchError);
    import_exception!(dentate.errors, CorruptError);
    import_exception!(dentate.errors, BackendError);
    import_exception!(dentate.errors, NotFoundError);
    import_exception!(dentate.errors, StoreError);
    import_exception!(dentate.errors, EmbedError);
    import_exception!(dentate.errors, LlmError);
}

/// The exception of a core-engine error, with its message.
pub fn core(e: dentate_core::Error) -> PyErr {
    use dentate_core::Error as E;
    let msg = e.to_string();
    match e {
        E::DimensionMismatch { .. } => exc::DimensionMismatchError::new_err(msg),
        E::RaggedBatch { .. } => exc::RaggedBatchError::new_err(msg),
        E::NonFinite { .. } => exc::NonFiniteError::new_err(msg),
        E::ZeroVector { .. } => exc::ZeroVectorError::new_err(msg),
        E::ZeroK => exc::ZeroKError::new_err(msg),
        E::EmptyIndex => exc::EmptyIndexError::new_err(msg),
        E::NotTrained => exc::NotTrainedError::new_err(msg),
        E::InsufficientTrainingData { .. } => exc::InsufficientTrainingDataError::new_err(msg),
        E::IdCountMismatch { .. } => exc::IdCountMismatchError::new_err(msg),
        E::DuplicateId(_) => exc::DuplicateIdError::new_err(msg),
        E::InvalidParameter { .. } => exc::InvalidParameterError::new_err(msg),
        E::Capacity(_) => exc::CapacityError::new_err(msg),
        E::Io { .. } => exc::IoError::new_err(msg),
        E::BadMagic => exc::BadMagicError::new_err(msg),
        E::UnsupportedVersion { .. } => exc::UnsupportedVersionError::new_err(msg),
        E::WrongKind { .. } => exc::WrongKindError::new_err(msg),
        E::Truncated(_) => exc::TruncatedError::new_err(msg),
        E::ChecksumMismatch { .. } => exc::ChecksumMismatchError::new_err(msg),
        E::Corrupt(_) => exc::CorruptError::new_err(msg),
        E::Parse { .. } => exc::FileFormatError::new_err(msg),
        E::Backend { .. } => exc::BackendError::new_err(msg),
    }
}

/// The exception of an embedder error: a bad setting is an
/// `InvalidParameterError`, everything else an `EmbedError`.
pub fn embed(e: dentate_embed::EmbedError) -> PyErr {
    match e {
        dentate_embed::EmbedError::Config { .. } => exc::InvalidParameterError::new_err(e.to_string()),
        _ => exc::EmbedError::new_err(e.to_string()),
    }
}

/// The exception of a memory-layer error.
pub fn memory(e: dentate_memory::MemoryError) -> PyErr {
    use dentate_memory::MemoryError as E;
    match e {
        E::Index(e) => core(e),
        E::Embed(e) => embed(e),
        E::Store(_) | E::Postgres(_) | E::Busy(_) => exc::StoreError::new_err(e.to_string()),
        E::Io(_) => exc::IoError::new_err(e.to_string()),
        E::Llm(dentate_memory::LlmError::Config { .. }) => exc::InvalidParameterError::new_err(e.to_string()),
        E::Llm(_) => exc::LlmError::new_err(e.to_string()),
        E::Invalid(_) | E::Dataset(_) => exc::InvalidInputError::new_err(e.to_string()),
        E::NotFound { .. } => exc::NotFoundError::new_err(e.to_string()),
        E::Snapshot(_) => exc::FileFormatError::new_err(e.to_string()),
    }
}

/// An `InvalidInputError` with `msg`.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    exc::InvalidInputError::new_err(msg.into())
}

/// An `InvalidParameterError` with `msg`.
pub fn param(msg: impl Into<String>) -> PyErr {
    exc::InvalidParameterError::new_err(msg.into())
}
