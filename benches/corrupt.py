#!/usr/bin/env python3
"""Corrupted index files, Dentate beside FAISS, hnswlib and usearch.

Writes each index kind (Dentate through its CLI; the peers through their
Python APIs) from the same vectors, then loads truncated and byte-flipped
copies of each file, every one in a fresh process followed by one search,
with a time limit, and tallies how each load ended:

  clean error  the loader refused the file with an error (Dentate: exit 2
               and an `error:` line; Python peers: an exception)
  panic        Dentate exit 101 (a Rust panic)
  signal       the process died of a signal (segfault, abort, OOM kill)
  hang         still running at the time limit
  silent load  the corrupted file loaded and the search ran

Usage: benches/corrupt.py --bin target/release/dentate [--copies 200]
       [--out DIR] [--timeout 20] [--only dentate]
The peers need `pip install faiss-cpu hnswlib usearch numpy` (any missing
one is skipped and said so). benches/corrupt.sh builds the CLI and runs it.
"""
import argparse, os, random, subprocess, sys, tempfile, collections, struct

DIM, N = 32, 2000
KINDS = ["clean error", "panic", "signal", "hang", "silent load", "other"]


def vectors(n, dim, seed):
    rng = random.Random(seed)
    return [[rng.uniform(-1, 1) for _ in range(dim)] for _ in range(n)]


def write_fvecs(path, rows):
    with open(path, "wb") as f:
        for r in rows:
            f.write(struct.pack("<i", len(r)))
            f.write(struct.pack(f"<{len(r)}f", *r))


def corruptions(good, n, seed):
    """n truncated and n byte-flipped copies (1-3 bytes), as the Rust test."""
    rng = random.Random(seed)
    out = []
    fixed = [0, 31, 32, len(good) - 1]
    for i in range(n):
        cut = fixed[i] if i < len(fixed) else rng.randrange(len(good))
        out.append(good[:cut])
    for i in range(n):
        bad = bytearray(good)
        for _ in range(1 + i % 3):
            at = len(good) - 1 if i == 0 else rng.randrange(len(good))
            bad[at] ^= rng.randrange(1, 256)
        out.append(bytes(bad))
    return out


def classify(cmd, timeout, dentate):
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang"
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0:
        return "signal"
    if dentate:
        if p.returncode == 101 or "panicked" in err:
            return "panic"
        if p.returncode == 2 and "error:" in err:
            return "clean error"
    elif p.returncode == 1 and "Traceback" in err:
        return "clean error"
    if p.returncode == 0:
        return "silent load"
    return "other"


PEER_LOAD = {
    "faiss": "import faiss, numpy as np\nix = faiss.read_index({path!r})\nq = np.load({q!r})\nix.search(q, 3)\n",
    "hnswlib": "import hnswlib, numpy as np\nix = hnswlib.Index(space='ip', dim={dim})\nix.load_index({path!r})\nix.knn_query(np.load({q!r}), k=3)\n",
    "usearch": "from usearch.index import Index\nimport numpy as np\nix = Index(ndim={dim}, metric='ip', dtype={dtype!r})\nix.load({path!r})\nix.search(np.load({q!r}), 3)\n",
}


def build_peers(work, base, queries):
    """Writes each peer's index files; returns [(engine, kind, path, loader)]."""
    out = []
    try:
        import numpy as np
    except ImportError:
        print("numpy missing: peers skipped", file=sys.stderr)
        return out
    x = np.array(base, dtype="float32")
    q = os.path.join(work, "q.npy")
    np.save(q, np.array(queries, dtype="float32"))
    try:
        import faiss
        for kind, factory in [("flat", "Flat"), ("ivfpq", "IVF8,PQ8"), ("ivfpq-fastscan", "IVF8,PQ8x4fs"), ("hnsw", "HNSW16")]:
            ix = faiss.index_factory(DIM, factory, faiss.METRIC_INNER_PRODUCT)
            ix.train(x)
            ix.add(x)
            p = os.path.join(work, f"faiss-{kind}.index")
            faiss.write_index(ix, p)
            out.append(("faiss", kind, p, PEER_LOAD["faiss"].format(path="{path}", q=q)))
    except ImportError:
        print("faiss missing: skipped", file=sys.stderr)
    try:
        import hnswlib
        ix = hnswlib.Index(space="ip", dim=DIM)
        ix.init_index(max_elements=N, ef_construction=100, M=16)
        ix.add_items(x)
        p = os.path.join(work, "hnswlib.bin")
        ix.save_index(p)
        out.append(("hnswlib", "hnsw", p, PEER_LOAD["hnswlib"].format(path="{path}", q=q, dim=DIM)))
    except ImportError:
        print("hnswlib missing: skipped", file=sys.stderr)
    try:
        from usearch.index import Index
        for dtype in ["f32", "f16", "i8"]:
            ix = Index(ndim=DIM, metric="ip", dtype=dtype)
            ix.add(np.arange(N), x)
            p = os.path.join(work, f"usearch-{dtype}.usearch")
            ix.save(p)
            out.append(("usearch", f"hnsw {dtype}", p, PEER_LOAD["usearch"].format(path="{path}", q=q, dim=DIM, dtype=dtype)))
    except ImportError:
        print("usearch missing: skipped", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--copies", type=int, default=200, help="truncated and as many flipped copies per file")
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--out")
    ap.add_argument("--only")
    a = ap.parse_args()
    work = a.out or tempfile.mkdtemp(prefix="dentate-corrupt-")
    os.makedirs(work, exist_ok=True)
    base, queries = vectors(N, DIM, 1), vectors(5, DIM, 2)
    fv, qv = os.path.join(work, "base.fvecs"), os.path.join(work, "q.fvecs")
    write_fvecs(fv, base)
    write_fvecs(qv, queries)
    texts = os.path.join(work, "notes.txt")
    words = ["cat", "dog", "river", "cello", "marathon", "bicycle", "museum", "tuna", "brakes", "lesson"]
    with open(texts, "w") as f:
        for i in range(N):
            f.write(f"note {i}: the {words[i % 10]} and the {words[(i // 10) % 10]} on day {i // 7}\n")
    files = []
    if a.only in (None, "dentate"):
        for kind, extra in [("flat", ["--precision", "f32"]), ("ivfpq", ["--nlist", "8", "--m", "8", "--opq"]),
                            ("fastscan", ["--m", "8"]), ("ivffastscan", ["--nlist", "8", "--m", "8"])]:
            p = os.path.join(work, f"dentate-{kind}.dnt")
            cmd = [a.bin, "index", "build", "--index", kind, *extra, "--input", fv, "--texts", texts, "--output", p]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            files.append(("dentate", kind, p, [a.bin, "search", "--k", "3", "--index", "{path}", "--queries", qv]))
        lex_index = os.path.join(work, "dentate-flat.dnt")
        files.append(("dentate", "bm25", os.path.join(work, "dentate-flat.lex"),
                      [a.bin, "search", "--k", "3", "--index", lex_index, "--lexical", "{path}",
                       "--retriever", "bm25", "--text", "the cat and the cello"]))
    if a.only in (None, "peers"):
        files += build_peers(work, base, queries)
    tally = collections.OrderedDict()
    for seed, (engine, kind, path, loader) in enumerate(files):
        good = open(path, "rb").read()
        ext = os.path.splitext(path)[1]
        copy = os.path.join(work, f"corrupt{ext}")
        counts = collections.Counter()
        for bad in corruptions(good, a.copies, 1000 + seed):
            with open(copy, "wb") as f:
                f.write(bad)
            if engine == "dentate":
                cmd = [c.replace("{path}", copy) for c in loader]
            else:
                cmd = [sys.executable, "-c", loader.replace("{path}", copy)]
            counts[classify(cmd, a.timeout, engine == "dentate")] += 1
        tally[(engine, kind, len(good))] = counts
        print(f"{engine:8} {kind:15} {len(good):>9} B  " + "  ".join(f"{k}: {counts[k]}" for k in KINDS if counts[k]), flush=True)
    print()
    print("| engine | index | file bytes | copies | clean error | panic | signal | hang | silent load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (engine, kind, size), c in tally.items():
        print(f"| {engine} | {kind} | {size} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in KINDS[:5]) + " |")


if __name__ == "__main__":
    main()
