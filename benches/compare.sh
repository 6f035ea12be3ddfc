#!/usr/bin/env bash
# Side-by-side benchmark: Dentate (`dentate bench`) and faiss-cpu
# (`benches/faiss_compare.py`) on the same files, threads and k, in one run.
#
#   benches/compare.sh DIR [nlist] [m] [nprobes] [threads]
#
# DIR holds base.fvecs, queries.fvecs and gt.ivecs (e.g. from
# `dentate data synth --out DIR`). Writes DIR/results.jsonl and prints a
# Markdown table with Dentate/FAISS QPS ratios. Needs `pip install faiss-cpu numpy`.
set -euo pipefail
dir=${1:?usage: benches/compare.sh DIR [nlist] [m] [nprobes] [threads]}
nlist=${2:-1024}
m=${3:-48}
nprobes=${4:-4,8,16,32,64}
threads=${5:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
# These variables slow current OpenBLAS builds; unset them for the benchmark only.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
cargo build --release -q -p dentate-cli --manifest-path "$here/../Cargo.toml"
bin="$here/../target/release/dentate"
files=(--base "$dir/base.fvecs" --queries "$dir/queries.fvecs" --gt "$dir/gt.ivecs" --k 10 --threads "$threads" --json)
out="$dir/results.jsonl"
: > "$out"
"$bin" bench "${files[@]}" --index flat --precision f32 | tee -a "$out"
python3 "$here/faiss_compare.py" "${files[@]}" --index flat | tee -a "$out"
# One trained index per engine, swept over nprobe and re-rank factor
# (0 = PQ scores only; R = exact re-rank of the best k*R candidates:
# Dentate from its f16 store, FAISS with IndexRefineFlat over float32).
"$bin" bench "${files[@]}" --index ivfpq --nlist "$nlist" --m "$m" --opq --nprobe "$nprobes" --rerank 0,4,8 | tee -a "$out"
python3 "$here/faiss_compare.py" "${files[@]}" --index ivfpq --nlist "$nlist" --m "$m" --opq --nprobe "$nprobes" --rerank 0,4,8 | tee -a "$out"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
key = lambda r: (r["index"], r.get("nprobe"), r.get("rerank") or 0)
dent = {key(r): r for r in rows if r["engine"] == "dentate"}
fais = {key(r): r for r in rows if r["engine"] == "faiss"}
print("\n| index | nprobe | rerank | Dentate recall@10 | FAISS recall@10 | Dentate QPS | FAISS QPS | QPS ratio | Dentate build s | FAISS build s | Dentate B/vec | FAISS B/vec |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(dent, key=lambda k: (k[0], k[2], k[1] or 0)):
    d, f = dent[k], fais.get(k)
    if f is None:
        continue
    print(f"| {k[0]} | {k[1] if k[1] is not None else '-'} | {k[2]} | {d['recall_at_k']:.4f} | {f['recall_at_k']:.4f} | "
          f"{d['qps']:.0f} | {f['qps']:.0f} | **{d['qps'] / f['qps']:.2f}×** | {d['build_s']:.1f} | {f['build_s']:.1f} | "
          f"{d['bytes_per_vector']:.0f} | {f['bytes_per_vector']:.0f} |")
PY
