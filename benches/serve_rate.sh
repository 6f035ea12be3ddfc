#!/usr/bin/env bash
# The memory service at one fixed request rate, for comparing builds at
# equal offered load (benches/serve_load.sh runs each build at 80 % of its
# own saturation, which moves with the build and with the machine's noise):
#
#   BIN=path/to/dentate benches/serve_rate.sh [RATE]
#
# Starts the server (hashing embedder, its defaults) on a temporary
# directory, populates USERS x MESSAGES synthetic messages, runs the load
# generator's open loop at RATE requests/s (default 1550; 90 % search,
# 10 % append, 32 connections, SECS s, latency from each request's due
# time), and prints the client-side figures and the server's own latency
# histograms over that window (from /metrics: requests slower than each
# bucket bound). Environment: USERS=100 MESSAGES=2000 SECS=30 SLOTS=
# LOAD=target/release/examples/load (build it with `cargo build --release
# -p dentate-serve --example load`).
set -euo pipefail
rate=${1:-1550}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/target/release/dentate}
load=${LOAD:-$root/target/release/examples/load}
USERS=${USERS:-100} MESSAGES=${MESSAGES:-2000} SECS=${SECS:-30}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
work=$(mktemp -d "${TMPDIR:-/tmp}/dentate-serve-rate.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
"$bin" serve --dir "$work/mem" --bind "127.0.0.1:$port" --embedder hash ${SLOTS:+--slots "$SLOTS"} >"$work/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 600); do
    curl -sf "$url/v1/health" >/dev/null 2>&1 && break
    sleep 0.1
done
"$load" populate --url "$url" --users "$USERS" --messages "$MESSAGES" --batch 200 | grep -v '^JSON'
sleep 2
curl -sf "$url/metrics" >"$work/m0.txt"
"$load" run --url "$url" --users "$USERS" --seconds "$SECS" --warmup 1 --connections 32 --rate "$rate" \
    --label open | grep -v '^JSON'
curl -sf "$url/metrics" >"$work/m1.txt"
python3 - "$work" <<'EOF'
import re, sys
def load(f):
    d = {}
    for l in open(f):
        m = re.match(r'(dentate_\w+)_bucket\{(.*)le="([^"]+)"\} (\d+)', l)
        if m:
            d[(m.group(1), m.group(2).rstrip(','), m.group(3))] = int(m.group(4))
    return d
a, b = load(f"{sys.argv[1]}/m0.txt"), load(f"{sys.argv[1]}/m1.txt")
rows = {}
for k, v in b.items():
    rows.setdefault(k[:2], []).append((k[2], v - a.get(k, 0)))
print("server side, this window: count, then how many took longer than each bound (s)")
for (name, labels), vals in sorted(rows.items()):
    if not ("search" in labels or "messages" in labels or "ingest" in name):
        continue
    total = dict(vals)["+Inf"]
    if total:
        print(f"  {name}{{{labels}}} n={total} " + " ".join(f">{le}:{total - v}" for le, v in vals if le != "+Inf"))
EOF
