"""Dentate: vector retrieval for agent memory, from Python.

Indexes take and return numpy arrays (float32 rows in, ``(scores, ids)``
out) and release the GIL while they work::

    import numpy as np, dentate
    x = np.random.default_rng(0).standard_normal((10_000, 64), dtype=np.float32)
    index = dentate.FastScanIndex(64, nlist=64, m=32)
    index.train(x)
    index.add(x)
    scores, ids = index.search(x[:5], 10)

Files are the same as the command line's and the browser build's
(``index.save(path)``, ``dentate.load(path)``). Errors are subclasses of
:class:`dentate.Error` (:mod:`dentate.errors`).
"""

from __future__ import annotations

import os

from . import errors
from ._native import (
    Bm25Index,
    Embedder,
    FastScanIndex,
    FlatIndex,
    Index,
    IvfPqIndex,
    Memory,
    __version__,
    embed,
    hybrid_search,
    simd_path,
    tune,
)
from .errors import (
    BackendError,
    BadMagicError,
    CapacityError,
    ChecksumMismatchError,
    CorruptError,
    DimensionMismatchError,
    DuplicateIdError,
    EmbedError,
    EmptyIndexError,
    Error,
    FileFormatError,
    IdCountMismatchError,
    InsufficientTrainingDataError,
    InvalidInputError,
    InvalidParameterError,
    IoError,
    LlmError,
    NonFiniteError,
    NotFoundError,
    NotTrainedError,
    RaggedBatchError,
    StoreError,
    TruncatedError,
    UnsupportedVersionError,
    WrongKindError,
    ZeroKError,
    ZeroVectorError,
)


def load(path: str | os.PathLike[str]) -> Index:
    """Loads any index file (exact, IVF-PQ or fast-scan) as its class."""
    return Index.load(path)


__all__ = [
    "Bm25Index",
    "Embedder",
    "FastScanIndex",
    "FlatIndex",
    "Index",
    "IvfPqIndex",
    "Memory",
    "__version__",
    "embed",
    "errors",
    "hybrid_search",
    "load",
    "simd_path",
    "tune",
    "BackendError",
    "BadMagicError",
    "CapacityError",
    "ChecksumMismatchError",
    "CorruptError",
    "DimensionMismatchError",
    "DuplicateIdError",
    "EmbedError",
    "EmptyIndexError",
    "Error",
    "FileFormatError",
    "IdCountMismatchError",
    "InsufficientTrainingDataError",
    "InvalidInputError",
    "InvalidParameterError",
    "IoError",
    "LlmError",
    "NonFiniteError",
    "NotFoundError",
    "NotTrainedError",
    "RaggedBatchError",
    "StoreError",
    "TruncatedError",
    "UnsupportedVersionError",
    "WrongKindError",
    "ZeroKError",
    "ZeroVectorError",
]
