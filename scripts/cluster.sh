#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the demo and the SQL suites.
#   cluster.sh install   build and install the extension into $PG_CONFIG's dirs
#   cluster.sh start     initdb (fresh) and start on $MMV_PORT, socket in $MMV_STATE
#   cluster.sh stop      stop it
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
data="$MMV_STATE/pgdata"

case "${1:-}" in
  install)
    (cd "$root" && cargo pgrx install --pg-config "$PG_CONFIG" ${PROFILE:+--profile "$PROFILE"}) ;;
  start)
    "$0" stop || true
    rm -rf "$data" "$MMV_SOCKET" "$MMV_STATE/postgres.log"
    mkdir -p "$MMV_SOCKET" && chmod 755 "$MMV_STATE"
    [ "$(id -u)" = 0 ] && chown postgres "$MMV_SOCKET" "$MMV_STATE"
    as_postgres "$PG_BIN/initdb" -D "$data" -A trust -U postgres --no-instructions >/dev/null
    # Without RUST_BACKTRACE: pgrx would append a Rust backtrace to the
    # DETAIL of errors raised through Rust frames (as in production, where
    # it is not set).
    as_postgres env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$PG_BIN/pg_ctl" -D "$data" -w -l "$MMV_STATE/postgres.log" \
      -o "-p $MMV_PORT -k $MMV_SOCKET -c listen_addresses=''" start >/dev/null
    echo "cluster: running on socket $MMV_SOCKET port $MMV_PORT (log $MMV_STATE/postgres.log)" ;;
  stop)
    [ -d "$data" ] && as_postgres "$PG_BIN/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true ;;
  *)
    echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
