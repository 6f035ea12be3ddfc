"""Every class of bad input the Rust side rejects is a typed exception,
with the Rust message, and changes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import dentate
from dentate import errors


def test_hierarchy() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, dentate.Error), name
        assert getattr(dentate, name) is cls
    assert issubclass(dentate.NonFiniteError, ValueError)
    assert issubclass(dentate.InvalidInputError, ValueError)
    assert issubclass(dentate.IoError, OSError)
    assert issubclass(dentate.NotFoundError, LookupError)
    assert issubclass(dentate.ChecksumMismatchError, dentate.FileFormatError)


@pytest.fixture()
def index(data: npt.NDArray[np.float32]) -> dentate.Index:
    i = dentate.FlatIndex(32)
    i.add(data[:100])
    return i


def test_bad_vectors_raise_and_add_nothing(index: dentate.Index, data: npt.NDArray[np.float32]) -> None:
    bad = data[100:110].copy()
    bad[4, 7] = np.nan
    with pytest.raises(dentate.NonFiniteError, match="non-finite"):
        index.add(bad)
    bad[4, 7] = np.inf
    with pytest.raises(dentate.NonFiniteError):
        index.add(bad)
    zero = data[100:102].copy()
    zero[1] = 0
    with pytest.raises(dentate.ZeroVectorError):
        index.add(zero)
    with pytest.raises(dentate.DimensionMismatchError, match="expected 32, got 16"):
        index.add(data[:4, :16])
    with pytest.raises(dentate.DuplicateIdError):
        index.add(data[100:102], [500, 500])
    with pytest.raises(dentate.IdCountMismatchError):
        index.add(data[100:103], [1, 2])
    with pytest.raises(dentate.InvalidInputError, match="non-negative"):
        index.add(data[100:101], [-1])
    with pytest.raises(dentate.InvalidInputError, match="2\\^63"):
        index.add(data[100:101], np.array([2**63], dtype=np.uint64))
    with pytest.raises(dentate.InvalidInputError, match="integers"):
        index.add(data[100:101], [1.5])
    with pytest.raises(dentate.InvalidInputError, match="2-D"):
        index.add(np.zeros((2, 2, 32), dtype=np.float32))
    with pytest.raises(dentate.InvalidInputError, match="array of numbers"):
        index.add([["a"] * 32])
    assert len(index) == 100


def test_bad_searches(index: dentate.Index, data: npt.NDArray[np.float32]) -> None:
    with pytest.raises(dentate.ZeroKError):
        index.search(data[:1], 0)
    with pytest.raises(dentate.NonFiniteError):
        index.search(np.full((1, 32), np.nan, dtype=np.float32), 3)
    with pytest.raises(dentate.DimensionMismatchError):
        index.search(data[:1, :31], 3)
    with pytest.raises(dentate.EmptyIndexError):
        dentate.FlatIndex(32).search(data[:1], 3)
    with pytest.raises(dentate.InvalidParameterError, match="negative"):
        index.search(data[:1], -1)
    with pytest.raises(dentate.InvalidParameterError, match="nprobe"):
        index.search(data[:1], 3, nprobe=0)
    bm25 = dentate.Bm25Index()
    with pytest.raises(dentate.InvalidParameterError):
        bm25.search("x", -2)
    with pytest.raises(dentate.InvalidInputError, match="2\\^63"):
        bm25.add(np.array([2**63], dtype=np.uint64), ["big id"])
    assert len(bm25) == 0


def test_bad_parameters(data: npt.NDArray[np.float32]) -> None:
    with pytest.raises(dentate.InvalidParameterError):
        dentate.FlatIndex(0)
    with pytest.raises(dentate.InvalidParameterError, match="negative"):
        dentate.FastScanIndex(-32, 4, 8)
    with pytest.raises(dentate.InvalidParameterError):
        dentate.IvfPqIndex(32, 16, 7)  # 7 does not divide 32
    with pytest.raises(dentate.InvalidParameterError):
        dentate.FastScanIndex(32, 0, 16)
    small = dentate.IvfPqIndex(32, 256, 8)
    with pytest.raises(dentate.InsufficientTrainingDataError):
        small.train(data[:50])
    with pytest.raises(dentate.InvalidParameterError):
        dentate.Bm25Index(b=2.0)
    with pytest.raises(dentate.InvalidParameterError):
        dentate.hybrid_search(dentate.FlatIndex(4), dentate.Bm25Index(), np.ones(4, np.float32), "x", 3, fusion="max")
    with pytest.raises(dentate.InvalidParameterError):
        dentate.tune(data, data[:10], 1.5)
    with pytest.raises(dentate.InvalidParameterError, match="holdout"):
        dentate.tune(data, data[:10], 0.9, holdout=1.0)
    with pytest.raises(dentate.InvalidParameterError, match="unknown embedder"):
        dentate.Embedder("word2vec")
    with pytest.raises(dentate.InvalidParameterError):
        dentate.Embedder("hash:0")


def test_damaged_files(tmp_path: Path, index: dentate.Index) -> None:
    good = tmp_path / "good.dnt"
    index.save(good)
    raw = good.read_bytes()
    with pytest.raises(dentate.IoError):
        dentate.load(tmp_path / "missing.dnt")
    (tmp_path / "trunc.dnt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(dentate.FileFormatError):
        dentate.load(tmp_path / "trunc.dnt")
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0x40
    (tmp_path / "flip.dnt").write_bytes(bytes(flipped))
    with pytest.raises(dentate.ChecksumMismatchError):
        dentate.load(tmp_path / "flip.dnt")
    (tmp_path / "junk.dnt").write_bytes(b"not an index at all, just some bytes" * 4)
    with pytest.raises(dentate.BadMagicError):
        dentate.load(tmp_path / "junk.dnt")
    with pytest.raises(dentate.FileFormatError):
        dentate.Index.from_bytes(b"")
    with pytest.raises(dentate.WrongKindError):
        dentate.FastScanIndex.load(good)
    bm25 = dentate.Bm25Index()
    bm25.add([1], ["hello"])
    bm25.save(tmp_path / "x.lex")
    with pytest.raises(dentate.WrongKindError):
        dentate.load(tmp_path / "x.lex")
    with pytest.raises(dentate.WrongKindError):
        dentate.Bm25Index.load(good)


def test_memory_errors(tmp_path: Path) -> None:
    m = dentate.Memory(tmp_path / "mem", pipeline="rag")
    m.ingest("u", [{"speaker": "a", "text": "hello there"}])
    with pytest.raises(dentate.NotFoundError):
        m.forget("u", 999)
    with pytest.raises(dentate.InvalidInputError, match="k or budget"):
        m.search("u", "hello", k=3, budget=100)
    with pytest.raises(dentate.InvalidInputError):
        m.search("u", "hello", k=0)
    with pytest.raises(dentate.InvalidInputError, match="list of dicts"):
        m.ingest("u", "not a list")  # type: ignore[arg-type]
    with pytest.raises(dentate.InvalidInputError, match="not a dict"):
        m.ingest("u", ["text"])  # type: ignore[list-item]
    with pytest.raises(dentate.InvalidInputError):
        m.ingest("u", [{"speaker": "a"}])
    with pytest.raises(dentate.InvalidInputError, match="empty"):
        m.ingest("u", [])
    with pytest.raises(dentate.InvalidInputError):
        dentate.Memory(tmp_path / "m2", pipeline="mem9")
    with pytest.raises(dentate.InvalidInputError, match="llm needs `model`"):
        dentate.Memory(tmp_path / "m3", llm={"url": "http://127.0.0.1:9/v1"})
    with pytest.raises(dentate.InvalidInputError, match="unknown llm setting"):
        dentate.Memory(tmp_path / "m3", llm={"url": "http://127.0.0.1:9/v1", "model": "x", "temp": 1})
    with pytest.raises(dentate.InvalidParameterError, match="base_url"):
        dentate.Memory(tmp_path / "m3", llm={"url": "ftp://nowhere", "model": "x"})
    # A memory built with one embedder refuses another.
    with pytest.raises(dentate.InvalidInputError, match="was built with embedder"):
        other = dentate.Memory(tmp_path / "mem", pipeline="rag", embedder="hash:64")
        other.search("u", "hello", k=1)
    assert m.message_count("u") == 1
