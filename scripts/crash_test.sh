#!/usr/bin/env bash
# Crash safety: a backend killed with SIGKILL in the middle of a DDL statement
# leaves no partial definition, the catalog lock is free again, and committed
# work (and its catalog version, which is what services poll) survives the
# crash recovery. Needs a running cluster; it restarts every backend.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$@"; }
view() {
  echo "CREATE MATERIALIZED VIEW $1 WITH (extract_query = 'SELECT time, process_id FROM log_entries', count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''', merge_partitions_query = 'SELECT time, process_id FROM {source}', update_group = 4000, time_column = 'time')"
}
q postgres -c "DROP DATABASE IF EXISTS mmv_crash" -c "CREATE DATABASE mmv_crash" 2>/dev/null
q mmv_crash -c "$MMV_INSTALL_SQL"
q mmv_crash -c "SELECT status FROM micromegas.mm_create_view(\$\$$(view c_committed)\$\$)" >/dev/null
committed_version=$(q mmv_crash -c "SELECT micromegas.mm_catalog_version()")

# The DDL runs, then the same statement sleeps: the backend dies mid-statement.
q mmv_crash -c "SELECT micromegas.mm_create_view(\$\$$(view c_partial)\$\$), pg_sleep(60)" >/dev/null 2>&1 &
victim_shell=$!
pid=""
for _ in $(seq 1 100); do
  pid=$(q postgres -c "SELECT pid FROM pg_stat_activity WHERE datname = 'mmv_crash' AND query LIKE '%c_partial%' AND wait_event = 'PgSleep'" || true)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "crash test: the DDL never reached its sleep"; exit 1; }
kill -9 "$pid"
wait "$victim_shell" || true
# Crash recovery replays the WAL since the last checkpoint: on a loaded
# machine that can take a while. Wait up to two minutes, then fail loudly.
ready=""
for _ in $(seq 1 600); do
  if "$PG_BIN/pg_isready" -q -h "$PGHOST" -p "$PGPORT" && q mmv_crash -c "SELECT 1" >/dev/null 2>&1; then
    ready=yes; break
  fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "crash test: the cluster did not come back from crash recovery within 120 s"; exit 1; }

status=0
check() {
  local got
  got=$(q mmv_crash -c "$1")
  [ "$got" = "$2" ] || { echo "crash test: $1 gave '$got', expected '$2'"; status=1; }
}
check "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'c_partial'" 0
check "SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'c_committed'" 1
check "SELECT micromegas.mm_catalog_version()" "$committed_version"
check "SELECT count(*) FROM micromegas.mm_catalog_violations()" 0
# The catalog lock is free: the next DDL goes through.
check "SELECT status FROM micromegas.mm_create_view(\$\$$(view c_partial)\$\$)" created
check "SELECT micromegas.mm_catalog_version() > $committed_version" t
[ $status = 0 ] && echo "crash test: passed (backend $pid killed mid-statement)"
exit $status
