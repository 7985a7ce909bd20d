#!/usr/bin/env bash
# The FlightSQL service on the running cluster, with clients nobody here
# wrote (ADBC's FlightSQL driver and pyarrow.flight) and DuckDB as the
# oracle (scripts/flight/test_flight.py): keys with claims, an admin's DDL
# through FlightSQL, the daemon materializing it, readers seeing exactly the
# rows of their audiences under every query shape, the deny list refusing a
# query by its hash and recording the hit, a non-admin's DDL and admin
# functions refused, the metadata calls, a replace queryable within a
# second, limits on what a query may use, and a service reading its catalog
# from a hot standby of the cluster while it writes to the primary.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
root="$(cd "$here/.." && pwd)"
work="$MMV_RUN/flight"
rm -rf "$work" && mkdir -p "$work"

py="$(lake_venv)"

(cd "$root" && cargo build --quiet -p micromegas_views_daemon -p micromegas_views_flight)
daemon="$CARGO_TARGET_DIR/debug/micromegas-views-daemon"
flight="$CARGO_TARGET_DIR/debug/micromegas-views-flight"

db=mmv_flight
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -d "$db" -c "$MMV_INSTALL_SQL"
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" "$@"; }
# The service's login role is a service member and may SET ROLE to each
# key's role.
q <<'SQL'
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mmv_fl_admin') THEN
    CREATE ROLE mmv_fl_admin NOLOGIN IN ROLE micromegas_admin;
    CREATE ROLE mmv_fl_reader NOLOGIN IN ROLE micromegas_reader;
    CREATE ROLE mmv_fl_service LOGIN IN ROLE micromegas_service;
    GRANT mmv_fl_admin, mmv_fl_reader TO mmv_fl_service;
  END IF;
END $$;
SELECT FROM micromegas.mm_grant_audience('team-a', 'read', 'group:team-a');
SQL

lake="$work/lake"
begin=2026-12-01T00:00:00Z
end=2026-12-02T00:00:00Z
"$daemon" sample --lake "file://$lake" --begin "$begin" --end "$end" --processes 6 --rate 6 --seed 11
q -f "$root/scripts/lake/views.sql" >/dev/null

admin_key="admin-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
alice_key="alice-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
bob_key="bob-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cat >"$work/keys.json" <<JSON
{"keys": [
  {"name": "ops", "key": "$admin_key", "role": "mmv_fl_admin", "claims": {"user_id": "ops", "admin": true}},
  {"name": "alice-notebook", "key": "$alice_key", "role": "mmv_fl_reader",
   "claims": {"user_id": "alice", "email": "alice@example.com", "groups": ["team-a"]}},
  {"name": "bob-dashboard", "key": "$bob_key", "role": "mmv_fl_reader", "claims": {"user_id": "bob"}}
]}
JSON
chmod 600 "$work/keys.json"

# start_server NAME ARGS...: a service on a free loopback port, its address
# in $address, its log in $work/NAME.log.
servers=()
# Each is asked to stop (SIGINT: a graceful shutdown), and killed if it has
# not within ten seconds.
stop_servers() {
  local pid
  for pid in "${servers[@]}"; do kill -INT "$pid" 2>/dev/null; done
  for pid in "${servers[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null && echo "flight: the service $pid did not stop on SIGINT within 10 s"
  done
  return 0
}
trap 'stop_servers; stop_standby "$work/standby"' EXIT
start_server() {
  local name=$1; shift
  "$flight" --dsn "host=$PGHOST port=$PGPORT user=mmv_fl_service dbname=$db" --lake "file://$lake" \
    --keys "$work/keys.json" --listen 127.0.0.1:0 "$@" >"$work/$name.out" 2>"$work/$name.log" &
  local pid=$!
  servers+=("$pid")
  server_pid=$pid
  address=""
  for _ in $(seq 1 200); do
    [ -f "$work/$name.out" ] && address=$(sed -n 's/^micromegas-views-flight: listening on //p' "$work/$name.out")
    [ -n "$address" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$address" ]; then
    echo "flight: the service did not start: $(tail -5 "$work/$name.log")"
    exit 1
  fi
  echo "flight: micromegas-views-flight ($name) listening on $address"
}
start_server flight
main_address=$address
# One query at a time, for four seconds, in 64 MB: a query stopped at its
# deadline must give its slot back within moments, not when its work would
# end.
start_server short --query-timeout-seconds 4 --max-concurrent-queries 1 --query-memory-mb 64
short_address=$address
short_pid=$server_pid
# 64 MB per query, with the default deadline: what a query holds is
# counted, and the service's peak memory is read from the kernel.
start_server small --query-memory-mb 64
small_address=$address
small_pid=$server_pid

# A hot standby of this cluster (pg_basebackup -R, its own port and socket)
# for a service that reads its catalog there (--catalog-dsn) and writes to
# the primary; it polls the standby every second (a standby delivers no
# NOTIFY).
standby_port=$((PGPORT + 200))
standby_socket="$work/standby-socket"
start_standby "$work/standby" "$standby_port" "$standby_socket" mmv_flight_standby
MICROMEGAS_VIEW_DEFINITION_REFRESH_SECONDS=1 start_server on_standby \
  --catalog-dsn "host=$standby_socket port=$standby_port user=mmv_fl_service dbname=$db"
standby_address=$address

status=0
FLIGHT="grpc://$main_address" FLIGHT_SHORT="grpc://$short_address" FLIGHT_SHORT_PID="$short_pid" FLIGHT_SMALL="grpc://$small_address" FLIGHT_SMALL_PID="$small_pid" FLIGHT_STANDBY="grpc://$standby_address" DAEMON="$daemon" LAKE="$lake" DB="$db" BEGIN="$begin" END="$end" \
  DSN="host=$PGHOST port=$PGPORT user=postgres dbname=$db" \
  ADMIN_KEY="$admin_key" ALICE_KEY="$alice_key" BOB_KEY="$bob_key" \
  "$py" "$here/flight/test_flight.py" || status=1

# No secret in the service's log.
if grep -q -e "$admin_key" -e "$alice_key" -e "$bob_key" "$work/flight.log" "$work/short.log" "$work/small.log" "$work/on_standby.log"; then
  echo "flight: FAILED: a key appears in the service's log"; status=1
fi
exit $status
