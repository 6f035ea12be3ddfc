#!/usr/bin/env bash
# What a real model costs per pipeline: ingests one LoCoMo-format
# conversation with each pipeline through the local model server
# (scripts/llm.sh: llama-cpp-python + SmolLM2-135M-Instruct, temperature 0,
# seed 0) and prints, per pipeline, the model calls and tokens per 100
# messages, how its JSON answers turned out (valid at once / after the
# repair request / invalid) and the call latency.
#
#   benches/llm_cost.sh [FILE [SAMPLE [MESSAGES]]]
#
# FILE: a LoCoMo-format JSON file (default: the 30-message test fixture);
# SAMPLE: its sample id (default: the first); MESSAGES: keep only the first
# that many messages, whole sessions first (default: all). PIPELINES
# (default "hema nemori amory premem") picks the pipelines; OUT (default a
# temporary directory) keeps each pipeline's --llm-stats JSON.
# NO_BUILD=1 uses target/release/dentate as it is; BIN=PATH another
# dentate binary (the time is the model's: any profile measures the same).
set -euo pipefail
cd "$(dirname "$0")/.."
file=${1:-crates/dentate-memory/tests/fixtures/real_model_conversation.json}
sample=${2:-}
limit=${3:-0}
pipelines=${PIPELINES:-hema nemori amory premem}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/dentate}
[[ ${NO_BUILD:-} == 1 || -n ${BIN:-} ]] || cargo build -q --release -p dentate-cli

# The conversation, cut to its first $limit messages.
conv=$out/conversation.json
python3 - "$file" "$sample" "$limit" "$conv" <<'PY'
import json, re, sys
src, sample, limit, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = json.load(open(src))
data = data if isinstance(data, list) else [data]
conv = next(c for c in data if not sample or c["sample_id"] == sample)
c = conv["conversation"]
keys = sorted((k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
kept = 0
for k in keys:
    if limit and kept >= limit:
        del c[k]
        c.pop(k + "_date_time", None)
        continue
    if limit:
        c[k] = c[k][: limit - kept]
    kept += len(c[k])
conv["qa"] = []
json.dump([conv], open(dst, "w"))
print(f"{conv['sample_id']}: {kept} messages in {sum(1 for k in keys if k in c)} sessions", file=sys.stderr)
PY

source scripts/llm.sh
llm_start >&2
trap llm_stop EXIT

for p in $pipelines; do
    # Amory consolidates after every iteration (its "rapid" setting), so
    # that a short conversation pays for consolidation and semanticization.
    name=$p
    [[ $p == amory ]] && name=amory-rapid
    dir=$out/mem-$p
    rm -rf "$dir"
    t0=$(date +%s.%N)
    "$bin" memory ingest --dir "$dir" --user bench --pipeline "$name" --input "$conv" \
        --llm "$DENTATE_TEST_LLM" --model "$DENTATE_TEST_LLM_MODEL" --llm-seed 0 \
        --llm-stats "$out/$p.json" >"$out/$p.out" 2>"$out/$p.err" || {
        echo "$p: ingestion failed:" >&2
        tail -3 "$out/$p.err" >&2
        continue
    }
    t1=$(date +%s.%N)
    python3 -c "import json; d = json.load(open('$out/$p.json')); d['wall_s'] = $t1 - $t0; json.dump(d, open('$out/$p.json', 'w'))"
done

python3 - "$out" $pipelines <<'PY'
import json, os, sys
out, pipelines = sys.argv[1], sys.argv[2:]
print("| pipeline | messages | calls /100 msg | prompt tokens /100 msg | completion tokens /100 msg "
      "| JSON valid / repaired / invalid | p50 / p95 call (ms) | wall (s) | JSON asked as |")
print("|---|---|---|---|---|---|---|---|---|")
for p in pipelines:
    f = os.path.join(out, p + ".json")
    if not os.path.exists(f):
        print(f"| {p} | failed | | | | | | | |")
        continue
    d = json.load(open(f))
    h = d["per_100_messages"]
    print(f"| {p} | {d['messages']} | {h['calls']:.1f} | {h['prompt_tokens']:.0f} | {h['completion_tokens']:.0f} "
          f"| {d['json_first_valid']} / {d['json_repaired']} / {d['json_invalid']} "
          f"| {d['latency_p50_ms']:.0f} / {d['latency_p95_ms']:.0f} | {d['wall_s']:.0f} | {d['json_mode']} |")
print()
print("per role:")
for p in pipelines:
    f = os.path.join(out, p + ".json")
    if not os.path.exists(f):
        continue
    d = json.load(open(f))
    for role, r in sorted(d["per_role"].items()):
        print(f"  {p:7} {role:18} calls {r['calls']:4}  valid {r['json_first_valid']:3} repaired {r['json_repaired']:3} "
              f"invalid {r['json_invalid']:3}  prompt {r['prompt_tokens']:7} completion {r['completion_tokens']:6}  "
              f"p50 {r['latency_p50_ms']:6.0f} ms p95 {r['latency_p95_ms']:6.0f} ms")
PY
