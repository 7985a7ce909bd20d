#!/usr/bin/env bash
# Sets up, builds, installs the extension into a throwaway cluster it starts
# itself, and runs a short demo: create, list, replace, drop, with a listener
# printing the notifications; then the life of a view from a CREATE that asks
# for its first materialization to the job done by a worker (the client
# crate's example), its history and a restore, and its partitions; then data
# flowing: a sample lake, a view, micromegas-views-daemon materializing it
# from the queue, and a query over its partitions. The cluster is stopped at
# the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/setup.sh"
source "$here/env.sh"
"$here/cluster.sh" install
"$here/cluster.sh" start
trap '"$here/cluster.sh" stop' EXIT
psql -q -X -d postgres -c "$MMV_INSTALL_SQL"

# A listener in the background prints every notification it receives.
listener_out="$MMV_RUN/listener.out"
( { echo "LISTEN micromegas_view_definitions;"; sleep 4; echo "SELECT 1;"; } |
    psql -X -d postgres -q -A -t >"$listener_out" 2>&1 ) &
listener=$!
sleep 0.5

run() { echo; echo "postgres=# $1"; psql -X -d postgres -c "$1"; }
run "SELECT view_set_name, update_group, updated_by FROM micromegas.list_view_set_definitions();"
run "SELECT * FROM micromegas.mm_create_view(\$\$
CREATE MATERIALIZED VIEW error_rate WITH (
  extract_query = \$q\$
    SELECT date_bin('1 hour', time) AS time_bin, process_id,
           sum(CASE WHEN level <= 2 THEN 1 ELSE 0 END) AS errors, count(*) AS total
      FROM log_entries
     WHERE insert_time >= '{begin}' AND insert_time < '{end}'
     GROUP BY 1, 2 \$q\$,
  count_src_query = \$q\$
    SELECT sum(nb_objects) AS count FROM blocks
     WHERE insert_time >= '{begin}' AND insert_time < '{end}' \$q\$,
  merge_partitions_query = \$q\$
    SELECT time_bin, process_id, sum(errors) AS errors, sum(total) AS total
      FROM {source} GROUP BY 1, 2 \$q\$,
  update_group = 3000,
  time_column = 'time_bin',
  merge_sort_order = 'time_bin, process_id'
)\$\$);"
run "SELECT * FROM micromegas.mm_create_view(\$\$
CREATE MATERIALIZED VIEW broken WITH (
  extract_query = 'SELECT now() AS time_bin, process_id FROM log_entries',
  count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT time_bin, process_id FROM {source}',
  update_group = 3000, time_column = 'time_bin')\$\$);" && { echo "demo: the broken view was accepted"; exit 1; }
run "SELECT view_set_name, update_group, reads, encode(schema_hash, 'hex') AS schema_hash FROM micromegas.lakehouse_view_set_definitions ORDER BY 1;"
run "SELECT * FROM micromegas.mm_create_view(name => 'error_rate', or_replace => true,
  extract_query => \$q\$SELECT date_bin('1 day', time) AS time_bin, process_id, sum(CASE WHEN level <= 2 THEN 1 ELSE 0 END) AS errors, count(*) AS total FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY 1, 2\$q\$,
  count_src_query => \$q\$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'\$q\$,
  merge_partitions_query => 'SELECT time_bin, process_id, sum(errors) AS errors, sum(total) AS total FROM {source} GROUP BY 1, 2',
  update_group => 3000, time_column => 'time_bin');"
run "SELECT * FROM micromegas.mm_drop_view('DROP MATERIALIZED VIEW error_rate');"
run "SELECT micromegas.mm_catalog_version();"

wait "$listener"
echo
echo "-- notifications received by a second connection (LISTEN micromegas_view_definitions):"
cat "$listener_out"

echo
echo "-- the life of a view: a worker takes jobs from the queue (the client crate's example)"
cargo build -q -p micromegas_views_client --example job_worker
dsn="host=$PGHOST port=$PGPORT user=postgres dbname=postgres"
MMV_DSN="$dsn" "$CARGO_TARGET_DIR/debug/examples/job_worker" demo-worker &
worker=$!
trap 'kill $worker 2>/dev/null; "$here/cluster.sh" stop' EXIT
run "SELECT view_set_name, status, version, job_id IS NOT NULL AS refresh_queued FROM micromegas.mm_create_view(
  name => 'error_rate', update_group => 3000, time_column => 'time_bin', with_no_data => false,
  extract_query => \$q\$SELECT date_bin('1 hour', time) AS time_bin, process_id, count(*) AS total FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}' GROUP BY 1, 2\$q\$,
  count_src_query => \$q\$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'\$q\$,
  merge_partitions_query => 'SELECT time_bin, process_id, sum(total) AS total FROM {source} GROUP BY 1, 2');"
for _ in $(seq 1 50); do
  state=$(psql -X -A -t -d postgres -c "SELECT state FROM micromegas.list_jobs(view_set_name => 'error_rate') LIMIT 1")
  [ "$state" = done ] && break
  sleep 0.2
done
run "SELECT kind, view_set_name, state, worker, attempts FROM micromegas.list_jobs(view_set_name => 'error_rate');"
[ "$state" = done ] || { echo "demo: the refresh job did not finish (state $state)"; exit 1; }

echo
echo "-- its history, and a restore of the first version"
run "SELECT * FROM micromegas.mm_create_view(name => 'error_rate', or_replace => true, update_group => 3000, time_column => 'time_bin',
  extract_query => \$q\$SELECT date_bin('1 day', time) AS time_bin, process_id, count(*) AS total FROM log_entries GROUP BY 1, 2\$q\$,
  count_src_query => \$q\$SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= '{begin}' AND insert_time < '{end}'\$q\$,
  merge_partitions_query => 'SELECT time_bin, process_id, sum(total) AS total FROM {source} GROUP BY 1, 2');"
run "SELECT version, operation, updated_by FROM micromegas.mm_view_history('error_rate');"
run "SELECT * FROM micromegas.mm_restore_view('error_rate',
  (SELECT min(version) FROM micromegas.mm_view_history('error_rate') WHERE version > (SELECT max(version) FROM micromegas.mm_view_history('error_rate') WHERE operation = 'drop')));"

echo
echo "-- its partitions: a service writes two, one of an old schema; the admin retires what no longer matches"
run "SELECT micromegas.mm_write_partition('error_rate', 'global', '2024-01-01', '2024-01-02', NULL, NULL, 's3://demo/a.parquet', 4096,
  (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'error_rate'), NULL, 24),
  micromegas.mm_write_partition('error_rate', 'global', '2024-01-01', '2024-01-02', NULL, NULL, 's3://demo/old.parquet', 2048, '\\x01', NULL, 24);"
run "SELECT view_set_name, begin_insert_time, file_path, encode(incompatible_schema_hash, 'hex') AS old_hash FROM micromegas.list_incompatible_partitions();"
run "SELECT view_set_name, partitions_retired, storage_freed_bytes, retirement_messages FROM micromegas.retire_incompatible_partitions();"
run "SELECT * FROM micromegas.mm_drop_view('error_rate');"
run "SELECT file_path, file_size, expiration > now() AS waiting FROM micromegas.temporary_files;"

echo
echo "-- data flowing: a sample lake, a view, the maintenance daemon, a query"
# The example worker runs until it is stopped: SIGTERM is its only way out
# (status 143); a worker that had already died, or ended otherwise, fails
# the demo.
kill "$worker"
worker_status=0
wait "$worker" 2>/dev/null || worker_status=$?
[ "$worker_status" = 143 ] || { echo "demo: the job worker ended with status $worker_status"; exit 1; }
trap '"$here/cluster.sh" stop' EXIT
cargo build -q -p micromegas_views_daemon
daemon="$CARGO_TARGET_DIR/debug/micromegas-views-daemon"
lake="$MMV_RUN/demo-lake"
rm -rf "$lake"
echo "\$ micromegas-views-daemon sample --lake file://$lake --begin 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z"
"$daemon" sample --lake "file://$lake" --begin 2026-12-01T00:00:00Z --end 2026-12-02T00:00:00Z
run "SELECT view_set_name, status, job_id IS NOT NULL AS refresh_queued FROM micromegas.mm_create_view(\$\$
CREATE MATERIALIZED VIEW errors_per_hour WITH (
  extract_query = \$q\$
    SELECT date_bin('1 hour', time) AS hour, process_id, exe,
           sum(CASE WHEN level <= 2 THEN 1 ELSE 0 END) AS errors, count(*) AS total
      FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}'
     GROUP BY 1, 2, 3 \$q\$,
  count_src_query = \$q\$
    SELECT sum(nb_objects) AS count FROM blocks
     WHERE array_has(\"streams.tags\", 'log') AND insert_time >= '{begin}' AND insert_time < '{end}' \$q\$,
  merge_partitions_query = \$q\$
    SELECT hour, process_id, exe, sum(errors) AS errors, sum(total) AS total FROM {source} GROUP BY 1, 2, 3 \$q\$,
  update_group = 3000, time_column = 'hour', with_no_data = false)\$\$);"
echo
echo "\$ micromegas-views-daemon run --once --lake file://$lake --dsn '$dsn'"
"$daemon" run --once --lake "file://$lake" --dsn "$dsn"
run "SELECT view_set_name, begin_insert_time, end_insert_time, num_rows, file_size, file_path FROM micromegas.list_partitions('errors_per_hour');"
echo
echo "\$ micromegas-views-daemon query --lake file://$lake --dsn '$dsn' \"SELECT exe, sum(errors) AS errors, sum(total) AS total FROM errors_per_hour GROUP BY exe ORDER BY exe\""
"$daemon" query --lake "file://$lake" --dsn "$dsn" \
  "SELECT exe, sum(errors) AS errors, sum(total) AS total FROM errors_per_hour GROUP BY exe ORDER BY exe"
