# A throwaway PostgreSQL cluster for the tests; source this file, then
#   pg_start   # sets DENTATE_TEST_POSTGRES (a superuser URL on loopback)
#   pg_stop
# The server binaries come from Debian's `postgresql` package
# (/usr/lib/postgresql/<version>/bin). Run as root, the cluster belongs to
# the `postgres` user the package creates (initdb refuses root); otherwise
# to the caller. Data lives in a temporary directory removed by pg_stop;
# fsync is off (the tests kill processes, never the machine).

pg_bin() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [[ -n $d && -x $d/initdb ]] || return 1
    echo "$d"
}

pg_start() {
    local bin port tries=0
    bin=$(pg_bin) || { echo "pg_start: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; return 1; }
    PG_DIR=$(mktemp -d /tmp/dentate-pg.XXXXXX)
    PG_AS=()
    if [[ $(id -u) == 0 ]]; then
        chown postgres: "$PG_DIR"
        PG_AS=(runuser -u postgres --)
    fi
    "${PG_AS[@]}" "$bin/initdb" -D "$PG_DIR/data" -A trust -U dentate -E UTF8 --no-sync >"$PG_DIR/initdb.log" 2>&1 ||
        { cat "$PG_DIR/initdb.log" >&2; return 1; }
    while :; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
        ((++tries < 50)) || { echo "pg_start: no free port" >&2; return 1; }
    done
    "${PG_AS[@]}" "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
        -o "-p $port -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >/dev/null ||
        { cat "$PG_DIR/server.log" >&2; return 1; }
    PG_BIN=$bin
    export DENTATE_TEST_POSTGRES="postgres://dentate@127.0.0.1:$port/postgres"
    echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($PG_DIR)"
}

pg_stop() {
    [[ -n ${PG_DIR:-} ]] || return 0
    "${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
    unset PG_DIR DENTATE_TEST_POSTGRES
}
