"""Shared fixtures: seeded data and the command-line binary."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

REPO = Path(__file__).resolve().parents[2]


def clustered(n: int, dim: int, seed: int, clusters: int = 32) -> npt.NDArray[np.float32]:
    """Gaussian clusters, float32, C-contiguous."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    labels = rng.integers(0, clusters, n)
    noise = 0.5 * rng.standard_normal((n, dim), dtype=np.float32)
    return np.ascontiguousarray(centres[labels] + noise, dtype=np.float32)


def exact_topk(base: npt.NDArray[np.float32], q: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.int64]:
    """Brute-force cosine top-k ids with numpy (float64)."""
    b = base.astype(np.float64)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    qq = q.astype(np.float64)
    qq /= np.linalg.norm(qq, axis=1, keepdims=True)
    sims = qq @ b.T
    return np.argsort(-sims, axis=1, kind="stable")[:, :k].astype(np.int64)


@pytest.fixture(scope="session")
def data() -> npt.NDArray[np.float32]:
    return clustered(4000, 32, seed=1)


@pytest.fixture(scope="session")
def queries() -> npt.NDArray[np.float32]:
    return clustered(50, 32, seed=2)


@pytest.fixture(scope="session")
def cli() -> str:
    """The `dentate` binary: $DENTATE_BIN (must exist when set), else the
    workspace's debug or release build."""
    env = os.environ.get("DENTATE_BIN")
    if env:
        assert Path(env).is_file(), f"DENTATE_BIN={env} does not exist"
        return env
    for p in (REPO / "target" / "debug" / "dentate", REPO / "target" / "release" / "dentate"):
        if p.is_file():
            return str(p)
    found = shutil.which("dentate")
    if found is None:
        pytest.skip("no dentate binary: set DENTATE_BIN (scripts/test.sh does)")
    return found
