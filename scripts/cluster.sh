#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the demo and the SQL suites, of the
# version MMV_PG names (15, the default, 16, 17 or 18).
#   cluster.sh install   build and install the extension into $PG_CONFIG's dirs
#   cluster.sh start     initdb (fresh) and start on $MMV_PORT, socket in $MMV_RUN
#   cluster.sh stop      stop it
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
data="$MMV_RUN/pgdata"

case "${1:-}" in
  install)
    (cd "$root" && cargo pgrx install --pg-config "$PG_CONFIG" $MMV_FEATURES ${PROFILE:+--profile "$PROFILE"}) ;;
  start)
    "$0" stop || true
    rm -rf "$data" "$MMV_SOCKET" "$MMV_RUN/postgres.log"
    mkdir -p "$MMV_SOCKET" && chmod 755 "$MMV_STATE" "$MMV_RUN"
    [ "$(id -u)" = 0 ] && chown postgres "$MMV_SOCKET" "$MMV_RUN"
    as_postgres "$PG_BIN/initdb" -D "$data" -A trust -U postgres --no-instructions >/dev/null
    # Without RUST_BACKTRACE: pgrx would append a Rust backtrace to the
    # DETAIL of errors raised through Rust frames (as in production, where
    # it is not set).
    as_postgres env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$PG_BIN/pg_ctl" -D "$data" -w -l "$MMV_RUN/postgres.log" \
      -o "-p $MMV_PORT -k $MMV_SOCKET -c listen_addresses=''" start >/dev/null
    echo "cluster: PostgreSQL $MMV_PG running on socket $MMV_SOCKET port $MMV_PORT (log $MMV_RUN/postgres.log)" ;;
  stop)
    [ -d "$data" ] && as_postgres "$PG_BIN/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true ;;
  *)
    echo "usage: [MMV_PG=15|16|17|18] $0 install|start|stop" >&2; exit 2 ;;
esac
