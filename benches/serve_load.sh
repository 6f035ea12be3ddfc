#!/usr/bin/env bash
# Load benchmark of the memory service (`dentate serve`), in one command:
#
#   benches/serve_load.sh [hash|minilm]
#
# Builds release, starts the server on a temporary directory and a free
# loopback port, populates USERS x MESSAGES synthetic conversation messages
# (crates/dentate-serve/examples/load.rs), measures saturation throughput
# (closed loop: SAT_CONNS connections for SAT_SECS s, 90 % search / 10 %
# append), then runs an open loop at OPEN_FRACTION of it for OPEN_SECS s
# (fixed timetable, latency from each request's due time: no coordinated
# omission), checks that no acknowledged message was lost, stops the server
# (SIGTERM) and runs the same searches in-process through the library, for
# the service's overhead. Ends with a markdown table.
#
# Environment (defaults): USERS=100 MESSAGES=2000 BATCH=200 SAT_CONNS=16
# SAT_SECS=20 OPEN_SECS=30 OPEN_FRACTION=0.8 OPEN_CONNS=32 WARMUP=3
# INPROC_QUERIES=20000 SLOTS= (server default: one per core) KEEP=1 keeps
# the temporary directory, NO_BUILD=1 uses the binaries already built, BIN and
# LOAD name other binaries (another build, to compare). STORE=postgres://…
# puts the store in that (empty) PostgreSQL database and SERVERS=N starts N
# servers on it (each with its own index cache directory), the load spread
# over them by connection; the in-process comparison is then skipped (it
# reads a SQLite store). Needs curl and python3.
#
# The load generator runs on the same machine as the server and shares its
# cores: on a small machine the figures are a lower bound of the server's.
set -euo pipefail
embedder=${1:-hash}
case $embedder in hash | minilm) ;; *)
    echo "usage: benches/serve_load.sh [hash|minilm]" >&2
    exit 2
    ;;
esac
USERS=${USERS:-100} MESSAGES=${MESSAGES:-2000} BATCH=${BATCH:-200}
SAT_CONNS=${SAT_CONNS:-16} SAT_SECS=${SAT_SECS:-20}
OPEN_SECS=${OPEN_SECS:-30} OPEN_FRACTION=${OPEN_FRACTION:-0.8} OPEN_CONNS=${OPEN_CONNS:-32}
WARMUP=${WARMUP:-3} INPROC_QUERIES=${INPROC_QUERIES:-20000}
# Leftovers of other benchmarks' BLAS tuning must not skew these numbers.
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Two builds, not one: built together, the example's dev-dependencies would
# change the features of the CLI's dependencies and rebuild it.
if [[ ${NO_BUILD:-} != 1 ]]; then
    cargo build --release -p dentate-cli
    cargo build --release -p dentate-serve --example load
fi
bin=${BIN:-$root/target/release/dentate}
load=${LOAD:-$root/target/release/examples/load}

work=$(mktemp -d "${TMPDIR:-/tmp}/dentate-serve-load.XXXXXX")
servers=()
cleanup() {
    for pid in "${servers[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    if [[ ${KEEP:-} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
simd=$("$bin" info | grep -m1 'SIMD path in use' | sed 's/ *(override.*//; s/  */ /g' || true)
SERVERS=${SERVERS:-1}
store_desc="SQLite in the work dir"
[[ -n ${STORE:-} ]] && store_desc="PostgreSQL (${STORE%%\?*}), $SERVERS server(s)"
((SERVERS == 1)) || [[ -n ${STORE:-} ]] || { echo "SERVERS > 1 needs STORE=postgres://…" >&2; exit 2; }
echo "== machine: ${cpu:-unknown CPU}, $(nproc) cores; $simd"
echo "== the load generator shares these $(nproc) cores with the server(s)"
echo "== embedder $embedder; $USERS users x $MESSAGES messages; store $store_desc; work dir $work"

servers=()
urls=()
for i in $(seq 1 "$SERVERS"); do
    port=$(free_port)
    dir=$work/mem
    ((SERVERS == 1)) || dir=$work/cache$i
    "$bin" serve --dir "$dir" ${STORE:+--store "$STORE"} --bind "127.0.0.1:$port" --embedder "$embedder" \
        ${SLOTS:+--slots "$SLOTS"} >"$work/server$i.log" 2>&1 &
    servers+=($!)
    urls+=("http://127.0.0.1:$port")
    for _ in $(seq 1 600); do
        curl -sf "${urls[-1]}/v1/health" >/dev/null 2>&1 && break
        kill -0 "${servers[-1]}" 2>/dev/null || {
            cat "$work/server$i.log" >&2
            exit 1
        }
        sleep 0.1
    done
    curl -sf "${urls[-1]}/v1/health" && echo
done
url=${urls[0]}
all_urls=$(IFS=,; echo "${urls[*]}")

json() { grep '^JSON ' | tail -1 | sed 's/^JSON //'; }

"$load" populate --url "$url" --users "$USERS" --messages "$MESSAGES" --batch "$BATCH" | tee "$work/populate.txt"
"$load" run --url "$all_urls" --users "$USERS" --seconds "$SAT_SECS" --warmup "$WARMUP" --connections "$SAT_CONNS" \
    --label saturation | tee "$work/closed.txt"
sat=$(json <"$work/closed.txt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["throughput"])')
rate=$(python3 -c "print(round($sat * $OPEN_FRACTION, 1))")
echo "== saturation $sat requests/s; open loop at $rate requests/s"
"$load" run --url "$all_urls" --users "$USERS" --seconds "$OPEN_SECS" --warmup "$WARMUP" --connections "$OPEN_CONNS" \
    --rate "$rate" --label open | tee "$work/open.txt"

for i in "${!servers[@]}"; do
    kill -TERM "${servers[$i]}"
    wait "${servers[$i]}" || true
    echo "== server $((i + 1)) stopped; its log:"
    tail -5 "$work/server$((i + 1)).log"
done
servers=()

if [[ -z ${STORE:-} ]]; then
    "$load" inproc --dir "$work/mem" --users "$USERS" --queries "$INPROC_QUERIES" --embedder "$embedder" |
        tee "$work/inproc.txt"
fi

echo
echo "== summary ($embedder; store $store_desc; ${cpu:-unknown CPU}, $(nproc) cores, $simd; load generator on the same cores)"
python3 - "$work" "$embedder" "$OPEN_FRACTION" <<'EOF'
import json, sys
work, emb, frac = sys.argv[1], sys.argv[2], float(sys.argv[3])
def last(name):
    lines = [l[5:] for l in open(f"{work}/{name}.txt") if l.startswith("JSON ")]
    return json.loads(lines[-1])
import os
p, c, o = last("populate"), last("closed"), last("open")
i = last("inproc") if os.path.exists(f"{work}/inproc.txt") else None
print(f"Populate: {p['stored']} messages ({p['users']} users x {p['messages_per_user']}, batches of {p['batch']}): "
      f"accepted {p['accepted_per_s']:.0f} msg/s, ingested end to end {p['ingested_per_s']:.0f} msg/s "
      f"({p['total_secs']} s, {p['failed_jobs']} failed jobs)")
print()
print("| run | embedder | req/s | op | count | ops/s | p50 ms | p90 ms | p99 ms | max ms | errors | lost msgs |")
print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, r in ((f"closed, {c['connections']} conns (saturation)", c),
                (f"open at {frac:.0%} of saturation, {o['connections']} conns", o)):
    for op in ("search", "append"):
        s = r[op]
        print(f"| {name} | {emb} | {r['throughput']:.0f} | {op} | {s['count']} | {s['throughput']:.0f} | "
              f"{s['p50_ms']:.2f} | {s['p90_ms']:.2f} | {s['p99_ms']:.2f} | {s['max_ms']:.2f} | {s['errors']} | "
              f"{r['lost_messages'] + r['count_mismatches']} |")
for name, s in ((("in-process, 1 thread", i["single"]), (f"in-process, {i['threads']} threads", i["multi"])) if i else ()):
    print(f"| {name} | {emb} | {s['throughput']:.0f} | search | {s['count']} | {s['throughput']:.0f} | "
          f"{s['p50_ms']:.2f} | {s['p90_ms']:.2f} | {s['p99_ms']:.2f} | {s['max_ms']:.2f} | {s['errors']} | - |")
print()
if i:
    ratio = c["search"]["throughput"] / i["multi"]["throughput"] if i["multi"]["throughput"] else 0
    print(f"Service overhead: saturated search throughput over HTTP = {ratio:.2f} x in-process ({i['threads']} threads; "
          f"the HTTP run also serves {c['append']['throughput']:.0f} appends/s and their ingestion); "
          f"open-loop search p50 {o['search']['p50_ms']:.2f} ms vs in-process p50 {i['single']['p50_ms']:.2f} ms.")
ok = (o["search"]["p99_ms"] < 10 and o["search"]["errors"] == 0 and o["append"]["errors"] == 0
      and c["search"]["errors"] == 0 and c["append"]["errors"] == 0
      and o["lost_messages"] == 0 and c["lost_messages"] == 0
      and o["count_mismatches"] == 0 and c["count_mismatches"] == 0)
print(f"Target (p99 search < 10 ms at {frac:.0%} of saturation, zero errors, zero lost messages): "
      f"{'MET' if ok else 'NOT MET'} (open-loop search p99 {o['search']['p99_ms']:.2f} ms)")
EOF
