#!/usr/bin/env bash
# Fuzzes `dentate serve` against its own OpenAPI document with Schemathesis.
#
#   crates/dentate-serve/tests/schema/run.sh [DENTATE_BINARY]
#
# Starts the server on a temporary directory and port, seeds users with
# messages (so generated requests also reach existing data), then runs
# Schemathesis twice against http://ADDR/openapi.json:
#
#   1. keyless: no API key exists, so loopback clients need none (the
#      documented loopback mode). The document still declares bearer
#      security, so the auth-negative probes are left out here
#      (`ignored_auth`, and no Authorization header is generated: with
#      it, `missing_required_header` and `negative_data_rejection` would
#      count "no key, yet 200/400" as failures, which is this mode's
#      contract);
#   2. keyed: an admin key is created while the server runs; every
#      request carries it and `ignored_auth` is on (no key or a bad key
#      must be 401).
#
# Every other check runs (Schemathesis's default is all): not_a_server_error,
# status_code_conformance, content_type_conformance,
# response_schema_conformance, response_headers_conformance,
# positive_data_acceptance, negative_data_rejection, use_after_free,
# ensure_resource_availability, unsupported_method, ... except
# `use_after_free` on the reads that are documented to answer 200 after a
# DELETE (schemathesis.toml beside this script says which and why). Exit
# status is non-zero when either pass finds a failure.
#
# Environment:
#   DENTATE           the binary (default target/debug/dentate)
#   ST_MAX_EXAMPLES   test cases per operation and phase (default 100)
#   ST_WORKERS        concurrent workers (default 2; 1 on Python < 3.12,
#                     whose ast module is not thread-safe:
#                     "AST constructor recursion depth mismatch")
#   ST_CHECKS         only these checks (comma-separated; default all)
#   ST_EXCLUDE        checks to leave out of both passes (comma-separated),
#                     e.g. positive_data_acceptance while the document
#                     does not yet state the server's input limits
#   ST_SEED           a seed, to replay a run
#   ST_PYTHON         interpreter for the venv (default: python3.13,
#                     python3.12 or python3, the first that runs)
#   ST_VENV           the venv (default target/schemathesis-venv)
#   ST_ARGS           more arguments for `st run`
#   ST_KEEP           keep the server's directory and log (printed at the end)
# Reports (JUnit, NDJSON, HAR) go to target/schemathesis-report/.
set -euo pipefail

ST_VERSION=4.32.5

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
DENTATE="${1:-${DENTATE:-$root/target/debug/dentate}}"
case "$DENTATE" in /*) ;; *) DENTATE="$root/$DENTATE" ;; esac
if [ ! -x "$DENTATE" ]; then
  echo "no dentate binary at $DENTATE (cargo build -p dentate-cli)" >&2
  exit 2
fi
for tool in curl; do
  command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 2; }
done

t0=$(date +%s)

# --- Schemathesis in a venv under target/ ------------------------------------
venv="${ST_VENV:-$root/target/schemathesis-venv}"
if ! "$venv/bin/st" --version 2>/dev/null | grep -F "$ST_VERSION" >/dev/null; then
  py="${ST_PYTHON:-}"
  if [ -z "$py" ]; then
    for cand in python3.13 python3.12 python3; do
      if "$cand" -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null; then
        py="$cand"
        break
      fi
    done
  fi
  [ -n "$py" ] || { echo "no Python 3.9+ found (set ST_PYTHON)" >&2; exit 2; }
  echo "== creating $venv with $("$py" --version 2>&1), schemathesis==$ST_VERSION"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION"
fi
st="$venv/bin/st"
pyver=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -z "${ST_WORKERS:-}" ]; then
  if "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    ST_WORKERS=2
  else
    ST_WORKERS=1
  fi
fi
echo "== $("$st" --version) on Python $pyver, $ST_WORKERS worker(s), ${ST_MAX_EXAMPLES:-100} examples per operation"

# --- the server -------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/dentate-schema.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [ -n "${ST_KEEP:-}" ]; then
    echo "== kept $work (server log: serve.log, data: data/)"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

"$DENTATE" serve --dir "$work/data" --bind 127.0.0.1:0 2>"$work/serve.log" &
server_pid=$!
addr=""
for _ in $(seq 1 300); do
  addr=$(sed -n 's#^dentate serve: http://\([^ ]*\).*#\1#p' "$work/serve.log" | head -n 1)
  [ -n "$addr" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; echo "dentate serve exited" >&2; exit 1; }
  sleep 0.2
done
[ -n "$addr" ] || { cat "$work/serve.log" >&2; echo "dentate serve printed no address" >&2; exit 1; }
base="http://$addr"
echo "== dentate serve at $base"

# curl with the current key, if any; fails on HTTP errors.
auth=()
api() {
  curl -sS --fail-with-body --max-time 60 "${auth[@]}" -H 'Content-Type: application/json' "$@"
}

wait_job() { # JSON of an append → waits for its job
  local job
  job=$(sed -n 's/.*"job_id":\([0-9]*\).*/\1/p' <<<"$1")
  [ -n "$job" ] || return 0
  for _ in $(seq 1 150); do
    if api "$base/v1/jobs/$job" | grep '"state":"\(done\|failed\)"' >/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "job $job did not finish" >&2
  return 1
}

seed() {
  local r
  r=$(api -X POST "$base/v1/users/alice/messages" -d '{"messages": [
    {"content": "Alice is allergic to peanuts", "role": "user", "session": "s1", "timestamp": "2024-03-01T14:00:00Z", "id": "m1"},
    {"content": "Noted: no peanuts for Alice.", "role": "assistant", "session": "s1", "timestamp": "2024-03-01T14:00:05Z"},
    {"content": "I moved to Lisbon last spring", "role": "user", "session": "s2", "timestamp": "2024-04-02"}]}')
  wait_job "$r"
  r=$(api -X POST "$base/v1/users/bob/messages" -d '{"messages": [
    {"content": "Bob plays the cello every Sunday", "role": "user"},
    {"content": "Bob is training for the Berlin marathon", "role": "user", "timestamp": "1:56 pm on 8 May, 2023"}]}')
  wait_job "$r"
  api -X POST "$base/mem0/memories" -d '{"messages": [{"role": "user", "content": "Carol prefers tea to coffee"}], "user_id": "carol"}' >/dev/null
  api -X POST "$base/v1/users" -d '{"user_id": "dave"}' >/dev/null
  api "$base/v1/users" >/dev/null
  api -X POST "$base/v1/users/alice/search" -d '{"query": "allergies", "k": 3}' | grep peanuts >/dev/null \
    || { echo "seeded data is not searchable" >&2; return 1; }
}

echo "== seeding (keyless)"
seed

reports="$root/target/schemathesis-report"
mkdir -p "$reports"

st_run() { # name, extra args...
  local name="$1"
  shift
  local args=(
    --config-file "$here/schemathesis.toml"
    run "$base/openapi.json"
    --max-examples "${ST_MAX_EXAMPLES:-100}"
    --workers "$ST_WORKERS"
    --continue-on-failure
    --request-timeout 40
    --exclude-path-regex '^/mcp'
    --generation-database none
    --report junit,ndjson,har
    --report-junit-path "$reports/$name.junit.xml"
    --report-ndjson-path "$reports/$name.ndjson"
    --report-har-path "$reports/$name.har"
    --no-color
  )
  [ -n "${ST_CHECKS:-}" ] && args+=(--checks "$ST_CHECKS")
  [ -n "${ST_SEED:-}" ] && args+=(--seed "$ST_SEED")
  # shellcheck disable=SC2206
  [ -n "${ST_ARGS:-}" ] && args+=($ST_ARGS)
  args+=("$@")
  local t=$(date +%s) rc=0
  echo "== pass '$name': st ${args[*]//Bearer [^ ]*/Bearer KEY}"
  (cd "$work" && "$st" "${args[@]}") || rc=$?
  echo "== pass '$name': exit $rc in $(($(date +%s) - t)) s"
  return $rc
}

fail=0

# Pass 1: keyless loopback mode. No key exists, so the server serves
# loopback clients as tenant `default` and never answers 401; the
# document's bearer requirement describes the keyed mode.
st_run keyless \
  --exclude-checks "ignored_auth${ST_EXCLUDE:+,$ST_EXCLUDE}" \
  --generation-with-security-parameters false \
  || fail=1

# Pass 2: with an admin key (every operation allowed), made through the
# CLI while the server runs; from now on every request needs a key.
key=$("$DENTATE" keys create --dir "$work/data" --tenant fuzz --role admin 2>/dev/null | tail -n 1)
[ -n "$key" ] || { echo "keys create printed no key" >&2; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/users")
[ "$code" = 401 ] || { echo "keys exist but a keyless request got $code, not 401" >&2; exit 1; }
auth=(-H "Authorization: Bearer $key")
echo "== seeding (tenant fuzz, with the key)"
seed
keyed_args=(-H "Authorization: Bearer $key")
[ -n "${ST_EXCLUDE:-}" ] && keyed_args+=(--exclude-checks "$ST_EXCLUDE")
st_run keyed "${keyed_args[@]}" || fail=1

echo "== schemathesis: $([ $fail = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - t0)) s (reports in $reports)"
if grep -qE '^\[[^ ]+ (ERROR|WARN) ' "$work/serve.log"; then
  echo "== the server logged errors or warnings (first 20):"
  grep -m 20 -E '^\[[^ ]+ (ERROR|WARN) ' "$work/serve.log" || true
fi
exit $fail
