#!/usr/bin/env bash
# Side-by-side benchmark: Dentate (`dentate bench`) and faiss-cpu
# (`benches/faiss_compare.py`) on the same files, threads and k, in one run.
#
#   benches/compare.sh DIR [nlist] [m] [nprobes] [threads]
#       exact search and 8-bit OPQ+IVF+PQ, one configuration, table of ratios
#
#   benches/compare.sh --race DIR [threads] [svg]
#       the fast-scan race: sweeps both engines over the same grid and
#       prints QPS at recall@10 = 0.90 / 0.95 / 0.99 for Dentate fast-scan
#       (with and without OPQ), Dentate 8-bit OPQ+IVF-PQ, faiss
#       IVF…,PQ…x4fs + IndexRefineFlat, faiss OPQ…,IVF…,PQ… and faiss
#       IndexFlatIP, with same-run ratios, and draws the recall–QPS curves
#       to svg (default DIR/race.svg). Grid (environment overrides):
#         FS_NLISTS="256 1024"  FS_MS="d/8 d/4 d/2"  FS_NPROBES=4,8,16,32,64,128,256
#         FS_RERANKS=2,4,8,16,32  PQ_NLIST=1024  PQ_M=d/8  PQ_NPROBES=4,8,16,32,64,128
#         PQ_RERANKS=0,4,8,16   OPQ_ITERATIONS (Dentate's: default per index kind)
#         FS_STORE (Dentate's fast-scan re-rank store: f16 default, sq8, f32)
#       Engines alternate which runs first from one configuration to the
#       next; the load average is logged into DIR/race.jsonl as comments.
#       `dentate tune` (TUNE_TARGET, default 0.95) then chooses fast-scan
#       settings over the same grid on rows drawn from the base, never on
#       the race's queries, and its choices run as a series of their own
#       ("[tune 0.95]"): the figure a user gets without a ground truth.
#
# DIR holds base.fvecs, queries.fvecs and gt.ivecs (e.g. from
# `dentate data synth --out DIR` or `dentate data rustdocs`). Needs
# `pip install faiss-cpu numpy`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# These variables slow current OpenBLAS builds; unset them for the benchmark only.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
cargo build --release -q -p dentate-cli --manifest-path "$here/../Cargo.toml"
bin="$here/../target/release/dentate"

if [[ "${1:-}" == "--race" ]]; then
    dir=${2:?usage: benches/compare.sh --race DIR [threads] [svg]}
    threads=${3:-$(nproc)}
    svg=${4:-$dir/race.svg}
    d=$(python3 -c "import numpy as np, sys; print(int(np.fromfile(sys.argv[1], dtype='<i4', count=1)[0]))" "$dir/base.fvecs")
    fs_nlists=${FS_NLISTS:-"256 1024"}
    fs_ms=${FS_MS:-"$((d / 8)) $((d / 4)) $((d / 2))"}
    fs_nprobes=${FS_NPROBES:-4,8,16,32,64,128,256}
    fs_reranks=${FS_RERANKS:-2,4,8,16,32}
    pq_nlist=${PQ_NLIST:-1024}
    pq_m=${PQ_M:-$((d / 8))}
    pq_nprobes=${PQ_NPROBES:-4,8,16,32,64,128}
    pq_reranks=${PQ_RERANKS:-0,4,8,16}
    opq_it=()
    if [[ -n "${OPQ_ITERATIONS:-}" ]]; then opq_it=(--opq-iterations "$OPQ_ITERATIONS"); fi
    # FS_STORE=sq8|f16|f32: the re-rank store of Dentate's fast-scan grid
    # rows (default: bench's, f16). tune and its choice keep the default.
    fs_store=()
    if [[ -n "${FS_STORE:-}" ]]; then fs_store=(--rerank-store "$FS_STORE"); fi
    files=(--base "$dir/base.fvecs" --queries "$dir/queries.fvecs" --gt "$dir/gt.ivecs" --k 10 --threads "$threads" --json)
    out="$dir/race.jsonl"
    : > "$out"
    note() { echo "# $(date -u +%FT%TZ) $* | load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out" >&2; }
    turn=0
    # Runs the two commands of one configuration, alternating which goes first.
    pair() {
        local a=$1 b=$2
        if (( turn % 2 == 1 )); then local t=$a; a=$b; b=$t; fi
        turn=$((turn + 1))
        note "$a"; eval "$a" | tee -a "$out"
        note "$b"; eval "$b" | tee -a "$out"
    }
    q() { printf '%q ' "$@"; }
    note "race start: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $threads threads, d = $d"
    pair "$(q "$bin" bench "${files[@]}" --index flat --precision f32)" \
         "$(q python3 "$here/faiss_compare.py" "${files[@]}" --index flat)"
    for nlist in $fs_nlists; do
        for m in $fs_ms; do
            pair "$(q "$bin" bench "${files[@]}" --index ivffastscan "${fs_store[@]}" --nlist "$nlist" --m "$m" --nprobe "$fs_nprobes" --rerank "$fs_reranks")" \
                 "$(q python3 "$here/faiss_compare.py" "${files[@]}" --index ivfpqfs --nlist "$nlist" --m "$m" --nprobe "$fs_nprobes" --rerank "$fs_reranks")"
            note "$bin bench --index ivffastscan --opq --nlist $nlist --m $m"
            "$bin" bench "${files[@]}" --index ivffastscan --opq "${opq_it[@]}" "${fs_store[@]}" --nlist "$nlist" --m "$m" \
                --nprobe "$fs_nprobes" --rerank "$fs_reranks" | tee -a "$out"
        done
    done
    # Settings no one chose on these queries: `dentate tune` on rows drawn
    # from the base (left out of its indexes), over the same fast-scan
    # grid, plain and with OPQ; its choice is then run on the race's
    # queries as its own labelled series.
    tune_target=${TUNE_TARGET:-0.95}
    for opq_flag in "" --opq; do
        tune_cmd=("$bin" tune --base "$dir/base.fvecs" --target-recall "$tune_target" --k 10 --threads "$threads"
            --nlist "${fs_nlists// /,}" --m "${fs_ms// /,}" --nprobe "$fs_nprobes" --rerank "$fs_reranks" --json $opq_flag)
        note "${tune_cmd[*]}"
        tuned=$("${tune_cmd[@]}" | tee -a "$out" | tail -1) || tuned=""
        chosen=$(python3 -c 'import json, sys
c = json.loads(sys.argv[1] or "{}").get("chosen")
print(" ".join(str(c[k]) for k in ("nlist", "m", "nprobe", "rerank")) if c else "")' "$tuned")
        if [[ -z "$chosen" ]]; then
            note "tune$opq_flag: no setting of the grid reached $tune_target on base rows"
            continue
        fi
        read -r t_nlist t_m t_nprobe t_rerank <<< "$chosen"
        note "$bin bench --index ivffastscan $opq_flag --nlist $t_nlist --m $t_m --nprobe $t_nprobe --rerank $t_rerank (tune's choice)"
        "$bin" bench "${files[@]}" --index ivffastscan $opq_flag --nlist "$t_nlist" --m "$t_m" \
            --nprobe "$t_nprobe" --rerank "$t_rerank" --label "tune $tune_target" | tee -a "$out"
    done
    pair "$(q "$bin" bench "${files[@]}" --index ivfpq --opq "${opq_it[@]}" --nlist "$pq_nlist" --m "$pq_m" --nprobe "$pq_nprobes" --rerank "$pq_reranks")" \
         "$(q python3 "$here/faiss_compare.py" "${files[@]}" --index ivfpq --opq --nlist "$pq_nlist" --m "$pq_m" --nprobe "$pq_nprobes" --rerank "$pq_reranks")"
    note "race end"
    "$bin" bench-report --results "$out" --svg "$svg" \
        --title "recall@10 vs QPS, $(basename "$dir"), $threads threads"
    exit 0
fi

dir=${1:?usage: benches/compare.sh DIR [nlist] [m] [nprobes] [threads] | --race DIR [threads] [svg]}
nlist=${2:-1024}
m=${3:-48}
nprobes=${4:-4,8,16,32,64}
threads=${5:-$(nproc)}
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
