"""The indexes: answers, ids, files, copies."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import dentate
from conftest import clustered, exact_topk


def test_flat_search_is_exact(data: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]) -> None:
    index = dentate.FlatIndex(32)
    ids = index.add(data)
    assert ids.dtype == np.int64 and np.array_equal(ids, np.arange(len(data)))
    scores, found = index.search(queries, 10)
    assert scores.dtype == np.float32 and found.dtype == np.int64
    assert scores.shape == found.shape == (len(queries), 10)
    truth = exact_topk(data, queries, 10)
    # Ties aside, the exact index returns numpy's ranking.
    assert (found == truth).mean() > 0.99
    b = data[found[0]].astype(np.float64)
    q = queries[0].astype(np.float64)
    cos = b @ q / (np.linalg.norm(b, axis=1) * np.linalg.norm(q))
    np.testing.assert_allclose(scores[0], cos, rtol=0, atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: dentate.IvfPqIndex(32, 16, 8, nprobe=16, rerank=8),
        lambda: dentate.IvfPqIndex(32, 16, 8, opq=True, nprobe=16, rerank=8),
        lambda: dentate.FastScanIndex(32, 16, 16, nprobe=16, rerank=10),
        lambda: dentate.FastScanIndex(32, 1, 16, rerank=10),
        lambda: dentate.FastScanIndex(32, 16, 16, nprobe=16, rerank=10, rerank_store="sq8"),
    ],
)
def test_ivf_kinds_reach_high_recall(make, data: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]) -> None:  # type: ignore[no-untyped-def]
    index = make()
    assert not index.is_trained
    with pytest.raises(dentate.NotTrainedError):
        index.add(data)
    index.train(data)
    assert index.is_trained
    index.add(data)
    _, found = index.search(queries, 10)
    truth = exact_topk(data, queries, 10)
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    assert recall >= 0.9, recall
    # Probing one list without re-ranking finds less (a flat fast-scan index
    # has one list: there re-ranking alone makes the difference).
    _, few = index.search(queries, 10, nprobe=1, rerank=0)
    low = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(few, truth)])
    assert low < recall


def test_given_ids_remove_compact_and_auto_ids(data: npt.NDArray[np.float32]) -> None:
    index = dentate.FlatIndex(32)
    ids = np.arange(1000, 1100, dtype=np.uint64)
    index.add(data[:100], ids)
    assert len(index) == 100 and 1000 in index and 999 not in index
    _, found = index.search(data[5], 1)
    assert found[0, 0] == 1005
    assert index.remove([1005, 1006, 5]) == 2
    assert 1005 not in index and len(index) == 98
    _, found = index.search(data[5], 3)
    assert 1005 not in found
    index.compact()
    assert len(index) == 98
    # Automatic ids count from the size at creation (0), skipping ids in use.
    index.add(data[300], [1])
    auto = index.add(data[100:103])
    assert list(auto) == [0, 2, 3]
    # A refused batch uses up no automatic ids.
    with pytest.raises(dentate.NonFiniteError):
        index.add(np.full((2, 32), np.inf, dtype=np.float32))
    assert list(index.add(data[103])) == [4]
    # Python ints, int32 arrays and a list all work as ids.
    index.add(data[104:106], [5, 6])
    index.add(data[106:108], np.array([7, 8], dtype=np.int32))
    # Strided and reversed id arrays too.
    index.add(data[108:110], np.arange(20, 24, dtype=np.int64)[::2])
    assert index.remove(np.array([22, 20], dtype=np.uint64)[::-1]) == 2
    assert all(i in index for i in (5, 6, 7, 8))
    # Re-adding an id replaces its vector.
    index.add(data[200], [5])
    _, found = index.search(data[200], 1)
    assert found[0, 0] == 5


def test_k_clamps_to_the_live_count_and_pads_nothing(data: npt.NDArray[np.float32]) -> None:
    index = dentate.FlatIndex(32)
    index.add(data[:7])
    scores, ids = index.search(data[:2], 10**12)
    assert scores.shape == (2, 7)
    assert sorted(ids[0]) == sorted(ids[1]) == list(range(7))
    assert not np.isnan(scores).any()


def test_padding_when_a_query_finds_fewer(data: npt.NDArray[np.float32]) -> None:
    # An IVF index probing one list can find fewer than k: the row is padded.
    index = dentate.IvfPqIndex(32, 64, 8, nprobe=1, rerank=0)
    index.train(data)
    index.add(data[:100])
    scores, ids = index.search(data[:20], 100)
    assert ids.shape == (20, 100)
    short = ids == -1
    assert short.any()
    assert np.isnan(scores[short]).all() and not np.isnan(scores[~short]).any()


@pytest.mark.parametrize("kind", ["flat", "ivfpq", "fastscan"])
def test_save_load_pickle_and_bytes_round_trip(
    kind: str, tmp_path: Path, data: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]
) -> None:
    index: dentate.Index
    if kind == "flat":
        index = dentate.FlatIndex(32, f16=True)
    elif kind == "ivfpq":
        index = dentate.IvfPqIndex(32, 16, 8)
    else:
        index = dentate.FastScanIndex(32, 16, 16)
    index.train(data)
    index.add(data)
    index.remove([3])
    before = index.search(queries, 5)
    path = tmp_path / f"{kind}.dnt"
    index.save(path)
    for again in (
        dentate.load(path),
        dentate.Index.load(str(path)),
        type(index).load(path),
        pickle.loads(pickle.dumps(index)),
        dentate.Index.from_bytes(index.to_bytes()),
    ):
        assert type(again) is type(index) and again.kind == kind
        assert len(again) == len(index) and 3 not in again
        after = again.search(queries, 5)
        np.testing.assert_array_equal(before[1], after[1])
        np.testing.assert_array_equal(before[0], after[0])
    assert path.read_bytes() == index.to_bytes()


def test_contiguous_float32_is_read_in_place() -> None:
    x = clustered(100, 16, seed=3)
    assert dentate._native._input_address(x) == x.ctypes.data
    # A row slice of a C-contiguous array is contiguous too: no copy.
    assert dentate._native._input_address(x[10:20]) == x[10:].ctypes.data
    # Fortran order, float64 and strided views are copied once, and give
    # the same answers.
    for other in (np.asfortranarray(x), x.astype(np.float64), np.repeat(x, 2, axis=1)[:, ::2]):
        assert dentate._native._input_address(other) != other.ctypes.data
    index = dentate.FlatIndex(16)
    index.add(x)
    want = index.search(x[:5], 4)
    for other in (np.asfortranarray(x[:5]), x[:5].astype(np.float64), np.repeat(x[:5], 2, axis=1)[:, ::2], x[:5].tolist()):
        got = index.search(other, 4)
        np.testing.assert_array_equal(want[1], got[1])
        np.testing.assert_array_equal(want[0], got[0])


def test_one_dimensional_query_is_one_row(data: npt.NDArray[np.float32]) -> None:
    index = dentate.FlatIndex(32)
    index.add(data[:50])
    s1, i1 = index.search(data[3], 4)
    s2, i2 = index.search(data[3:4], 4)
    assert s1.shape == (1, 4)
    np.testing.assert_array_equal(i1, i2)


def test_settings_and_properties(data: npt.NDArray[np.float32]) -> None:
    index = dentate.FastScanIndex(32, 8, 16, opq=False, nprobe=3, rerank=5, seed=11)
    cfg = index.config()
    assert (cfg["nlist"], cfg["m"], cfg["nprobe"], cfg["rerank"], cfg["seed"]) == (8, 16, 3, 5, 11)
    assert cfg["rerank_store"] == "f16"
    assert dentate.IvfPqIndex(32, 8, 8, rerank_store="sq8").config()["rerank_store"] == "sq8"
    assert dentate.IvfPqIndex(32, 8, 8, rerank_store="none").config()["rerank"] == 0
    with pytest.raises(dentate.InvalidParameterError):
        dentate.IvfPqIndex(32, 8, 8, rerank_store="f8")
    index.nprobe = 8
    index.rerank = 2
    assert (index.nprobe, index.rerank) == (8, 2)
    with pytest.raises(dentate.InvalidParameterError):
        index.nprobe = 0
    with pytest.raises(dentate.InvalidParameterError):
        index.rerank = -1
    assert index.nprobe == 8
    flat = dentate.FlatIndex(32)
    assert flat.nprobe is None and flat.dim == 32 and flat.is_trained
    with pytest.raises(dentate.InvalidParameterError):
        flat.nprobe = 3
    index.train(data)
    index.add(data)
    assert index.memory_bytes > len(data) * 8
    assert "fastscan" in repr(index)


def test_tune_finds_settings_that_reach_the_target(data: npt.NDArray[np.float32]) -> None:
    q = clustered(60, 32, seed=9)
    out = dentate.tune(data, q, 0.9, k=10, nlists=[16], ms=[16], nprobes=[2, 4, 8, 16], reranks=[4, 8])
    best = out["best"]
    assert best is not None
    assert best["recall"] >= 0.9 and best["nlist"] == 16 and best["m"] == 16
    assert out["split"] == (30, 30)
    index = dentate.FastScanIndex(32, best["nlist"], best["m"], nprobe=best["nprobe"], rerank=best["rerank"])
    index.train(data)
    index.add(data)
    _, found = index.search(q, 10)
    truth = exact_topk(data, q, 10)
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    assert recall >= 0.85
    assert out["holds_out"] == (best["holdout_recall"] >= 0.9)
    assert (out["held_aside_miss"] is None) == (out["safer"] == [])


def test_tune_from_base_rows(data: npt.NDArray[np.float32]) -> None:
    out = dentate.tune(data, None, 0.9, nlists=[16], ms=[16], reranks=[4, 8], sample=100)
    assert out["split"] == (50, 50)
    assert out["best"] is not None and out["best"]["recall"] >= 0.9
    with pytest.raises(dentate.InvalidParameterError):
        dentate.tune(data, None, 0.9, nlists=[16], ms=[16], sample=1)


def test_bm25_and_hybrid_search() -> None:
    texts = [
        "the cat sat on the mat",
        "dogs chase cats in the garden",
        "a recipe for lemon cake",
        "quarterly revenue grew by ten percent",
    ]
    bm25 = dentate.Bm25Index()
    bm25.add([10, 11, 12, 13], texts)
    assert len(bm25) == 4 and 12 in bm25 and bm25.vocabulary_len > 10
    scores, ids = bm25.search("lemon cakes", 2)
    assert ids[0] == 12 and scores[0] > 0
    vectors = dentate.embed(texts, "hash:64")
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    index = dentate.FlatIndex(64)
    index.add(vectors, [10, 11, 12, 13])
    q = dentate.embed(["revenue growth"], "hash:64")[0]
    _, ids = dentate.hybrid_search(index, bm25, q, "revenue growth", 2)
    assert ids[0] == 13
    _, ids = dentate.hybrid_search(index, bm25, q, "revenue growth", 2, fusion="rrf:60")
    assert ids[0] == 13
    assert bm25.remove([13]) == 1
    _, ids = bm25.search("revenue", 2)
    assert 13 not in ids


def test_bm25_file_round_trip(tmp_path: Path) -> None:
    bm25 = dentate.Bm25Index(k1=1.5, b=0.5)
    bm25.add(np.arange(3), ["alpha beta", "beta gamma", "gamma delta"])
    bm25.save(tmp_path / "x.lex")
    again = dentate.Bm25Index.load(tmp_path / "x.lex")
    a = bm25.search("beta", 3)
    b = again.search("beta", 3)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])


def test_embedder_class() -> None:
    e = dentate.Embedder("hash:48")
    assert e.dim == 48 and "48" in e.name
    v = e(["one", "two"])
    np.testing.assert_array_equal(v, e.embed(["one", "two"]))
    np.testing.assert_array_equal(v, dentate.embed(["one", "two"], "hash:48"))
    assert v.shape == (2, 48)


def test_simd_path_names_a_path() -> None:
    assert dentate.simd_path() in {"avx512f", "avx2+fma", "neon", "simd128", "scalar"}
