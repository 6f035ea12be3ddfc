#!/usr/bin/env python3
"""FAISS side of the side-by-side benchmark against `dentate bench`.

Builds one or more FAISS indexes over a base set, sweeps nprobe and the
refine factor, and reports recall@k, QPS, build time and an estimate of
per-vector index payload. With --json it prints one JSON object per
configuration per line, using exactly the same keys as `dentate bench --json`
(`dentate bench-report` reads both). --nlist and --m take comma lists: every
combination is built (the fast-scan race of `benches/compare.sh --race`
sweeps them).

Similarity is cosine: base and queries are L2-normalised and searched with
inner product. Depends only on numpy and faiss (pip install faiss-cpu numpy).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import faiss

KEYS = ["engine", "index", "factory", "nlist", "m", "opq", "nprobe", "rerank",
        "k", "threads", "recall_at_k", "ivf_coverage", "imbalance", "qps", "build_s",
        "bytes_per_vector", "n", "d", "nq"]
INDEX_KINDS = ("flat", "ivfpq", "ivfpqfs")


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- file readers
def _read_vecs(path, dtype):
    """.fvecs/.ivecs: each record is int32 LE dim followed by dim 4-byte values."""
    raw = np.fromfile(path, dtype="<i4")
    if raw.size == 0:
        die(f"{path}: empty file")
    d = int(raw[0])
    if d <= 0 or raw.size % (d + 1) != 0:
        die(f"{path}: corrupt vecs file (dim {d}, {raw.size * 4} bytes)")
    rec = raw.reshape(-1, d + 1)
    if not (rec[:, 0] == d).all():
        die(f"{path}: records have differing dimensions")
    return np.ascontiguousarray(rec[:, 1:]).view(dtype)


def read_matrix(path, kind):
    """Read a 2-D matrix; kind is 'float' (vectors) or 'int' (neighbour ids)."""
    if not os.path.isfile(path):
        die(f"file not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".fvecs":
        m = _read_vecs(path, "<f4")
    elif ext == ".ivecs":
        m = _read_vecs(path, "<i4")
    elif ext == ".npy":
        m = np.load(path, allow_pickle=False)
        if m.ndim != 2:
            die(f"{path}: expected a 2-D array, got shape {m.shape}")
        if m.dtype not in (np.float32, np.int32, np.int64):
            die(f"{path}: unsupported dtype {m.dtype} (want float32/int32/int64)")
    else:
        die(f"{path}: unknown extension {ext!r} (want .fvecs, .ivecs or .npy)")
    if kind == "float":
        return np.ascontiguousarray(m, dtype=np.float32)  # always a fresh copy
    return np.ascontiguousarray(m, dtype=np.int64)


# ------------------------------------------------------------------- helpers
def recall_at_k(found, gt, k):
    """Mean over queries of |retrieved top-k ∩ gt top-k| / k."""
    hits = sum(len(np.intersect1d(f[:k], g[:k])) for f, g in zip(found, gt))
    return hits / (k * len(gt))


def bytes_per_vector(kind, d, m, refined):
    """Estimated index payload per stored vector (NOT process RSS).

    flat    : 4*d                 raw float32 vector
    ivfpq   : m + 8               m one-byte PQ codes + int64 id in the inverted list
    ivfpqfs : ceil(m/2) + 8       m 4-bit codes packed two per byte + int64 id
    refined : + 4*d               IndexRefineFlat keeps a float32 copy for re-ranking
    Shared structures (coarse centroids, PQ codebooks, OPQ matrix) and fast-scan
    block padding to 32 vectors are amortised away and not counted.
    """
    if kind == "flat":
        return 4 * d
    b = (m if kind == "ivfpq" else (m + 1) // 2) + 8
    return b + (4 * d if refined else 0)


def ivf_partition(inner, ivf, n):
    """The list of every base row (-1 where none) and a function giving the
    lists a query probes at nprobe, through the OPQ pre-transform when there
    is one: what `dentate bench` reports as IVF coverage."""
    list_of = np.full(n, -1, dtype=np.int64)
    inv = ivf.invlists
    for lst in range(ivf.nlist):
        size = inv.list_size(lst)
        if size:
            ids = faiss.rev_swig_ptr(inv.get_ids(lst), size).copy()
            list_of[ids] = lst
    pre = None
    if isinstance(inner, faiss.IndexPreTransform):
        pre = inner

    def probes(queries, nprobe):
        xq = queries
        if pre is not None:
            for i in range(pre.chain.size()):
                xq = pre.chain.at(i).apply(xq)
        return ivf.quantizer.search(np.ascontiguousarray(xq, dtype=np.float32), nprobe)[1]

    return list_of, probes


def coverage(list_of, probed, gt, k):
    """Share of each query's true top-k whose lists it probes, averaged."""
    hits = 0.0
    for row, lists in zip(gt[:, :k], probed):
        hits += np.isin(list_of[row], lists).sum() / len(row)
    return hits / len(gt)


def imbalance_factor(ivf):
    sizes = np.array([ivf.invlists.list_size(i) for i in range(ivf.nlist)], dtype=np.float64)
    return float(len(sizes) * (sizes ** 2).sum() / sizes.sum() ** 2)


def timed_search(index, queries, k):
    """Same protocol as `dentate bench`: one untimed full warm-up search, then
    full searches until 1 s or 10 runs have passed; the fastest run counts
    (on a shared, noisy machine the best run is the least disturbed one)."""
    _, ids = index.search(queries, k)
    best, spent = float("inf"), 0.0
    for _ in range(10):
        t0 = time.perf_counter()
        _, ids = index.search(queries, k)
        dt = time.perf_counter() - t0
        best, spent = min(best, dt), spent + dt
        if spent > 1.0:
            break
    return ids, len(queries) / best


# ------------------------------------------------------------------- runners
def run_flat(base, queries, gt, args, common):
    d = base.shape[1]
    t0 = time.perf_counter()
    index = faiss.IndexFlatIP(d)
    index.add(base)
    build_s = time.perf_counter() - t0
    ids, qps = timed_search(index, queries, args.k)
    # IVF/PQ parameters do not apply to a flat index: report them as null/false.
    yield dict(common, index="flat", factory="IndexFlatIP", nlist=None, m=None,
               opq=False, nprobe=None, rerank=None, ivf_coverage=None, imbalance=None,
               recall_at_k=recall_at_k(ids, gt, args.k), qps=qps, build_s=build_s,
               bytes_per_vector=bytes_per_vector("flat", d, 0, False))


def run_ivf(kind, base, queries, gt, args, common, nlist, m):
    d = base.shape[1]
    opq = f"OPQ{m}," if args.opq else ""
    pq = f"PQ{m}x4fs" if kind == "ivfpqfs" else f"PQ{m}"
    factory = f"{opq}IVF{nlist},{pq}"
    # ivfpq re-ranks only on request; fast-scan always re-ranks (default 4x).
    reranks = args.rerank if (any(args.rerank) or kind == "ivfpq") else [4]
    refined = any(r > 0 for r in reranks)

    t0 = time.perf_counter()
    inner = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    # extract_index_ivf sees through the OPQ pre-transform but returns a bare
    # IndexIVF proxy; downcast to reach IVFPQ-only fields.
    ivf = faiss.downcast_index(faiss.extract_index_ivf(inner))
    # index_factory turns on polysemous training for 8-bit IVFPQ; it is only used
    # when polysemous_ht is set (never here) and costs seconds, so skip it.
    if hasattr(ivf, "do_polysemous_training"):
        ivf.do_polysemous_training = False
    index = inner
    if refined:
        # Wrap before train/add so the refine store receives every base vector.
        index = faiss.IndexRefineFlat(inner)
    index.train(base)  # faiss subsamples the k-means training set itself
    index.add(base)
    build_s = time.perf_counter() - t0
    list_of, probes = ivf_partition(inner, ivf, len(base))
    cover = {p: coverage(list_of, probes(queries, p), gt, args.k) for p in args.nprobe}
    imbalance = imbalance_factor(ivf)

    # One trained index serves every re-rank factor: factor 0 searches the
    # inner IVF-PQ index directly, others set IndexRefineFlat's k_factor.
    for rerank in reranks:
        target = index if rerank > 0 else inner
        if rerank > 0:
            index.k_factor = rerank
        name = f"IndexRefineFlat({factory})" if rerank > 0 else factory
        for p in args.nprobe:
            ivf.nprobe = p
            ids, qps = timed_search(target, queries, args.k)
            yield dict(common, index=kind, factory=name, nlist=nlist, m=m, nprobe=p, rerank=rerank,
                       recall_at_k=recall_at_k(ids, gt, args.k), qps=qps, build_s=build_s,
                       ivf_coverage=round(cover[p], 4), imbalance=round(imbalance, 3),
                       bytes_per_vector=bytes_per_vector(kind, d, m, refined))


# ----------------------------------------------------------------------- CLI
def int_list(s):
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {s!r}")


def parse_args():
    ap = argparse.ArgumentParser(description="FAISS baseline for `dentate bench` (cosine, top-k).")
    ap.add_argument("--base", required=True, help="base vectors (.fvecs or .npy)")
    ap.add_argument("--queries", required=True, help="query vectors (.fvecs or .npy)")
    ap.add_argument("--gt", help="ground-truth neighbour ids (.ivecs or .npy); exact IndexFlatIP if omitted")
    ap.add_argument("--index", default="flat,ivfpq", help="comma list of flat,ivfpq,ivfpqfs (default: flat,ivfpq)")
    ap.add_argument("--nlist", type=int_list, default=[1024], help="comma list of IVF list counts (default 1024)")
    ap.add_argument("--m", type=int_list, default=[16], help="comma list of PQ sub-quantiser counts (default 16)")
    ap.add_argument("--opq", action="store_true", help="prefix factory with OPQ{m}")
    ap.add_argument("--nprobe", type=int_list, default=[1, 4, 16, 64], help="comma list (default 1,4,16,64)")
    ap.add_argument("--rerank", type=int_list, default=[0], help="comma list of IndexRefineFlat k_factor; 0 = none (ivfpqfs defaults to 4)")
    ap.add_argument("--k", type=int, default=10, help="neighbours per query (default 10)")
    ap.add_argument("--threads", type=int, default=2, help="OpenMP threads (default 2)")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    args = ap.parse_args()
    args.index = [s.strip() for s in args.index.split(",") if s.strip()]
    bad = [s for s in args.index if s not in INDEX_KINDS]
    if bad or not args.index:
        die(f"--index: unknown kind(s) {bad}; choose from {','.join(INDEX_KINDS)}")
    if min([args.k, args.threads] + args.nlist + args.m + args.nprobe) <= 0 or min(args.rerank) < 0:
        die("--k, --nlist, --m, --threads and --nprobe must be positive; --rerank >= 0")
    return args


def print_table(rows):
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4f}" if v < 10 else f"{v:.1f}"
        return str(v)
    cells = [KEYS] + [[fmt(r[key]) for key in KEYS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(KEYS))]
    for c in cells:
        print("  ".join(s.rjust(w) for s, w in zip(c, widths)))


def main():
    args = parse_args()
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"warning: {var}={os.environ[var]} is set; it may slow BLAS", file=sys.stderr)

    base = read_matrix(args.base, "float")
    queries = read_matrix(args.queries, "float")
    (n, d), nq = base.shape, queries.shape[0]
    if queries.shape[1] != d:
        die(f"dimension mismatch: base d={d}, queries d={queries.shape[1]}")
    if args.k > n:
        die(f"k={args.k} is larger than the base size n={n}")
    ivf_kinds = [s for s in args.index if s != "flat"]
    if ivf_kinds and any(d % m != 0 for m in args.m):
        die(f"d={d} is not divisible by every m in {args.m} (required by PQ/OPQ)")
    if ivf_kinds and n < max(args.nlist):
        die(f"nlist={max(args.nlist)} exceeds the base size n={n}")
    faiss.normalize_L2(base)  # in place; cosine == inner product on unit vectors
    faiss.normalize_L2(queries)
    faiss.omp_set_num_threads(args.threads)

    if args.gt:
        gt = read_matrix(args.gt, "int")
        if gt.shape[0] != nq or gt.shape[1] < args.k:
            die(f"ground truth shape {gt.shape} does not cover nq={nq}, k={args.k}")
        gt = gt[:, :args.k]
    else:  # exact ground truth; not counted in any timing
        exact = faiss.IndexFlatIP(d)
        exact.add(base)
        gt = exact.search(queries, args.k)[1]

    common = dict(engine="faiss", opq=args.opq, k=args.k, threads=args.threads, n=n, d=d, nq=nq)
    rows = []
    gens = []
    for kind in args.index:
        if kind == "flat":
            gens.append(run_flat(base, queries, gt, args, common))
        else:
            gens += [run_ivf(kind, base, queries, gt, args, common, nlist, m)
                     for nlist in args.nlist for m in args.m]
    for gen in gens:
        for row in gen:
            row = {key: row[key] for key in KEYS}
            if args.json:
                print(json.dumps(row), flush=True)
            rows.append(row)
    if not args.json:
        print_table(rows)


if __name__ == "__main__":
    main()
