"""Type stubs of the extension module ``dentate._native`` (built from
``python/src`` with PyO3); :mod:`dentate` re-exports every public name."""

from __future__ import annotations

import os
from typing import Any, Literal, Optional, Sequence, TypedDict, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Path = Union[str, "os.PathLike[str]"]
_Rows = npt.ArrayLike
_Ids = Union[npt.ArrayLike, int]
_Batch = tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]
_Ranked = tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]

class Index:
    """A cosine index over non-negative integer ids (below 2^63).

    Vectors are L2-normalised on insert and on query, so scores are cosine
    similarities. Searches release the GIL and share a lock: Python threads
    searching one index run in parallel. ``train``, ``add``, ``remove`` and
    ``compact`` take the lock exclusively.
    """

    @staticmethod
    def load(path: _Path) -> Index:
        """Loads an index file written by ``save``, the command line or the
        browser build, as the class of its kind."""
    @staticmethod
    def from_bytes(data: bytes) -> Index:
        """Parses the bytes of an index file (``to_bytes``)."""
    def save(self, path: _Path) -> None:
        """Writes the index to ``path`` (checksummed, atomically replaced)."""
    def to_bytes(self) -> bytes:
        """The bytes of the file ``save`` writes (also how pickling works)."""
    def train(self, x: _Rows) -> None:
        """Trains the quantizers on ``x`` (``n × dim``); an exact index only
        checks the shape."""
    def add(self, x: _Rows, ids: Optional[_Ids] = None) -> npt.NDArray[np.int64]:
        """Adds ``x`` (``n × dim``, or one vector) under ``ids`` and returns
        the ids used. Without ``ids``, the next ``n`` ids not in use are
        chosen. An id already present is replaced. NaN/Inf, zero vectors,
        duplicate ids or a count mismatch raise and add nothing.

        A C-contiguous float32 array is read in place; anything else is
        converted once with ``numpy.ascontiguousarray``."""
    def search(
        self,
        q: _Rows,
        k: int,
        *,
        nprobe: Optional[int] = None,
        rerank: Optional[int] = None,
    ) -> _Batch:
        """The ``k`` most similar live vectors to each row of ``q``:
        ``(scores, ids)``, float32 and int64 arrays of
        ``len(q) × min(k, len(index))``, best first (ties by smaller id). A
        row with fewer results is padded with score NaN and id -1. IVF
        indexes probe ``nprobe`` lists and re-rank ``rerank × k`` candidates
        exactly (defaults: the index's own)."""
    def remove(self, ids: _Ids) -> int:
        """Removes ``ids``; returns how many were live."""
    def compact(self) -> None:
        """Drops removed rows and reclaims their memory."""
    def config(self) -> dict[str, Any]:
        """The build settings: ``kind``, ``dim``, and ``f16`` for an exact
        index or ``nlist``, ``m``, ``opq``, ``nprobe``, ``rerank``, ``seed``
        for IVF indexes."""
    def __len__(self) -> int:
        """Live vectors."""
    def __contains__(self, id: int) -> bool:
        """True when ``id`` is live."""
    @property
    def dim(self) -> int:
        """Vector dimension."""
    @property
    def kind(self) -> Literal["flat", "ivfpq", "fastscan"]:
        """The index's kind, as in its file."""
    @property
    def is_trained(self) -> bool:
        """False for an IVF index that still needs ``train``."""
    @property
    def memory_bytes(self) -> int:
        """Heap bytes held by the index."""
    @property
    def nprobe(self) -> Optional[int]:
        """Lists probed by default (None for an exact index)."""
    @nprobe.setter
    def nprobe(self, n: int) -> None: ...
    @property
    def rerank(self) -> Optional[int]:
        """Default re-rank factor (None for an exact index)."""
    @rerank.setter
    def rerank(self, r: int) -> None: ...

class FlatIndex(Index):
    """Exact cosine search (a blocked SIMD kernel over every vector)."""

    def __init__(self, dim: int, *, f16: bool = False) -> None:
        """An empty exact index; ``f16=True`` stores half floats."""
    @classmethod
    def load(cls, path: _Path) -> Index:  # type: ignore[override]
        """Loads a file that must hold an exact index."""

class IvfPqIndex(Index):
    """IVF + optional OPQ + 8-bit PQ, with exact re-ranking."""

    def __init__(
        self,
        dim: int,
        nlist: int,
        m: int,
        *,
        opq: bool = False,
        nprobe: Optional[int] = None,
        rerank: Optional[int] = None,
        iterations: Optional[int] = None,
        seed: Optional[int] = None,
        rerank_store: str = "f16",
    ) -> None:
        """``nlist`` lists, ``m`` sub-quantizers (``m`` divides ``dim``),
        ``opq`` to learn a rotation; ``nprobe``/``rerank`` are the search
        defaults; ``rerank_store`` keeps the vectors for re-ranking as
        ``"f16"``, ``"f32"``, ``"sq8"`` (8-bit, half of f16's bytes) or
        ``"none"``. Call ``train`` before ``add``."""
    @classmethod
    def load(cls, path: _Path) -> Index:  # type: ignore[override]
        """Loads a file that must hold an 8-bit IVF-PQ index."""

class FastScanIndex(Index):
    """4-bit PQ fast-scan over IVF lists (``nlist=1``: flat fast-scan), with
    exact re-ranking."""

    def __init__(
        self,
        dim: int,
        nlist: int,
        m: int,
        *,
        opq: bool = False,
        nprobe: Optional[int] = None,
        rerank: Optional[int] = None,
        iterations: Optional[int] = None,
        seed: Optional[int] = None,
        rerank_store: str = "f16",
    ) -> None:
        """``m`` sub-quantizers of 16 centroids (``m / 2`` bytes per vector);
        the options of :class:`IvfPqIndex`. Call ``train`` before ``add``."""
    @classmethod
    def load(cls, path: _Path) -> Index:  # type: ignore[override]
        """Loads a file that must hold a fast-scan index."""

class Bm25Index:
    """BM25 over texts (Unicode words, lower-cased, English stemming)."""

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        """An empty index with BM25's ``k1`` and ``b``."""
    @staticmethod
    def load(path: _Path) -> Bm25Index:
        """Loads a file written by ``save``."""
    def save(self, path: _Path) -> None:
        """Writes the index to ``path``."""
    def add(self, ids: _Ids, texts: Sequence[str]) -> None:
        """Adds ``texts`` under ``ids`` (an id present is replaced)."""
    def search(self, query: str, k: int) -> _Ranked:
        """The ``k`` best texts: ``(scores, ids)`` as 1-D arrays."""
    def remove(self, ids: _Ids) -> int:
        """Removes ``ids``; returns how many were present."""
    def compact(self) -> None:
        """Drops removed documents from the postings."""
    def __len__(self) -> int:
        """Live documents."""
    def __contains__(self, id: int) -> bool:
        """True when ``id`` is live."""
    @property
    def vocabulary_len(self) -> int:
        """Distinct terms indexed."""
    @property
    def memory_bytes(self) -> int:
        """Heap bytes held by the index."""

def hybrid_search(
    index: Index,
    bm25: Bm25Index,
    vector: _Rows,
    text: str,
    k: int,
    *,
    fusion: str = "hybrid",
) -> _Ranked:
    """Dense search of ``index`` for ``vector`` and BM25 search of ``bm25``
    for ``text``, fused into the best ``k``. ``fusion``: ``"hybrid"``,
    ``"rrf"``, ``"rrf:C"`` or ``"weighted:W"``."""

class Embedder:
    """An embedder named by a spec: ``"hash"``/``"hash:DIM"``,
    ``"minilm"``/``"minilm:DIR"``, ``"openai:MODEL"``."""

    def __init__(
        self,
        spec: str = "hash",
        *,
        base_url: Optional[str] = None,
        api_key_env: Optional[str] = None,
    ) -> None:
        """Builds (loads, or connects to) the embedder."""
    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """``len(texts) × dim`` float32 rows, L2-normalised."""
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The same as calling the embedder."""
    @property
    def name(self) -> str:
        """The embedder's name (a memory refuses another one)."""
    @property
    def dim(self) -> int:
        """Output dimension."""

def embed(texts: Sequence[str], spec: str = "hash") -> npt.NDArray[np.float32]:
    """Embeds ``texts`` with the embedder ``spec`` names (built once per
    process and spec)."""

class TuneTrial(TypedDict):
    """One measured setting of :func:`tune`."""

    nlist: int
    m: int
    opq: bool
    nprobe: int
    rerank: int
    recall: float
    holdout_recall: float
    qps: float
    build_s: float
    bytes_per_vector: float

class TuneResult(TypedDict):
    """What :func:`tune` returns."""

    best: Optional[TuneTrial]
    trials: list[TuneTrial]
    best_recall: list[tuple[int, int, float]]
    split: tuple[int, int]
    held_aside_miss: Optional[TuneTrial]
    safer: list[TuneTrial]
    holds_out: bool

def tune(
    base: _Rows,
    queries: Optional[_Rows],
    target_recall: float,
    *,
    k: int = 10,
    nlists: Optional[Sequence[int]] = None,
    ms: Optional[Sequence[int]] = None,
    nprobes: Optional[Sequence[int]] = None,
    reranks: Optional[Sequence[int]] = None,
    opq: bool = False,
    holdout: float = 0.5,
    seed: int = 7,
    sample: int = 1000,
) -> TuneResult:
    """The fastest fast-scan setting whose recall@k on part of ``queries``
    reaches ``target_recall``; the rest are held aside, and when the winner
    misses the target there the same index steps to safer settings
    (``held_aside_miss``, ``safer``, ``holds_out``). ``queries=None`` draws
    ``sample`` base rows as queries, left out of the tuning indexes."""

class Retrieved(TypedDict):
    """A memory, as :meth:`Memory.search` returns it."""

    id: int
    kind: str
    text: str
    score: float
    sources: list[int]
    source_refs: list[str]
    said_at: Optional[int]
    refers_to: Optional[int]
    created_at: int

class Report(TypedDict):
    """What ingesting did."""

    messages: int
    items: int
    forgotten: int
    live: int

class Context(TypedDict):
    """A prompt within a token budget."""

    prompt: str
    tokens: int
    trimmed: int
    included: list[Retrieved]

class Memory:
    """Agent memory: messages in, memories with provenance out."""

    def __init__(
        self,
        dir: Optional[_Path] = None,
        *,
        pipeline: str = "hema",
        embedder: Union[str, Embedder, None] = None,
        llm: Optional[dict[str, Any]] = None,
        retriever: str = "hybrid",
        resolve_dates: bool = True,
        settings: Optional[dict[str, Any]] = None,
    ) -> None:
        """Opens (creating) the memory in ``dir``, or one in memory."""
    def add(self, user: str, messages: list[dict[str, Any]]) -> list[int]:
        """Stores messages without processing them; returns their ids."""
    def process(self, user: str) -> Report:
        """Processes the stored messages not yet processed."""
    def ingest(self, user: str, messages: list[dict[str, Any]]) -> Report:
        """``add`` then ``process``."""
    def flush(self, user: str) -> Report:
        """Closes what the pipeline holds open for more messages."""
    def search(
        self,
        user: str,
        query: str,
        *,
        k: Optional[int] = None,
        budget: Optional[int] = None,
    ) -> list[Retrieved]:
        """The top ``k`` memories (default 10), or those whose packed
        context fits ``budget`` tokens."""
    def context(self, user: str, question: str, budget: int = 3500) -> Context:
        """The prompt for answering ``question`` within ``budget`` tokens."""
    def forget(self, user: str, id: int) -> None:
        """Deletes memory ``id`` (``NotFoundError`` when there is none)."""
    def correct(self, user: str, id: int, text: str) -> None:
        """Replaces the text of memory ``id``, keeping its provenance."""
    def show(self, user: str) -> str:
        """What the memory of ``user`` holds, as text."""
    def message_count(self, user: str) -> int:
        """Messages stored for ``user``."""
    @property
    def pipeline(self) -> str:
        """The pipeline's name."""

def simd_path() -> str:
    """The SIMD path the CPU kernels run (``avx512f``, ``avx2+fma``, ``neon``,
    ``simd128`` or ``scalar``)."""

def _input_address(x: _Rows) -> int:
    """The address of the float32 block the engine reads for ``x``."""
