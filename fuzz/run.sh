#!/usr/bin/env bash
# Runs the cargo-fuzz targets (README.md here) on the stable toolchain.
#
#   fuzz/run.sh SECONDS [TARGET...]
#
# Writes the seed corpora (the main workspace's tests/fuzz_regressions.rs
# generates them from code), builds every target once, then fuzzes each for
# SECONDS on one worker; exits non-zero at the first crash, whose input is
# left in fuzz/artifacts/<target>/. Corpora and artifacts are git-ignored.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-5}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(flat ivfpq fastscan lexical snapshot locomo jsonl llm_json)
DENTATE_FUZZ_SEEDS="$PWD/corpus" cargo test -q --manifest-path ../Cargo.toml --workspace --test fuzz_regressions \
    seeds_are_accepted_and_written_on_request >/dev/null
# `-s none`: no sanitizer, so no nightly-only flag; the coverage
# instrumentation (sancov) cargo-fuzz adds is stable.
# DENTATE_FUZZ_BUILD=dev (CI's smoke) builds without optimisations: about
# half the build time, slower executions; campaigns use the default release.
# How quiet a run ended: the edge count (`cov:`) and feature count (`ft:`)
# at the end, and at what share of the run's executions the last new edge
# and the last new feature were found (libFuzzer's `#N ... cov: C ft: F`
# lines). A run is quiet when its last new edge came early.
quiet() {
    awk '/^#[0-9]+/ && / cov: / {
            n = substr($1, 2) + 0
            for (i = 2; i < NF; i++) { if ($i == "cov:") c = $(i + 1) + 0; if ($i == "ft:") f = $(i + 1) + 0 }
            if (c > cov) { cov = c; at_cov = n }
            if (f > ft) { ft = f; at_ft = n }
            last = n
         }
         /number_of_executed_units:/ { last = $2 + 0 }
         END {
            if (last == 0) { print "no coverage lines"; exit }
            printf "edges %d (last new at %.1f%% of executions), features %d (last new at %.1f%%)", \
                cov, 100 * at_cov / last, ft, 100 * at_ft / last
         }' "$1"
}
mode=()
[[ ${DENTATE_FUZZ_BUILD:-release} == dev ]] && mode=(--dev)
cargo fuzz build -s none "${mode[@]}"
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t" logs
    # The text readers get a dictionary of their keys and value forms
    # (dicts/), which libFuzzer splices into inputs: far fewer executions
    # to reach the parser's branches than byte mutations alone.
    dict=()
    [[ -f dicts/$t.dict ]] && dict=(-dict="dicts/$t.dict")
    if ! cargo fuzz run -s none "${mode[@]}" "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 "${dict[@]}" \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"logs/$t.log" 2>&1; then
        tail -40 "logs/$t.log" >&2
        echo "fuzz target $t crashed: input in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    echo "$t: $(grep -m1 -o 'number_of_executed_units: [0-9]*' "logs/$t.log") in ${secs}s, corpus $(ls "corpus/$t" | wc -l), $(quiet "logs/$t.log")"
done
