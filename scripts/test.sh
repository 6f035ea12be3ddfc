#!/usr/bin/env bash
# Runs every test of the workspace. This is the README's test command and
# what .ci/run calls; it installs whatever the tests need by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
# Unit, integration, property, CLI and documentation tests of every crate.
cargo test --workspace --all-targets
cargo test --workspace --doc
