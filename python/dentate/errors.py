"""The exceptions Dentate raises: one hierarchy under :class:`Error`.

Each leaf mirrors one variant of the Rust error types and carries the Rust
message. Bad input is an :class:`InvalidInputError`, which is also a
:class:`ValueError`; damaged files are a :class:`FileFormatError`; failed
file operations an :class:`IoError`, which is also an :class:`OSError`.
"""

from __future__ import annotations


class Error(Exception):
    """Base of every exception Dentate raises."""


class InvalidInputError(Error, ValueError):
    """An argument, a vector or a batch that Dentate refuses."""


class DimensionMismatchError(InvalidInputError):
    """A vector or batch does not have the index's dimension."""


class RaggedBatchError(InvalidInputError):
    """A flat batch is not a whole number of vectors."""


class NonFiniteError(InvalidInputError):
    """A vector holds NaN or an infinity."""


class ZeroVectorError(InvalidInputError):
    """A vector of zero length cannot be normalised for cosine similarity."""


class ZeroKError(InvalidInputError):
    """``k`` is 0."""


class IdCountMismatchError(InvalidInputError):
    """``ids`` and the vectors disagree in number."""


class DuplicateIdError(InvalidInputError):
    """The same id appears twice in one batch."""


class InvalidParameterError(InvalidInputError):
    """A parameter is out of range (``nlist``, ``m``, ``nprobe``, …)."""


class InsufficientTrainingDataError(InvalidInputError):
    """Too few vectors to train the quantizers."""


class EmptyIndexError(Error):
    """A search of an index that holds nothing."""


class NotTrainedError(Error):
    """An IVF-PQ or fast-scan index was used before :meth:`train`."""


class CapacityError(Error):
    """A request larger than the engine can hold."""


class IoError(Error, OSError):
    """A file could not be read or written."""


class FileFormatError(Error):
    """A file is damaged or not a Dentate file."""


class BadMagicError(FileFormatError):
    """The file does not start with Dentate's magic bytes."""


class UnsupportedVersionError(FileFormatError):
    """The file was written by a newer format version."""


class WrongKindError(FileFormatError):
    """The file holds another kind of index than the one asked for."""


class TruncatedError(FileFormatError):
    """The file ends early."""


class ChecksumMismatchError(FileFormatError):
    """The file's checksum does not match its content."""


class CorruptError(FileFormatError):
    """The file's content is inconsistent."""


class BackendError(Error):
    """The compute backend failed."""


class NotFoundError(Error, LookupError):
    """No live memory item has this id for this user."""


class StoreError(Error):
    """The memory store (SQLite) failed."""


class EmbedError(Error):
    """The embedder failed (model files, HTTP, malformed answers)."""


class LlmError(Error):
    """The language model failed after retries and one repair request."""


__all__ = [
    "Error",
    "InvalidInputError",
    "DimensionMismatchError",
    "RaggedBatchError",
    "NonFiniteError",
    "ZeroVectorError",
    "ZeroKError",
    "IdCountMismatchError",
    "DuplicateIdError",
    "InvalidParameterError",
    "InsufficientTrainingDataError",
    "EmptyIndexError",
    "NotTrainedError",
    "CapacityError",
    "IoError",
    "FileFormatError",
    "BadMagicError",
    "UnsupportedVersionError",
    "WrongKindError",
    "TruncatedError",
    "ChecksumMismatchError",
    "CorruptError",
    "BackendError",
    "NotFoundError",
    "StoreError",
    "EmbedError",
    "LlmError",
]
