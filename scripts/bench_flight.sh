#!/usr/bin/env bash
# Benchmark of the FlightSQL service (not part of the tests), release build:
# a day of sample data materialized by the daemon, then
# scripts/bench_flight.py: a query over log_stats' partitions through
# FlightSQL ÷ DataFusion in process on the same files ÷ DuckDB on the same
# Parquet, in alternating rounds (MMV_BENCH_ROUNDS, 5), and a load run of
# MMV_BENCH_CLIENTS (4) clients for MMV_BENCH_SECONDS (60) on loopback.
#   MMV_BENCH_PROCESSES (10) and MMV_BENCH_RATE (20) size the sample.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/setup.sh" >/dev/null
source "$here/env.sh"
cd "$root"
py="$(lake_venv)"
# MMV_BENCH_BUILD=0 reuses the release binaries already built.
if [ "${MMV_BENCH_BUILD:-1}" = 1 ]; then
  cargo build --release -q -p micromegas_views_daemon -p micromegas_views_flight --bins --examples
fi
# Never install under a running cluster.
"$here/cluster.sh" stop
"$here/cluster.sh" install >/dev/null
"$here/cluster.sh" start >/dev/null
db=mmv_bench_flight
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -d "$db" -c "$MMV_INSTALL_SQL"
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$root/scripts/lake/views.sql" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d "$db" <<'SQL'
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mmv_bench_flight_admin') THEN
    CREATE ROLE mmv_bench_flight_admin NOLOGIN IN ROLE micromegas_admin;
    CREATE ROLE mmv_bench_flight_service LOGIN IN ROLE micromegas_service;
    GRANT mmv_bench_flight_admin TO mmv_bench_flight_service;
  END IF;
END $$;
SQL
dsn="host=$PGHOST port=$PGPORT user=postgres dbname=$db"
lake="$MMV_RUN/bench-flight-lake"
rm -rf "$lake"
release="$CARGO_TARGET_DIR/release"
"$release/micromegas-views-daemon" sample --lake "file://$lake" --begin 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z \
  --processes "${MMV_BENCH_PROCESSES:-10}" --rate "${MMV_BENCH_RATE:-20}" --seed 5 >/dev/null
"$release/micromegas-views-daemon" materialize --lake "file://$lake" --dsn "$dsn" \
  --begin 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z --view log_stats 2>/dev/null
key="bench-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "{\"keys\": [{\"name\": \"bench\", \"key\": \"$key\", \"role\": \"mmv_bench_flight_admin\"}]}" >"$MMV_RUN/bench-flight-keys.json"
"$release/micromegas-views-flight" --dsn "host=$PGHOST port=$PGPORT user=mmv_bench_flight_service dbname=$db" \
  --lake "file://$lake" --keys "$MMV_RUN/bench-flight-keys.json" --listen 127.0.0.1:0 \
  >"$MMV_RUN/bench-flight.out" 2>"$MMV_RUN/bench-flight.log" &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null; "$here/cluster.sh" stop >/dev/null' EXIT
address=""
for _ in $(seq 1 200); do
  address=$(sed -n 's/^micromegas-views-flight: listening on //p' "$MMV_RUN/bench-flight.out")
  [ -n "$address" ] && break
  sleep 0.05
done
[ -n "$address" ] || { echo "the service did not start: $(tail -3 "$MMV_RUN/bench-flight.log")"; exit 1; }
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, PostgreSQL $("$PG_CONFIG" --version | awk '{print $2}'), $(date -u +%F)"
"$py" "$here/bench_flight.py" "$release/examples/in_process" "$lake" "$dsn" "grpc://$address" "$key" \
  "${MMV_BENCH_ROUNDS:-5}" "${MMV_BENCH_CLIENTS:-4}" "${MMV_BENCH_SECONDS:-60}"
