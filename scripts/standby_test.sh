#!/usr/bin/env bash
# A hot standby of the test cluster (pg_basebackup -R over the socket, same
# machine, its own port and socket), on the version MMV_PG names:
#   1. on the primary, a catalog with something of every kind;
#   2. every reader function gives the same answers on the primary and on
#      the standby (one expected file for both), mm_explain_view included;
#   3. every write on the standby fails with 25006 and says so;
#   4. the client (client/tests/standby.rs): the Watcher with its default
#      configuration follows the primary from the standby by polling, a
#      JobWorker waits there; then `pg_ctl promote`: writes work, the
#      Watcher gets notifications, the JobWorker claims, and
#      mm_catalog_version() continues.
# Expects the cluster of scripts/cluster.sh running.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
db=mmv_standby
standby="$MMV_RUN/standby"
standby_port=$((MMV_PORT + 100))
standby_socket="$MMV_RUN/standby-socket"
out="$MMV_RUN/results/standby"
status=0

trap 'stop_standby "$standby"' EXIT
stop_standby "$standby"
rm -rf "$standby" "$standby_socket" "$out"
mkdir -p "$out" && chmod 777 "$out"

psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -d "$db" -c "$MMV_INSTALL_SQL"
suite="$MMV_RUN/standby-suite"
rm -rf "$suite" && cp -r "$root/sql-tests/standby" "$suite" && chmod -R a+rX "$suite"
# One pg_regress run: against the primary or the standby, into its own
# output directory.
regress() {
  local where="$1" host="$2" port="$3"; shift 3
  (cd "$suite" && as_postgres "$PGXS_DIR/src/test/regress/pg_regress" --bindir="$PG_BIN" \
    --inputdir=. --outputdir="$out/$where" --use-existing \
    --host="$host" --port="$port" --user=postgres --dbname="$db" "$@")
}
regress setup "$PGHOST" "$PGPORT" standby_setup || status=1

echo "standby: pg_basebackup -R of the cluster, started on port $standby_port"
start_standby "$standby" "$standby_port" "$standby_socket" mmv_standby
# Streaming, and caught up with a write made after the clone.
psql -X -q -d "$db" -c "SELECT pg_switch_wal()" >/dev/null
primary_lsn=$(psql -X -At -d "$db" -c "SELECT pg_current_wal_lsn()")
caught_up=f
for _ in $(seq 1 200); do
  caught_up=$(psql -X -At -h "$standby_socket" -p "$standby_port" -d "$db" \
    -c "SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= '$primary_lsn'
               AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')")
  [ "$caught_up" = t ] && break
  sleep 0.1
done
[ "$caught_up" = t ] || { echo "standby: not streaming from the primary"; tail -5 "$standby/postgres.log"; exit 1; }

echo "standby: the reader functions, on the primary then on the standby (one expected output)"
regress primary "$PGHOST" "$PGPORT" standby_reads || status=1
regress standby "$standby_socket" "$standby_port" standby_reads || status=1
echo "standby: every write refused on the standby"
regress standby-writes "$standby_socket" "$standby_port" standby_writes || status=1

echo "standby: the client's Watcher and JobWorker, then a promotion"
MMV_PRIMARY_DSN="host=$PGHOST port=$PGPORT user=postgres dbname=$db" \
MMV_STANDBY_DSN="host=$standby_socket port=$standby_port user=postgres dbname=$db" \
MMV_PROMOTE="$(command -v sudo >/dev/null && [ "$(id -u)" = 0 ] && echo "sudo -u postgres ")$PG_BIN/pg_ctl -D $standby/data -w promote" \
  cargo test -p micromegas_views_client --features integration --test standby -- --ignored --nocapture \
  || status=1

if grep -E "terminated by signal|was terminated by exception" "$standby/postgres.log"; then
  echo "standby: a backend crashed"; status=1
fi
for d in "$out"/*; do
  [ -f "$d/regression.diffs" ] && cat "$d/regression.diffs"
done
[ $status -eq 0 ] && echo "standby: passed"
exit $status
