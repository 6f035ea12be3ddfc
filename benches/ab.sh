#!/usr/bin/env bash
# Before/after race of two `dentate` builds on the same saved indexes: did a
# change (a restructuring, a refactor) move search speed?
#
#   benches/ab.sh BIN_A BIN_B DIR [ROUNDS] [THREADS]
#
# DIR holds base.fvecs, queries.fvecs and gt.ivecs (e.g. `dentate data
# synth --out DIR`); the indexes are built once, by BIN_B, into DIR/ab-*.dnt
# (the file format is the same for both builds, so both search the very
# same index and only the search code differs). Each round runs every case
# on both builds, alternating which goes first (A B, then B A, ...); each
# run is `dentate bench --load` (fastest of several passes over the
# queries, after a warm-up). Prints QPS per run and, per case and round,
# the ratio B / A; run it once with BIN_A as both builds to see this
# machine's noise band (A / A).
set -euo pipefail
a=${1:?usage: benches/ab.sh BIN_A BIN_B DIR [ROUNDS] [THREADS]}
b=${2:?usage}
dir=${3:?usage}
rounds=${4:-3}
threads=${5:-2}
base="$dir/base.fvecs" queries="$dir/queries.fvecs" gt="$dir/gt.ivecs"
# case name | build arguments | search arguments. AB_SET=race takes the
# fast-scan race's winning configurations instead (BENCHMARKS.md).
if [[ ${AB_SET:-} == race ]]; then
    cases=(
        "race-exact|--index flat --precision f16|"
        "race-fs-ivf256-m96-opq|--index ivffastscan --nlist 256 --m 96 --opq|--nprobe 16,32 --rerank 4"
        "race-fs-ivf1024-m192|--index ivffastscan --nlist 1024 --m 192|--nprobe 32 --rerank 4"
        "race-opq-ivfpq8-ivf1024-m48|--index ivfpq --nlist 1024 --m 48 --opq|--nprobe 32 --rerank 8"
    )
else
    cases=(
        "exact|--index flat --precision f16|"
        "fastscan-ivf256-m96|--index ivffastscan --nlist 256 --m 96|--nprobe 16,32 --rerank 4"
        "ivfpq8-ivf1024-m48|--index ivfpq --nlist 1024 --m 48|--nprobe 32 --rerank 8"
    )
fi
for c in "${cases[@]}"; do
    IFS='|' read -r name build _ <<<"$c"
    f="$dir/ab-$name.dnt"
    [[ -f $f ]] || "$b" index build --input "$base" --output "$f" $build >/dev/null
done
qps() { # bin case -> "nprobe:qps:recall ..." for each row
    local bin=$1 name=$2 search=$3
    "$bin" bench --base "$base" --queries "$queries" --gt "$gt" --load "$dir/ab-$name.dnt" \
        --threads "$threads" --json $search |
        python3 -c 'import json, sys; print(" ".join("%s:%s:%s" % (r["nprobe"], r["qps"], r["recall_at_k"]) for r in map(json.loads, sys.stdin)))'
}
echo "# $(lscpu | sed -n 's/^Model name: *//p' | head -1); $threads threads; A = $a; B = $b"
for ((r = 1; r <= rounds; r++)); do
    for c in "${cases[@]}"; do
        IFS='|' read -r name _ search <<<"$c"
        if ((r % 2)); then qa=$(qps "$a" "$name" "$search"); qb=$(qps "$b" "$name" "$search")
        else qb=$(qps "$b" "$name" "$search"); qa=$(qps "$a" "$name" "$search"); fi
        python3 - "$r" "$name" "$qa" "$qb" <<'PY'
import sys
r, name, qa, qb = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
for x, y in zip(qa, qb):
    p, a, ra = x.split(":"); _, b, rb = y.split(":")
    same = "same recall" if ra == rb else f"RECALL DIFFERS {ra} vs {rb}"
    print(f"round {r}  {name:<22} nprobe {p:>4}  A {float(a):>10.1f}  B {float(b):>10.1f}  B/A {float(b)/float(a):.3f}  ({same} {ra})")
PY
    done
done
