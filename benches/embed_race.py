#!/usr/bin/env python3
"""ONNX Runtime side of the MiniLM embedding race against Dentate's Rust embedder.

Same model files, same sentences, same thread count: this script builds an
ONNX graph of the all-MiniLM-L6-v2 BERT encoder directly from the model
folder's `model.safetensors` (no torch, no transformers), runs it on ONNX
Runtime's CPUExecutionProvider, and prints one JSON line per measurement.

Usage:
    python3 benches/embed_race.py --model DIR --input FILE --threads N \
        [--seconds S] [--check FVECS] [--batch 1,64] [--kind auto|plain|fused]

    --model DIR     folder with config.json, model.safetensors, tokenizer.json
                    (default ~/.cache/dentate/models/all-MiniLM-L6-v2)
    --input FILE    one text per line (empty lines are skipped)
    --threads N     ORT intra-op threads (inter-op is 1); the tokenizer's
                    batch encoding is limited to the same number
    --seconds S     measuring time per batch size, after a 2 s warm-up (10)
    --check FVECS   Dentate's vectors for the same lines, in order (.fvecs:
                    int32 dim then dim float32 per row); prints the max
                    absolute difference and the minimum cosine per model and
                    batch size, and exits 1 if any minimum cosine < 0.9999
    --batch LIST    comma list of batch sizes to time (default 1,64)
    --kind K        which graph to time: plain (our own standard-op graph),
                    fused (ORT's transformers BERT fusion of it) or auto
                    (default: both are built, the faster at batch 1 is used)

Graph: word + position + token-type-0 embeddings, LayerNormalization, six
post-LN encoder layers (MatMul + Add projections, additive attention mask
(1 - mask) * -10000, Softmax, exact erf GELU), then mean pooling over
attention_mask and L2 normalisation; inputs `input_ids` and `attention_mask`
(int64 [batch, seq]), output `sentence_embedding` (float32 [batch, 384]).
Opset 17, standard ops only, so ORT's own optimiser (ORT_ENABLE_ALL) can fuse.
The graphs are cached under ~/.cache/dentate/bench/minilm-onnx/ and rebuilt
when missing or when the safetensors file changes.

Tokenization uses the `tokenizers` package on the same tokenizer.json,
truncation at 256 tokens (as Dentate), no padding in the tokenizer. Batch 1
embeds each line alone, in turn, cycling through the file; latency includes
tokenization (Dentate's figure includes its tokenizer too). Batch B takes
consecutive groups of B lines (the last group may be short), each padded to
its own longest sequence (no length sorting), cycling through the file;
sentences/s counts real lines.

Depends on numpy, onnx, onnxruntime, tokenizers.
"""
import argparse
import json
import os
import struct
import sys
import time


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/dentate/models/all-MiniLM-L6-v2"))
    ap.add_argument("--input", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--check")
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--kind", choices=("auto", "plain", "fused"), default="auto")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/dentate/bench/minilm-onnx"))
    a = ap.parse_args()
    if a.threads < 1:
        die("--threads must be >= 1")
    try:
        a.batches = [int(b) for b in a.batch.split(",") if b.strip()]
    except ValueError:
        die(f"--batch: not a comma list of integers: {a.batch!r}")
    if not a.batches or min(a.batches) < 1:
        die("--batch needs positive sizes")
    return a


ARGS = parse_args()
# The tokenizer's batch encoding runs on a rayon pool: give it the same threads.
os.environ["RAYON_NUM_THREADS"] = str(ARGS.threads)
if ARGS.threads == 1:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
import onnxruntime as ort  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

MAX_TOKENS = 256
MIN_COSINE = 0.9999
WARMUP_S = 2.0


# ------------------------------------------------------------------ weights
def read_safetensors(path):
    """Minimal safetensors reader: u64 LE header length, JSON header, raw data."""
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in dtypes:
            die(f"{path}: {name}: unsupported dtype {info['dtype']}")
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(data[lo:hi], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
        out[name] = arr
    return out


# -------------------------------------------------------------------- graph
class G:
    """Tiny helper collecting nodes and initializers with unique names."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(self, op_type, inputs, name, **attrs):
        self.n += 1
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=f"{op_type}_{self.n}", **attrs))
        return name


def build_graph(cfg, w):
    hid, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    dh = hid // heads
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    g = G()

    # Shared constants.
    one = g.const("c_one", f32(1.0))
    half = g.const("c_half", f32(0.5))
    neg = g.const("c_neg_1e4", f32(-10000.0))
    sqrt2 = g.const("c_sqrt2", f32(np.sqrt(2.0)))
    scale = g.const("c_sqrt_dh", f32(np.sqrt(dh)))
    tiny = g.const("c_tiny", f32(1e-9))
    tiny_norm = g.const("c_tiny_norm", f32(1e-12))
    ax1 = g.const("c_ax1", np.array([1], dtype=np.int64))
    ax2 = g.const("c_ax2", np.array([2], dtype=np.int64))
    axm1 = g.const("c_axm1", np.array([-1], dtype=np.int64))
    zero1 = g.const("c_zero1", np.array([0], dtype=np.int64))
    shp_heads = g.const("c_shape_heads", np.array([0, 0, heads, dh], dtype=np.int64))
    shp_hid = g.const("c_shape_hid", np.array([0, 0, hid], dtype=np.int64))
    shp_out = g.const("c_shape_out", np.array([-1, hid], dtype=np.int64))

    # Embeddings: word[ids] + position[0:seq] + token_type[0], then LayerNorm.
    word = g.const("word_embeddings", w["embeddings.word_embeddings.weight"])
    pos = g.const("position_embeddings", w["embeddings.position_embeddings.weight"])
    tt0 = g.const("token_type_0", w["embeddings.token_type_embeddings.weight"][0])
    seq = g.op("Shape", ["input_ids"], "seq_len", start=1, end=2)
    pos_s = g.op("Slice", [pos, zero1, seq, zero1], "pos_slice")
    x = g.op("Gather", [word, "input_ids"], "word_emb", axis=0)
    x = g.op("Add", [x, pos_s], "emb_wp")
    x = g.op("Add", [x, tt0], "emb_wpt")

    def layer_norm(x, prefix, out):
        gamma = g.const(prefix + ".weight", w[prefix + ".weight"])
        beta = g.const(prefix + ".bias", w[prefix + ".bias"])
        return g.op("LayerNormalization", [x, gamma, beta], out, axis=-1, epsilon=eps)

    def linear(x, prefix, out):
        wt = g.const(prefix + ".weight_t", np.ascontiguousarray(w[prefix + ".weight"].T))
        b = g.const(prefix + ".bias", w[prefix + ".bias"])
        y = g.op("MatMul", [x, wt], out + "_mm")
        return g.op("Add", [y, b], out)

    x = layer_norm(x, "embeddings.LayerNorm", "emb_ln")

    # Additive mask [batch, 1, 1, seq]: (1 - mask) * -10000.
    m = g.op("Unsqueeze", ["attention_mask", ax1], "mask_u1")
    m = g.op("Unsqueeze", [m, ax2], "mask_u2")
    m = g.op("Cast", [m], "mask_f", to=TensorProto.FLOAT)
    m = g.op("Sub", [one, m], "mask_inv")
    mask_add = g.op("Mul", [m, neg], "mask_add")

    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = linear(x, p + "attention.self.query", f"l{i}_q")
        k = linear(x, p + "attention.self.key", f"l{i}_k")
        v = linear(x, p + "attention.self.value", f"l{i}_v")
        q = g.op("Reshape", [q, shp_heads], f"l{i}_q_r")
        q = g.op("Transpose", [q], f"l{i}_q_t", perm=[0, 2, 1, 3])
        k = g.op("Reshape", [k, shp_heads], f"l{i}_k_r")
        k = g.op("Transpose", [k], f"l{i}_k_t", perm=[0, 2, 3, 1])
        v = g.op("Reshape", [v, shp_heads], f"l{i}_v_r")
        v = g.op("Transpose", [v], f"l{i}_v_t", perm=[0, 2, 1, 3])
        s = g.op("MatMul", [q, k], f"l{i}_scores")
        s = g.op("Div", [s, scale], f"l{i}_scaled")
        s = g.op("Add", [s, mask_add], f"l{i}_masked")
        s = g.op("Softmax", [s], f"l{i}_probs", axis=-1)
        c = g.op("MatMul", [s, v], f"l{i}_ctx")
        c = g.op("Transpose", [c], f"l{i}_ctx_t", perm=[0, 2, 1, 3])
        c = g.op("Reshape", [c, shp_hid], f"l{i}_ctx_r")
        a = linear(c, p + "attention.output.dense", f"l{i}_attn_out")
        a = g.op("Add", [a, x], f"l{i}_attn_res")
        x = layer_norm(a, p + "attention.output.LayerNorm", f"l{i}_attn_ln")
        h = linear(x, p + "intermediate.dense", f"l{i}_ff1")
        # GELU, exact: x * 0.5 * (1 + erf(x / sqrt 2)).
        e = g.op("Div", [h, sqrt2], f"l{i}_gelu_div")
        e = g.op("Erf", [e], f"l{i}_gelu_erf")
        e = g.op("Add", [e, one], f"l{i}_gelu_add")
        e = g.op("Mul", [h, e], f"l{i}_gelu_mul")
        e = g.op("Mul", [e, half], f"l{i}_gelu")
        o = linear(e, p + "output.dense", f"l{i}_ff2")
        o = g.op("Add", [o, x], f"l{i}_ff_res")
        x = layer_norm(o, p + "output.LayerNorm", f"l{i}_out")

    # Mean pooling over the mask: [b,1,s] @ [b,s,h] / max(sum(mask), tiny).
    mf = g.op("Cast", ["attention_mask"], "pool_mask_f", to=TensorProto.FLOAT)
    mr = g.op("Unsqueeze", [mf, ax1], "pool_mask_r")
    summed = g.op("MatMul", [mr, x], "pool_sum")
    cnt = g.op("ReduceSum", [mr, axm1], "pool_cnt", keepdims=1)
    cnt = g.op("Max", [cnt, tiny], "pool_cnt_c")
    mean = g.op("Div", [summed, cnt], "pool_mean")
    mean = g.op("Reshape", [mean, shp_out], "pool_flat")
    norm = g.op("ReduceL2", [mean], "pool_norm", axes=[-1], keepdims=1)  # attribute form at opset 17
    norm = g.op("Max", [norm, tiny_norm], "pool_norm_c")
    g.op("Div", [mean, norm], "sentence_embedding")

    graph = helper.make_graph(
        g.nodes,
        "minilm_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hid])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="dentate-embed-race")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def source_stamp(model_dir):
    st = os.stat(os.path.join(model_dir, "model.safetensors"))
    return {"path": os.path.realpath(os.path.join(model_dir, "model.safetensors")),
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "version": 1}


def ensure_models(model_dir, cache, want_fused):
    """Build (or reuse) the plain graph and, if possible, ORT's fused version."""
    os.makedirs(cache, exist_ok=True)
    plain = os.path.join(cache, "model.onnx")
    fused = os.path.join(cache, "model-fused.onnx")
    stamp_path = os.path.join(cache, "source.json")
    stamp = source_stamp(model_dir)
    try:
        with open(stamp_path) as f:
            fresh = json.load(f) == stamp
    except (OSError, ValueError):
        fresh = False
    if not fresh:
        for p in (plain, fused, fused + ".failed"):
            if os.path.exists(p):
                os.remove(p)
    if not os.path.exists(plain):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        if cfg.get("hidden_act", "gelu") != "gelu":
            die(f"hidden_act {cfg.get('hidden_act')!r} not supported")
        t0 = time.perf_counter()
        model = build_graph(cfg, read_safetensors(os.path.join(model_dir, "model.safetensors")))
        onnx.save(model, plain)
        print(f"# built {plain} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    with open(stamp_path, "w") as f:
        json.dump(stamp, f)
    out = {"plain": plain}
    if not want_fused:
        return out
    if os.path.exists(fused):
        out["fused"] = fused
        return out
    if os.path.exists(fused + ".failed"):
        return out
    try:
        from onnxruntime.transformers.optimizer import optimize_model
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        opt = optimize_model(plain, model_type="bert", num_heads=cfg["num_attention_heads"],
                             hidden_size=cfg["hidden_size"], opt_level=0, use_gpu=False)
        counts = opt.get_fused_operator_statistics()
        print(f"# ORT BERT fusion: {json.dumps({k: v for k, v in counts.items() if v})}", file=sys.stderr)
        if not counts.get("Attention") and not counts.get("MultiHeadAttention"):
            raise RuntimeError("no attention fused")
        opt.save_model_to_file(fused)
        out["fused"] = fused
    except Exception as e:  # noqa: BLE001 - any failure means "no fused model"
        print(f"# ORT BERT fusion unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        with open(fused + ".failed", "w") as f:
            f.write(f"{type(e).__name__}: {e}\n")
    return out


# ------------------------------------------------------------------ running
def make_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])


def load_tokenizer(model_dir):
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    return tok


class Embedder:
    def __init__(self, sess, tok):
        self.sess, self.tok = sess, tok

    def one(self, text):
        ids = self.tok.encode(text).ids
        a = np.array([ids], dtype=np.int64)
        return self.sess.run(None, {"input_ids": a, "attention_mask": np.ones_like(a)})[0]

    def many(self, texts):
        encs = self.tok.encode_batch(texts)
        n = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), n), dtype=np.int64)
        mask = np.zeros((len(encs), n), dtype=np.int64)
        for r, e in enumerate(encs):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
        return self.sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]

    def embed(self, texts, batch):
        if batch == 1:
            return np.concatenate([self.one(t) for t in texts])
        return np.concatenate([self.many(texts[i:i + batch]) for i in range(0, len(texts), batch)])


def read_fvecs(path):
    raw = np.fromfile(path, dtype="<i4")
    if raw.size == 0:
        die(f"{path}: empty file")
    d = int(raw[0])
    if d <= 0 or raw.size % (d + 1):
        die(f"{path}: not an .fvecs file (dim {d}, {raw.size * 4} bytes)")
    rows = raw.reshape(-1, d + 1)
    if np.any(rows[:, 0] != d):
        die(f"{path}: rows with differing dimensions")
    return rows[:, 1:].copy().view("<f4")


def compare(ours, theirs):
    diff = float(np.max(np.abs(ours - theirs)))
    num = np.sum(ours * theirs, axis=1, dtype=np.float64)
    den = np.linalg.norm(ours.astype(np.float64), axis=1) * np.linalg.norm(theirs.astype(np.float64), axis=1)
    cos = num / np.maximum(den, 1e-30)
    return diff, float(np.min(cos)), int(np.argmin(cos))


def time_calls(call, items, seconds):
    """Calls `call(item)` on `items` in turn for a warm-up, then for
    `seconds`; each call returns how many sentences it embedded. Latency
    percentiles are per call, the rate is sentences per second."""
    end = time.perf_counter() + WARMUP_S
    i = 0
    while time.perf_counter() < end:
        call(items[i % len(items)])
        i += 1
    lat, sent = [], 0
    i = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    while True:
        s = time.perf_counter()
        if s >= stop:
            break
        sent += call(items[i % len(items)])
        lat.append(time.perf_counter() - s)
        i += 1
    total = time.perf_counter() - t0
    lat = np.array(lat) * 1e3
    return {"p50_ms": round(float(np.percentile(lat, 50)), 3),
            "p90_ms": round(float(np.percentile(lat, 90)), 3),
            "per_s": round(sent / total, 1), "calls": len(lat)}


def time_batch1(emb, lines, seconds):
    def call(line):
        emb.one(line)
        return 1
    return time_calls(call, lines, seconds)


def time_batched(emb, lines, batch, seconds):
    groups = [lines[i:i + batch] for i in range(0, len(lines), batch)]
    def call(group):
        emb.many(group)
        return len(group)
    r = time_calls(call, groups, seconds)
    r["padding"] = f"each group of {batch} consecutive lines padded to its longest, unsorted"
    return r


def main():
    a = ARGS
    with open(a.input, encoding="utf-8") as f:
        lines = [ln.rstrip("\n") for ln in f if ln.strip()]
    if not lines:
        die(f"{a.input}: no lines")
    models = ensure_models(a.model, a.cache, a.kind in ("auto", "fused"))
    if a.kind == "fused" and "fused" not in models:
        die("fused model requested but ORT's BERT fusion did not produce one")
    if a.kind == "plain":
        models = {"plain": models["plain"]}
    elif a.kind == "fused":
        models = {"fused": models["fused"]}
    tok = load_tokenizer(a.model)
    emb = {k: Embedder(make_session(p, a.threads), tok) for k, p in models.items()}
    base = {"runtime": f"onnxruntime {ort.__version__}", "threads": a.threads,
            "input": os.path.basename(a.input), "lines": len(lines)}

    failed = False
    if a.check:
        ref = read_fvecs(a.check)
        if ref.shape[0] != len(lines):
            die(f"{a.check}: {ref.shape[0]} vectors for {len(lines)} lines")
        for kind, e in emb.items():
            for b in sorted(set(a.batches) | {1}):
                ours = e.embed(lines, b)
                if ours.shape != ref.shape:
                    die(f"shape {ours.shape} vs {ref.shape}")
                diff, mincos, worst = compare(ours, ref)
                ok = mincos >= MIN_COSINE
                failed |= not ok
                print(json.dumps({"check": os.path.basename(a.check), "model": kind, "batch": b,
                                  "max_abs_diff": float(f"{diff:.3g}"), "min_cosine": round(mincos, 8),
                                  "worst_line": worst + 1, "ok": ok, **base}), flush=True)
        if failed:
            print(f"error: minimum cosine below {MIN_COSINE}", file=sys.stderr)
            sys.exit(1)

    if len(emb) > 1:
        # Pick the faster graph at batch 1 with a short trial of each.
        trial = {}
        for kind, e in emb.items():
            r = time_batch1(e, lines, min(3.0, max(1.0, a.seconds / 3)))
            trial[kind] = r["p50_ms"]
        chosen = min(trial, key=trial.get)
        print(json.dumps({"choice": chosen, "trial_p50_ms": trial, **base}), flush=True)
    else:
        chosen = next(iter(emb))

    for b in a.batches:
        if b == 1:
            r = time_batch1(emb[chosen], lines, a.seconds)
        else:
            r = time_batched(emb[chosen], lines, b, a.seconds)
        out = {"runtime": base["runtime"], "model": chosen, "threads": a.threads, "batch": b, **r,
               "input": base["input"], "lines": len(lines)}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
