#!/usr/bin/env bash
# Corrupted index files: Dentate beside FAISS, hnswlib and usearch (see
# benches/corrupt.py). Builds the CLI (release), makes a venv for the peers
# outside the tree (default ~/.cache/dentate/venv-peers; VENV overrides),
# and runs the tally.
#
#   benches/corrupt.sh [copies per file (default 200)] [extra corrupt.py args]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
copies=${1:-200}
shift || true
cargo build --release -q -p dentate-cli --manifest-path "$here/../Cargo.toml"
venv=${VENV:-$HOME/.cache/dentate/venv-peers}
if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q faiss-cpu hnswlib usearch numpy
fi
"$venv/bin/python" "$here/corrupt.py" --bin "$here/../target/release/dentate" --copies "$copies" "$@"
