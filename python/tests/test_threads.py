"""Python threads searching one index at once get the serial answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

import dentate
from conftest import clustered


def test_parallel_searches_match_serial(data: npt.NDArray[np.float32]) -> None:
    index: dentate.Index = dentate.FastScanIndex(32, 16, 16, nprobe=8, rerank=8)
    index.train(data)
    index.add(data)
    q = clustered(400, 32, seed=5)
    serial = [index.search(q[i : i + 1], 10) for i in range(len(q))]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(lambda i: index.search(q[i : i + 1], 10), range(len(q))))
    for (s1, i1), (s2, i2) in zip(serial, parallel):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)
    # Batches from threads while another thread adds and removes: every
    # answer is one the index gave before or after a change, never torn. (An
    # exact index, so that a row without the added vectors must equal the
    # row before any change.)
    index = dentate.FlatIndex(32)
    index.add(data)
    base = index.search(q, 10)
    extra = clustered(100, 32, seed=6)

    def writer() -> None:
        for _ in range(5):
            ids = index.add(extra)
            index.remove(ids)

    with ThreadPoolExecutor(max_workers=4) as pool:
        w = pool.submit(writer)
        results = list(pool.map(lambda _: index.search(q, 10), range(12)))
        w.result()
    added = set(range(len(data), len(data) + 500))
    for s, i in results:
        assert s.shape == (400, 10)
        assert (i >= 0).all() and not np.isnan(s).any()
        assert (np.diff(s, axis=1) <= 0).all()
        # A row that holds none of the vectors added meanwhile is the row
        # the index gave before any change.
        clean = ~np.isin(i, list(added)).any(axis=1)
        assert clean.any()
        np.testing.assert_array_equal(i[clean], base[1][clean])
    final = index.search(q, 10)
    np.testing.assert_array_equal(base[1], final[1])
