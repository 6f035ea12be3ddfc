"""The package and the command line read and write the same files and give
the same answers: ids and scores, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import dentate


def cli_search(cli: str, index: Path, queries: Path, k: int, *extra: str) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    out = subprocess.run(
        [cli, "index", "search", "--index", str(index), "--queries", str(queries), "--k", str(k), *extra],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    rows.sort(key=lambda r: r["query"])
    scores = np.array([r["scores"] for r in rows], dtype=np.float32)
    ids = np.array([r["ids"] for r in rows], dtype=np.int64)
    return scores, ids


@pytest.mark.parametrize(
    "kind,args",
    [
        ("flat", ["--precision", "f32"]),
        ("flat", ["--precision", "f16"]),
        ("ivfpq", ["--nlist", "16", "--m", "8"]),
        ("ivffastscan", ["--nlist", "16", "--m", "16", "--opq"]),
        ("fastscan", ["--m", "16"]),
    ],
)
def test_cli_built_index_answers_the_same_in_python(
    cli: str, tmp_path: Path, data: npt.NDArray[np.float32], queries: npt.NDArray[np.float32], kind: str, args: list[str]
) -> None:
    np.save(tmp_path / "base.npy", data)
    np.save(tmp_path / "q.npy", queries)
    subprocess.run(
        [cli, "index", "build", "--input", str(tmp_path / "base.npy"), "--output", str(tmp_path / "i.dnt"), "--index", kind, *args],
        check=True,
        capture_output=True,
    )
    index = dentate.load(tmp_path / "i.dnt")
    assert len(index) == len(data)
    want_s, want_i = cli_search(cli, tmp_path / "i.dnt", tmp_path / "q.npy", 10)
    got_s, got_i = index.search(queries, 10)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_s, want_s)
    if kind != "flat":
        want_s, want_i = cli_search(cli, tmp_path / "i.dnt", tmp_path / "q.npy", 10, "--nprobe", "2", "--rerank", "0")
        got_s, got_i = index.search(queries, 10, nprobe=2, rerank=0)
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_s, want_s)


def test_python_built_index_answers_the_same_on_the_cli(
    cli: str, tmp_path: Path, data: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]
) -> None:
    index = dentate.FastScanIndex(32, 16, 16, nprobe=4, rerank=8)
    index.train(data)
    index.add(data, np.arange(len(data), dtype=np.int64) * 3 + 7)
    index.remove([7, 10])
    index.save(tmp_path / "py.dnt")
    np.save(tmp_path / "q.npy", queries)
    want_s, want_i = index.search(queries, 10)
    got_s, got_i = cli_search(cli, tmp_path / "py.dnt", tmp_path / "q.npy", 10)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_s, want_s)
    assert 7 not in got_i and 10 not in got_i


def read_fvecs(path: Path) -> npt.NDArray[np.float32]:
    raw = np.fromfile(path, dtype="<i4")
    dim = int(raw[0])
    return raw.reshape(-1, dim + 1)[:, 1:].view("<f4").astype(np.float32)


@pytest.mark.parametrize("spec", ["hash:96", "minilm"])
def test_embeddings_match_the_cli(cli: str, tmp_path: Path, spec: str) -> None:
    if spec == "minilm":
        try:
            dentate.Embedder("minilm")
        except dentate.Error as e:
            # scripts/test.sh fetches the model and requires this test.
            if os.environ.get("DENTATE_REQUIRE_MINILM"):
                pytest.fail(f"MiniLM did not load (`dentate model fetch minilm`): {e}")
            pytest.skip(f"MiniLM did not load (`dentate model fetch minilm`): {e}")
    texts = ["Where did Ana move in May?", "The cello lessons started in March.", "grey cat called Miso"]
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n")
    subprocess.run(
        [cli, "embed", "--input", str(tmp_path / "t.txt"), "--output", str(tmp_path / "t.fvecs"), "--embedder", spec],
        check=True,
        capture_output=True,
    )
    want = read_fvecs(tmp_path / "t.fvecs")
    got = dentate.embed(texts, spec)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    if spec == "minilm":
        # A sentence model places the paraphrase nearest.
        q = dentate.Embedder("minilm")(["kitten named Miso"])[0]
        assert int(np.argmax(got @ q)) == 2
