#!/usr/bin/env bash
# Drives dentate's MCP server (stdio and streamable HTTP) with the official
# MCP TypeScript SDK client. Usage, from anywhere:
#   crates/dentate-serve/tests/mcp/run.sh [DENTATE_BINARY]
# DENTATE (or the first argument) names the binary; default
# target/debug/dentate under the repository root (build it with
# `cargo build -p dentate-cli`). Needs node >= 18 and npm.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
DENTATE="${1:-${DENTATE:-$root/target/debug/dentate}}"
case "$DENTATE" in /*) ;; *) DENTATE="$root/$DENTATE" ;; esac
if [ ! -x "$DENTATE" ]; then
  echo "no dentate binary at $DENTATE (cargo build -p dentate-cli)" >&2
  exit 2
fi
cd "$here"
if [ ! -d node_modules/@modelcontextprotocol/sdk ]; then
  npm ci --silent --no-audit --no-fund
fi
exec node client.mjs "$DENTATE"
